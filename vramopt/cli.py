"""The ``vramopt`` command line: parse flags, call the library, display. Nothing else.

Commands: ``solve`` (the search), ``estimate`` (one training plan), ``gpus`` and
``models`` (the catalogs).
A new command is three steps: declare it with ``@main.command()``, stack the shared option
decorators it needs (``workload_options``, ``plan_options``, ``format_option``), and end
with ``emit(result_dict, output_format, render_table)``.

Exit statuses: 0 success; 1 the output could not be written to stdout (closed, a full
device, an I/O error: one line ``error: ...``; a reader that stops early, as ``| head``
does, ends the run silently); 2 bad input of any kind or no plan (every ``VramoptError`` and
every usage error becomes one line ``error: ...`` on stderr); 70 (EX_SOFTWARE) an internal
error, ``error: internal error: ...`` without a traceback unless ``--debug`` is given; 130
interrupted (Ctrl-C: the line ``interrupted``, no output file written, no status claimed).
"""

from __future__ import annotations

import errno
import math
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping

import click

from vramopt import __version__
from vramopt.costs.coefficients import coefficient
from vramopt.display import (
    OUTPUT_FORMATS,
    flatten,
    gpus_json,
    models_json,
    render_gpus,
    render_models,
    pack_rows,
    render_front,
    render_pack,
    render_infeasible,
    render_serving,
    render_solve,
    render_training,
    to_csv,
    to_json,
)
from vramopt.errors import InputError, Interrupted, VramoptError
from vramopt.estimate import estimate_serving, estimate_training
from vramopt.hardware import active_hardware, all_gpus, builtin_gpus, load_gpu
from vramopt.cli_hardware import hardware_note, hardware_option, use_request_hardware
from vramopt.cli_cost import add_time_and_cost, cost_options, with_cost_lines
from vramopt.models import all_models
from vramopt.plan import checkpointing_name, parse_checkpointing
from vramopt.api import MAX_REQUEST_BYTES, SolveRequest
from vramopt.cluster import parse_cluster, parse_jobs, parse_running, read_document
from vramopt.input_files import display_path, parse_json, read_bounded
from vramopt.optimizer.cancel import Cancellation, cancellable
from vramopt.optimizer.front import front_rows_for_csv, pareto_response
from vramopt.output_files import resolve_target, same_file, write_files_atomically, write_text_atomically
from vramopt.optimizer.search import ENGINES
from vramopt.plot import front_png
from vramopt.optimizer.search import solve as solve_request
from vramopt.costs.inference import KV_CACHE_DTYPES, QUANTIZATIONS
from vramopt.types import MAX_COUNT, PRECISIONS, WORKLOADS, SearchSpace, ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload

EXIT_OUTPUT = 1
"""stdout cannot take the output (closed, full, an I/O error); 1 is what click gives a
closed pipe too."""
EXIT_USAGE = 2
"""Bad input of any kind: a usage error, a VramoptError (click uses 2 for usage errors)."""
EXIT_INTERNAL = 70
"""An unexpected exception: a bug in vramopt (EX_SOFTWARE of sysexits.h)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C: 128 + SIGINT, what a shell reports for a command that SIGINT ended."""

OFFLOAD_CHOICES = ("none", "cpu", "nvme")
OPTIMIZER_CHOICES = ("adam", "adam8bit", "adafactor", "sgd")
"""costs/optimizer_states.OPTIMIZER_NAMES, spelled out here so --help imports no numpy
(tests/unit/test_technique_completeness.py checks the two agree)."""
DEFAULT_HEADROOM_FRACTION = 0.10
"""The seed's rule: keep at least 10% of each GPU's memory free."""


# ---------------------------------------------------------------------------------------
# Error handling: one line on stderr, never a traceback by default


class StdoutUnwritable(Exception):
    """stdout cannot take the output: closed, a full device, an I/O error (exit 1)."""


def echo(text: str, err: bool = False) -> None:
    """click.echo, with text that UTF-8 cannot encode (lone surrogates from a file name or a
    JSON escape such as "\\ud800") written as backslash escapes instead of failing.
    stdout that cannot be written raises ``StdoutUnwritable`` (a closed pipe stays an
    EPIPE ``OSError``, which click ends quietly); stderr that cannot is given up on."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:  # the descriptor was closed when Python started
        if err:
            return
        raise StdoutUnwritable("stdout is closed")
    try:
        click.echo(text.encode("utf-8", "backslashreplace").decode("utf-8"), err=err)
    except OSError as error:
        if err:
            return  # nowhere left to report it; the exit status still says it
        if error.errno == errno.EPIPE:
            raise
        raise StdoutUnwritable(error.strerror or str(error)) from None


def fail_line(message: str) -> None:
    echo(f"error: {message}", err=True)


def _silence_stdout() -> None:
    """After a failed write, point stdout at the null device so that the interpreter's
    final flush of what is still buffered cannot print a second error."""
    try:
        descriptor = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
    except (AttributeError, OSError, ValueError):
        return
    os.dup2(null, descriptor)
    os.close(null)


class _InterruptedRun(Exception):
    """Carries an interrupt through click's main, which would turn it into "Aborted!"."""


@contextmanager
def interrupt_watch() -> Iterator[Cancellation]:
    """Run the command under a ``Cancellation`` that Ctrl-C requests.

    While CP-SAT searches, the main thread is inside the solver and Python's SIGINT
    handler cannot run, so the signal is also written to a wake-up pipe that a helper
    thread reads: it stops the searches in flight (again every 0.1 s, for one that was just
    starting). Python's own handler then raises KeyboardInterrupt as soon as the main
    thread is back in Python. Nothing is installed outside the main thread, off POSIX, or when
    SIGINT is not Python's default handler (ignored, or handled by an embedding program).
    """
    token = Cancellation()
    watchable = os.name == "posix" and threading.current_thread() is threading.main_thread()
    if not watchable or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        with cancellable(token):
            yield token
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    finished = threading.Event()

    def watch() -> None:
        while True:
            try:
                received = os.read(read_end, 64)
            except OSError:
                return
            if not received:  # the write end closed: the command is over
                return
            if signal.SIGINT in received:
                while not finished.is_set():
                    token.request()
                    finished.wait(0.1)
                return

    watcher = threading.Thread(target=watch, name="vramopt-interrupt-watch", daemon=True)
    watcher.start()
    try:
        with cancellable(token):
            yield token
    finally:
        signal.set_wakeup_fd(previous)
        finished.set()
        os.close(write_end)
        watcher.join(5.0)
        if not watcher.is_alive():
            os.close(read_end)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


class SingleValueOptions:
    """Refuses an option given twice (``--max-gpus 1 --max-gpus 64``): click would keep
    the last silently. Options that take several values (``multiple``, ``count``) and the
    eager ones (``--help``, ``--version``) may repeat."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            _, _, order = self.make_parser(ctx).parse_args(args=list(args))  # a copy: the parser consumes it
            seen: set[str] = set()
            for param in order:
                if not isinstance(param, click.Option) or param.multiple or param.count or param.is_eager:
                    continue
                if param.name in seen:
                    names = "/".join(param.opts + param.secondary_opts)
                    raise click.UsageError(f"{names} is given more than once; give it once", ctx)
                seen.add(param.name)
        return super().parse_args(ctx, args)


class VramoptCommand(SingleValueOptions, click.Command):
    """Every subcommand: repeated single-value options are refused."""


class VramoptGroup(SingleValueOptions, click.Group):
    """A click group that reports every failure as one ``error:`` line."""

    command_class = VramoptCommand

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt:
            raise _InterruptedRun() from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except (KeyboardInterrupt, Interrupted):
            raise _InterruptedRun() from None
        except VramoptError as error:
            fail_line(one_line(str(error)))
            raise click.exceptions.Exit(EXIT_USAGE) from None
        except StdoutUnwritable as error:
            _silence_stdout()
            fail_line(f"cannot write the output to stdout: {error}")
            raise click.exceptions.Exit(EXIT_OUTPUT) from None
        except OSError as error:
            if error.errno == errno.EPIPE:
                raise  # click's main() handles a closed pipe (e.g. `| head`)
            return self._internal_error(ctx, error)
        except Exception as error:  # noqa: BLE001 - the last line of defence for users
            return self._internal_error(ctx, error)

    @staticmethod
    def _internal_error(ctx: click.Context, error: Exception) -> Any:
        if ctx.params.get("debug"):
            raise error
        fail_line(f"internal error: {type(error).__name__}: {one_line(str(error))} (please report; `vramopt --debug ...` shows the traceback)")
        raise click.exceptions.Exit(EXIT_INTERNAL) from None

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        """As click's, but a usage error prints one line instead of usage + hint + error."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            with interrupt_watch():
                try:
                    status = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
                except click.exceptions.ClickException as error:
                    message = one_line(error.format_message())
                    context = getattr(error, "ctx", None)
                    if context is not None:
                        message += f" (see '{context.command_path} --help')"
                    fail_line(message)
                    status = error.exit_code
                except click.exceptions.Abort as error:
                    if isinstance(error.__cause__, KeyboardInterrupt):
                        raise _InterruptedRun() from None
                    click.echo("Aborted!", err=True)
                    status = 1
                status = status if isinstance(status, int) else 0
                if status == 0:
                    status = self._flush_stdout()
        except (_InterruptedRun, KeyboardInterrupt):
            status = self._interrupted()
        sys.exit(status)

    @staticmethod
    def _flush_stdout() -> int:
        """What is still buffered goes out now, while a failure can be reported."""
        try:
            if sys.stdout is not None:
                sys.stdout.flush()
        except OSError as error:
            if error.errno == errno.EPIPE:
                _silence_stdout()
                return EXIT_OUTPUT
            _silence_stdout()
            fail_line(f"cannot write the output to stdout: {error.strerror or error}")
            return EXIT_OUTPUT
        return 0

    @staticmethod
    def _interrupted() -> int:
        """One line, status 130; a second Ctrl-C while saying so is ignored."""
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            echo("interrupted", err=True)
        finally:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, previous)
        return EXIT_INTERRUPTED


# ---------------------------------------------------------------------------------------
# Parameter types


class HeadroomType(click.ParamType):
    """A fraction in [0, 1) of each GPU's memory that must stay free: '0.1' or '10%'."""

    name = "fraction"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            fraction = value
        else:
            text = str(value).strip()
            try:
                fraction = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
            except ValueError:
                self.fail(f"'{value}' is not a fraction like 0.1 or a percentage like 10%", param, ctx)
        if not math.isfinite(fraction) or not 0.0 <= fraction < 1.0:
            self.fail(f"headroom must be in [0, 1) (or 0% to <100%), got '{value}'", param, ctx)
        return fraction


class CheckpointingType(click.ParamType):
    """'none', 'selective', 'full' (= every:1) or 'every:K'; normalized to the plan's spelling."""

    name = "none|selective|full|every:K"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return checkpointing_name(*parse_checkpointing(str(value)))
        except InputError as error:
            self.fail(str(error), param, ctx)


POSITIVE = click.IntRange(min=1, max=MAX_COUNT)


# ---------------------------------------------------------------------------------------
# Shared options (reused by every command that takes a workload or a plan)


def format_option(choices: tuple[str, ...] = OUTPUT_FORMATS) -> Callable:
    return click.option(
        "--format", "output_format", type=click.Choice(choices), default=choices[0], show_default=True,
        help="Output: a readable table, the JSON contract (docs/json-contract.md) or CSV.",
    )


def apply_options(options: list[Callable]) -> Callable:
    def decorate(function: Callable) -> Callable:
        for option in reversed(options):
            function = option(function)
        return function

    return decorate


workload_options = apply_options(
    [
        click.option("--workload", "workload_kind", type=click.Choice(WORKLOADS), default="train", show_default=True,
                     help="train (pretraining), finetune (full), lora, qlora (4-bit base), infer (serving)."),
        click.option("--model", default="70b", show_default=True,
                     help="Catalog name or alias (see `vramopt models`), or a Hugging Face config.json path."),
        click.option("--context", type=POSITIVE, default=8192, show_default=True,
                     help="infer: maximum tokens per sequence (vLLM max-model-len)."),
        click.option("--min-slots", type=POSITIVE, default=1, show_default=True,
                     help="infer: concurrent sequences the deployment must hold at least."),
        click.option("--max-latency-ms", type=click.FloatRange(min=0.0, min_open=True, max=1e7), default=None,
                     help="infer: upper bound of the time per output token, milliseconds."),
        click.option("--lora-rank", type=click.IntRange(1, 65536), default=16, show_default=True,
                     help="lora/qlora: adapter rank (adapters on every linear layer)."),
        click.option("--seq-len", type=POSITIVE, default=4096, show_default=True, help="Tokens per sequence."),
        click.option("--global-batch", type=POSITIVE, default=1024, show_default=True,
                     help="Sequences per optimizer step (must be a multiple of micro-batch x data parallel)."),
        click.option("--headroom", type=HeadroomType(), default=DEFAULT_HEADROOM_FRACTION, show_default=True,
                     help="Fraction of each GPU's memory that must stay free: 0.1 or 10%."),
    ]
)

plan_options = apply_options(
    [
        click.option("--gpu", default="b200", show_default=True, help="GPU type (see `vramopt gpus`)."),
        click.option("--gpus", type=POSITIVE, default=1, show_default=True, help="GPU count = tp x cp x pp x dp."),
        click.option("--tp", "tensor_parallel", type=POSITIVE, default=1, show_default=True, help="Tensor-parallel degree."),
        click.option("--cp", "--context-parallel", "context_parallel", type=POSITIVE, default=1, show_default=True,
                     help="Context-parallel degree: ring attention over cp GPUs that split each sequence."),
        click.option("--pp", "pipeline_parallel", type=POSITIVE, default=1, show_default=True, help="Pipeline-parallel stages."),
        click.option("--sequence-parallel/--no-sequence-parallel", default=False, show_default=True,
                     help="Shard norm/dropout activations over the tensor-parallel group (needs --tp > 1)."),
        click.option("--virtual-stages", type=POSITIVE, default=1, show_default=True,
                     help="Interleaved pipeline: model chunks per GPU (1 = plain 1F1B)."),
        click.option("--zero", "zero_stage", type=click.IntRange(0, 3), default=0, show_default=True, help="ZeRO stage 0-3."),
        click.option("--checkpoint", "checkpointing", type=CheckpointingType(), default="none", show_default=True,
                     help="Activation checkpointing: none, selective, full (= every:1) or every:K layers."),
        click.option("--precision", type=click.Choice(PRECISIONS), default="bf16", show_default=True,
                     help="Compute precision (fp32 master weights and Adam states stay fp32)."),
        click.option("--grad-comm-precision", type=click.Choice(PRECISIONS), default=None,
                     help="Precision of gradients on the wire.  [default: same as --precision]"),
        click.option("--offload", type=click.Choice(OFFLOAD_CHOICES), default="none", show_default=True,
                     help="cpu: optimizer states to host RAM (ZeRO >= 1); nvme: all model states to NVMe (ZeRO 3)."),
        click.option("--optimizer", type=click.Choice(OPTIMIZER_CHOICES), default="adam", show_default=True,
                     help="Optimizer-state format: adam (fp32 states), adam8bit (bitsandbytes), adafactor, sgd (momentum)."),
        click.option("--flash-attention/--no-flash-attention", default=True, show_default=True,
                     help="FlashAttention: no s^2 attention-score activations."),
        click.option("--micro-batch", type=POSITIVE, default=1, show_default=True, help="Sequences per micro-batch per GPU."),
        click.option("--quantization", type=click.Choice(QUANTIZATIONS), default="bf16", show_default=True,
                     help="infer: weight format (int8/int4 weight-only; fp8/fp4 need those tensor cores)."),
        click.option("--kv-cache-dtype", type=click.Choice(KV_CACHE_DTYPES), default="bf16", show_default=True,
                     help="infer: KV cache element type."),
        click.option("--paged-kv/--no-paged-kv", default=True, show_default=True,
                     help="infer: PagedAttention (store tokens in use) or contiguous (full context per slot)."),
        click.option("--slots", type=POSITIVE, default=16, show_default=True, help="infer: concurrent sequences per replica."),
        click.option("--mig-profile", default="none", show_default=True, help="infer: MIG profile per replica (e.g. 1g.10gb) or none."),
        click.option("--speculative/--no-speculative", "speculative_decoding", default=False, show_default=True,
                     help="infer: speculative decoding with a draft model."),
    ]
)

TRAINING_ONLY = {
    "seq_len": "--seq-len", "global_batch": "--global-batch", "sequence_parallel": "--sequence-parallel",
    "virtual_stages": "--virtual-stages", "context_parallel": "--cp", "zero_stage": "--zero", "checkpointing": "--checkpoint", "precision": "--precision",
    "grad_comm_precision": "--grad-comm-precision", "offload": "--offload", "flash_attention": "--flash-attention",
    "micro_batch": "--micro-batch", "optimizer": "--optimizer",
}
SERVING_ONLY = {
    "context": "--context", "min_slots": "--min-slots", "max_latency_ms": "--max-latency-ms", "quantization": "--quantization",
    "kv_cache_dtype": "--kv-cache-dtype", "paged_kv": "--paged-kv", "slots": "--slots", "mig_profile": "--mig-profile",
    "speculative_decoding": "--speculative",
}


def given(name: str) -> bool:
    """Whether the user typed this option (not click's default)."""
    context = click.get_current_context()
    source = context.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def reject_unused_options(kind: str) -> None:
    """Nothing the user gave is silently ignored: a flag that does not apply is an error."""
    context = click.get_current_context()
    unused = dict(SERVING_ONLY) if kind != "infer" else dict(TRAINING_ONLY)
    if kind not in ("lora", "qlora"):
        unused["lora_rank"] = "--lora-rank"
    for name, flag in unused.items():
        if name in context.params and given(name):
            raise click.UsageError(f"{flag} does not apply to --workload {kind}")


def build_plan(options: Mapping[str, Any]):
    if options["workload_kind"] == "infer":
        return ServingPlan(
            gpu=options["gpu"],
            gpus=options["gpus"],
            tensor_parallel=options["tensor_parallel"],
            pipeline_parallel=options["pipeline_parallel"],
            quantization=options["quantization"],
            kv_cache_dtype=options["kv_cache_dtype"],
            paged_kv=options["paged_kv"],
            slots=options["slots"],
            mig_profile=options["mig_profile"],
            speculative_decoding=options["speculative_decoding"],
        )
    return TrainingPlan(
        gpu=options["gpu"],
        gpus=options["gpus"],
        tensor_parallel=options["tensor_parallel"],
        context_parallel=options["context_parallel"],
        pipeline_parallel=options["pipeline_parallel"],
        sequence_parallel=options["sequence_parallel"],
        virtual_stages=options["virtual_stages"],
        zero_stage=options["zero_stage"],
        checkpointing=options["checkpointing"],
        precision=options["precision"],
        grad_comm_precision=options["grad_comm_precision"] or options["precision"],
        offload=options["offload"],
        flash_attention=options["flash_attention"],
        micro_batch=options["micro_batch"],
        optimizer=options["optimizer"],
    )


def build_workload(options: Mapping[str, Any]):
    kind = options["workload_kind"]
    reject_unused_options(kind)
    if kind == "infer":
        return ServingWorkload(
            model=options["model"],
            context=options["context"],
            headroom_fraction=options["headroom"],
            min_slots=options["min_slots"],
            max_latency_ms=options["max_latency_ms"],
        )
    return TrainingWorkload(
        model=options["model"],
        seq_len=options["seq_len"],
        global_batch=options["global_batch"],
        headroom_fraction=options["headroom"],
        kind=kind,
        lora_rank=options["lora_rank"],
    )


# ---------------------------------------------------------------------------------------
# Output


def emit(result: Any, output_format: str, render_table: Callable[[Any], str] | None = None) -> None:
    """Write one result to stdout.

    ``json``: ``result`` as is (a v1 dict or a list of them). ``csv``: a v1 dict becomes one
    row of dotted ``plan.*``, ``memory.*``, ``throughput.*`` columns; a list is taken as rows
    already flattened (e.g. a Pareto front). ``table``: ``render_table(result)``.
    """
    if output_format == "json":
        text = to_json(result)
    elif output_format == "csv":
        rows = result if isinstance(result, list) else [flatten(result)]
        text = to_csv(rows).rstrip("\n")
    elif render_table is not None:
        text = render_table(result)
    else:
        raise ValueError(f"no table view for this result (format {output_format!r})")
    echo(text)


def offload_limits(gpu_name: str) -> tuple[float, float]:
    """Host RAM and NVMe per node that offloaded states may use (bytes), for display."""
    node = load_gpu(gpu_name).node
    return (
        node.host_ram_bytes * coefficient("host_ram_usable_fraction"),
        node.nvme_capacity_bytes * coefficient("nvme_usable_fraction"),
    )


# ---------------------------------------------------------------------------------------
# Commands


@click.group(cls=VramoptGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="vramopt")
@click.option("--debug", is_flag=True, hidden=True, help="Show the traceback of internal errors.")
def main(debug: bool) -> None:
    """Find the highest-throughput combination of GPU memory techniques that keeps every
    GPU within its memory headroom. GB = 1e9 bytes throughout.

    Exit statuses: 0 success, 1 stdout cannot take the output, 2 bad input or no plan,
    70 a bug in vramopt (please report it), 130 interrupted.
    """


@main.command()
@workload_options
@plan_options
@hardware_option
@cost_options
@format_option()
def estimate(output_format: str, **options: Any) -> None:
    """Evaluate one plan (training, fine-tuning, LoRA/QLoRA or serving): memory per GPU,
    whether it fits, and throughput."""
    workload = build_workload(options)
    if isinstance(workload, ServingWorkload):
        result = estimate_serving(workload, build_plan(options)).to_dict()
        add_time_and_cost(result)
        emit(result, output_format, with_cost_lines(render_serving))
        return
    result = estimate_training(workload, build_plan(options)).to_dict()
    add_time_and_cost(result)
    host_limit, nvme_limit = offload_limits(result["plan"]["gpu"])
    emit(result, output_format, with_cost_lines(lambda data: render_training(data, host_limit, nvme_limit)))


@main.command()
@hardware_option
@format_option(("table", "json"))
def gpus(output_format: str) -> None:
    """List the hardware catalog (every value's source is in --format json); with --hardware, merged with that file."""
    catalog = all_gpus()
    note = hardware_note(active_hardware(), {gpu.name for gpu in builtin_gpus()})
    emit(gpus_json(catalog) if output_format == "json" else catalog, output_format,
         lambda rows: render_gpus(rows) + (f"\n{note}" if note else ""))


@main.command()
@format_option(("table", "json"))
def models(output_format: str) -> None:
    """List the model catalog (every value's source is in --format json)."""
    catalog = all_models()
    emit(models_json(catalog) if output_format == "json" else catalog, output_format, render_models)


class ChoiceListType(click.ParamType):
    """``KEY=V1,V2`` for --allow / --forbid / --pin (KEY: a plan field, see `solve --help`)."""

    name = "KEY=VALUES"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, tuple[str, ...]]:
        if isinstance(value, tuple):
            return value
        key, separator, values = str(value).partition("=")
        items = tuple(item.strip() for item in values.split(",") if item.strip())
        if not separator or not key.strip() or not items:
            self.fail(f"'{value}' is not KEY=VALUE[,VALUE...]", param, ctx)
        return key.strip(), items


def collect_choices(pairs: tuple, option: str, single: bool = False) -> dict[str, Any]:
    choices: dict[str, Any] = {}
    for key, values in pairs:
        if key in choices:
            raise click.UsageError(f"{option} {key} is given twice")
        if single and len(values) != 1:
            raise click.UsageError(f"{option} {key} takes one value, got {', '.join(values)}")
        choices[key] = values[0] if single else values
    return choices


TIME_LIMIT = click.FloatRange(min=0.001, max=3600.0)


def space_options(default_max_gpus: int) -> Callable:
    """The search-space flags shared by `solve` and `pareto`."""
    return apply_options(
        [
            click.option("--gpu", "gpu_types", multiple=True, default=("b200",), show_default=True,
                         help="GPU type allowed (repeat for several; see `vramopt gpus`)."),
            click.option("--max-gpus", type=click.IntRange(1, 1_048_576), default=default_max_gpus, show_default=True,
                         help="Most GPUs a plan may use."),
            click.option("--whole-nodes/--no-whole-nodes", default=True, show_default=True,
                         help="Beyond one node, use whole nodes only."),
            click.option("--allow-tp-across-nodes", is_flag=True,
                         help="Let tensor parallelism span nodes (off: TP stays in the NVLink domain)."),
            click.option("--allow-fp4", is_flag=True, help="Add fp4 to the precision domain (experimental; off by default)."),
            click.option("--allow", "allow", type=ChoiceListType(), multiple=True,
                         help="Only these values for a plan field, e.g. --allow zero_stage=2,3 (replaces the default domain)."),
            click.option("--forbid", "forbid", type=ChoiceListType(), multiple=True,
                         help="Never these values, e.g. --forbid offload=nvme."),
            click.option("--pin", "pin", type=ChoiceListType(), multiple=True,
                         help="Exactly this value, e.g. --pin tensor_parallel=8."),
        ]
    )


def build_space(options: Mapping[str, Any], **extra: Any) -> SearchSpace:
    allow = collect_choices(options["allow"], "--allow")
    pin = collect_choices(options["pin"], "--pin", single=True)
    gpus = tuple(options["gpu_types"])
    if not given("gpu_types"):
        # --allow/--pin gpu=... alone choose the GPU types searched.
        if "gpu" in pin:
            gpus = (pin["gpu"],)
        elif "gpu" in allow:
            gpus = tuple(allow["gpu"])
    return SearchSpace(
        gpus=gpus,
        max_gpus=options["max_gpus"],
        whole_nodes=options["whole_nodes"],
        allow_tp_across_nodes=options["allow_tp_across_nodes"],
        allow_fp4=options["allow_fp4"],
        allow=allow,
        forbid=collect_choices(options["forbid"], "--forbid"),
        pin=pin,
        **extra,
    )


@main.command()
@workload_options
@space_options(default_max_gpus=8)
@click.option("--objective", type=click.Choice(("throughput", "min-gpus", "per-gpu")), default="throughput", show_default=True,
              help="throughput: max tokens/s; min-gpus: fewest GPUs reaching --min-tokens-per-s; per-gpu: max tokens/s per GPU.")
@click.option("--min-tokens-per-s", type=click.FloatRange(min=0.0, min_open=True, max=1e15), default=None,
              help="Throughput target for --objective min-gpus.")
@click.option("--time-limit", "time_limit_s", type=TIME_LIMIT, default=10.0, show_default=True, help="Solver time limit, seconds.")
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True, help="CP-SAT worker threads.")
@click.option("--engine", type=click.Choice(ENGINES), default="cp-sat", show_default=True,
              help="cp-sat, or the exhaustive reference enumerator over the same tables.")
@click.option("--request", "request_path", type=str, default=None,
              help="Read the whole request from a JSON file ('-' for stdin; docs/api.md); no other flag may be given.")
@hardware_option
@cost_options
@click.option("--export", "export", type=(click.Choice(("deepspeed", "vllm")), str), default=None,
              help="Also write a framework config of the plan: --export deepspeed ds.json or --export vllm vllm.json.")
@format_option()
def solve(output_format: str, request_path: str | None, export: tuple[str, str] | None, **options: Any) -> None:
    """Find the highest-throughput plan that fits every GPU with its headroom.

    Plan fields for --allow/--forbid/--pin. Training: gpu, gpus, tensor_parallel, context_parallel,
    pipeline_parallel, data_parallel, sequence_parallel, virtual_stages, precision,
    grad_comm_precision, micro_batch, zero_stage, offload, optimizer, checkpointing, flash_attention.
    Serving (--workload infer): gpu, gpus, tensor_parallel, pipeline_parallel, quantization,
    mig_profile, kv_cache_dtype, paged_kv, slots, speculative_decoding.
    Exit status: 0 with a plan, 2 when the request is invalid or infeasible (the reason
    and the smallest fix are printed).
    """
    if export is not None:
        resolve_target(export[1])  # a device, a directory or a link to one: refused before the work
    if request_path is not None:
        given_flags = [name for name in options if given(name)]
        if given_flags:
            raise click.UsageError(f"--request carries the whole request; --{given_flags[0].replace('_', '-')} cannot be given with it")
        request = SolveRequest.from_dict(read_json_request(request_path))
        workload, space, engine = request.workload, request.space, request.engine
        use_request_hardware(request.hardware)
    else:
        space = build_space(
            options,
            objective=options["objective"],
            min_tokens_per_s=options["min_tokens_per_s"],
            time_limit_s=options["time_limit_s"],
            workers=options["workers"],
        )
        workload, engine = build_workload(options), options["engine"]
    result = solve_request(workload, space, engine=engine)
    data = result.to_dict()
    add_time_and_cost(data)
    if result.estimate is None:
        if output_format == "json":
            emit(data, "json")
        elif output_format == "csv":
            emit([{"solver.status": data["solver"]["status"], "explanation.reason": (data["explanation"] or {}).get("reason", "")}], "csv")
        else:
            echo(render_infeasible(data) if data["explanation"] else f"no plan: solver status {data['solver']['status']}")
        if data["explanation"]:
            fail_line(result.explanation.one_line())
        else:
            fail_line(f"no plan found within the {space.time_limit_s:g} s time limit (status {data['solver']['status']}); raise --time-limit")
        raise SystemExit(EXIT_USAGE)
    if export is not None:
        export_plan(data, *export)
    host_limit, nvme_limit = offload_limits(data["plan"]["gpu"]) if data["workload"] != "infer" else (None, None)
    if output_format == "csv":
        row = flatten(data)
        row.update({f"solver.{key}": value for key, value in data["solver"].items() if key != "objective_value"})
        emit([row], "csv")
        return
    emit(data, output_format, with_cost_lines(lambda response: render_solve(response, host_limit, nvme_limit)))


@main.command()
@workload_options
@space_options(default_max_gpus=64)
@click.option("--output", "output_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the front as CSV here (one row per plan).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Also draw the front as a PNG (needs the 'plot' extra: matplotlib).")
@click.option("--verify", is_flag=True, help="Certify every front point, and per GPU count a pinned solve's best plan, with CP-SAT (slower).")
@hardware_option
@format_option()
def pareto(output_format: str, output_path: str | None, plot_path: str | None, verify: bool, **options: Any) -> None:
    """Every non-dominated plan over tokens/s (up), GPUs (down) and memory per GPU (down).

    The front is exact: it is the non-dominated subset of the whole candidate table, the
    same integer tables the solver and its exhaustive oracle read (docs/pareto.md).
    """
    if output_path and plot_path and same_file(output_path, plot_path):
        raise click.UsageError(f"--output and --plot name the same file {display_path(output_path)}")
    for flag, path in (("--output", output_path), ("--plot", plot_path)):
        if path is not None and not path.strip():
            raise click.UsageError(f"{flag} needs a file name")
        if path is not None:
            resolve_target(path)  # a device, a directory or a link to one: refused before the work
    workload = build_workload(options)
    space = build_space(options)
    response = pareto_response(workload, space, verify=verify)
    rows = front_rows_for_csv(response)
    if not response["front"]:
        # As solve: no plan is a failure, and no output file is written or truncated.
        if output_format == "json":
            emit(response, "json")
        fail_line("no plan fits, so the Pareto front is empty; `vramopt solve` with the same flags explains why "
                  "and names the smallest change that fits")
        raise SystemExit(EXIT_USAGE)
    outputs: dict[str, str | bytes] = {}
    if output_path:
        outputs[output_path] = to_csv(rows)
    if plot_path:
        outputs[plot_path] = front_png(response)
    write_files_atomically(outputs)  # both or neither
    if output_format == "json":
        emit(response, "json")
    elif output_format == "csv":
        emit(rows, "csv")
    else:
        echo(render_front(response, rows, output_path, plot_path))


@main.command()
@click.option("--cluster", "cluster_path", required=True, type=str, help="Cluster inventory, JSON or TOML (docs/pack.md).")
@click.option("--jobs", "jobs_path", required=True, type=str, help="Job queue, JSON or TOML.")
@click.option("--running", "running_path", type=str, default=None, help="Jobs already running: their GPUs and MIG instances stay theirs.")
@click.option("--time-limit", "time_limit_s", type=TIME_LIMIT, default=10.0, show_default=True, help="Solver time limit, seconds.")
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True, help="CP-SAT worker threads.")
@hardware_option
@format_option()
def pack(output_format: str, cluster_path: str, jobs_path: str, running_path: str | None, time_limit_s: float, workers: int) -> None:
    """Admit and place a queue of jobs on a shared cluster: one plan and one placement per
    admitted job, maximizing the weighted normalized throughput, every GPU in its headroom."""
    from vramopt.optimizer.pack import solve_pack  # OR-Tools is imported only by the commands that solve

    nodes = parse_cluster(read_document(cluster_path), cluster_path)
    jobs = parse_jobs(read_document(jobs_path), jobs_path)
    running = parse_running(read_document(running_path), nodes, running_path) if running_path else ()
    response = solve_pack(jobs, nodes, running, time_limit_s=time_limit_s, workers=workers)
    if output_format == "json":
        emit(response, "json")
    elif output_format == "csv":
        emit(pack_rows(response), "csv")
    else:
        echo(render_pack(response))


def read_json_request(path: str) -> Any:
    """A request from a file or stdin ('-'), bounded in size, as parsed JSON (a key given
    twice and oversized integers refused)."""

    def fail(detail: str) -> InputError:
        return InputError(f"the request {display_path(path)}: {detail}")

    return parse_json(read_bounded(path, MAX_REQUEST_BYTES, fail, stdin=path == "-"), fail)


def export_plan(response: dict, target: str, path: str) -> None:
    """Write the framework config and print its companion notes (what it cannot express)."""
    from vramopt.exporters import export

    result = export(target, response)
    write_text_atomically(path, result.text())
    for note in result.notes:
        echo(f"note ({target}): {note}", err=True)


from vramopt.cli_sweep import add_sweep_command  # noqa: E402 - the sweep command's body lives there

add_sweep_command(main)


if __name__ == "__main__":  # pragma: no cover
    main()
