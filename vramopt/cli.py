"""The ``vramopt`` command line: parse flags, call the library, display. Nothing else.

Commands: ``solve`` (the search), ``estimate`` (one training plan), ``gpus`` and
``models`` (the catalogs).
A new command is three steps: declare it with ``@main.command()``, stack the shared option
decorators it needs (``workload_options``, ``plan_options``, ``format_option``), and end
with ``emit(result_dict, output_format, render_table)``.

Errors: every ``VramoptError`` and every usage error becomes one line ``error: ...`` on
stderr and exit status 2; an unexpected exception becomes ``error: internal error: ...``
and exit status 70 (EX_SOFTWARE), without a traceback unless ``--debug`` is given.
"""

from __future__ import annotations

import errno
import math
import os
import sys
from typing import Any, Callable, Mapping

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
from vramopt.errors import InputError, VramoptError
from vramopt.estimate import estimate_serving, estimate_training
from vramopt.hardware import all_gpus, load_gpu
from vramopt.models import all_models
from vramopt.plan import checkpointing_name, parse_checkpointing
from vramopt.api import MAX_REQUEST_BYTES, SolveRequest
from vramopt.cluster import parse_cluster, parse_jobs, parse_running, read_document
from vramopt.optimizer.pack import solve_pack
from vramopt.optimizer.front import front_rows_for_csv, pareto_response
from vramopt.optimizer.search import ENGINES
from vramopt.plot import front_png
from vramopt.optimizer.search import solve as solve_request
from vramopt.costs.inference import KV_CACHE_DTYPES, QUANTIZATIONS
from vramopt.types import MAX_COUNT, PRECISIONS, WORKLOADS, SearchSpace, ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload

EXIT_USAGE = 2
"""Bad input of any kind: a usage error, a VramoptError (click uses 2 for usage errors)."""
EXIT_INTERNAL = 70
"""An unexpected exception: a bug in vramopt (EX_SOFTWARE of sysexits.h)."""

OFFLOAD_CHOICES = ("none", "cpu", "nvme")
DEFAULT_HEADROOM_FRACTION = 0.10
"""The seed's rule: keep at least 10% of each GPU's memory free."""


# ---------------------------------------------------------------------------------------
# Error handling: one line on stderr, never a traceback by default


def echo(text: str, err: bool = False) -> None:
    """click.echo, with text that UTF-8 cannot encode (lone surrogates from a file name or a
    JSON escape such as "\\ud800") written as backslash escapes instead of failing."""
    click.echo(text.encode("utf-8", "backslashreplace").decode("utf-8"), err=err)


def fail_line(message: str) -> None:
    echo(f"error: {message}", err=True)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


class VramoptGroup(click.Group):
    """A click group that reports every failure as one ``error:`` line."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except VramoptError as error:
            fail_line(one_line(str(error)))
            raise click.exceptions.Exit(EXIT_USAGE) from None
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
            status = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.ClickException as error:
            message = one_line(error.format_message())
            context = getattr(error, "ctx", None)
            if context is not None:
                message += f" (see '{context.command_path} --help')"
            fail_line(message)
            status = error.exit_code
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            status = 1
        sys.exit(status if isinstance(status, int) else 0)


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
        click.option("--gpus", type=POSITIVE, default=1, show_default=True, help="GPU count = tp x pp x dp."),
        click.option("--tp", "tensor_parallel", type=POSITIVE, default=1, show_default=True, help="Tensor-parallel degree."),
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
    "virtual_stages": "--virtual-stages", "zero_stage": "--zero", "checkpointing": "--checkpoint", "precision": "--precision",
    "grad_comm_precision": "--grad-comm-precision", "offload": "--offload", "flash_attention": "--flash-attention",
    "micro_batch": "--micro-batch",
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
    GPU within its memory headroom. GB = 1e9 bytes throughout."""


@main.command()
@workload_options
@plan_options
@format_option()
def estimate(output_format: str, **options: Any) -> None:
    """Evaluate one plan (training, fine-tuning, LoRA/QLoRA or serving): memory per GPU,
    whether it fits, and throughput."""
    workload = build_workload(options)
    if isinstance(workload, ServingWorkload):
        result = estimate_serving(workload, build_plan(options)).to_dict()
        emit(result, output_format, render_serving)
        return
    result = estimate_training(workload, build_plan(options)).to_dict()
    host_limit, nvme_limit = offload_limits(result["plan"]["gpu"])
    emit(result, output_format, lambda data: render_training(data, host_limit, nvme_limit))


@main.command()
@format_option(("table", "json"))
def gpus(output_format: str) -> None:
    """List the hardware catalog (every value's source is in --format json)."""
    catalog = all_gpus()
    emit(gpus_json(catalog) if output_format == "json" else catalog, output_format, render_gpus)


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
@click.option("--export", "export", type=(click.Choice(("deepspeed", "vllm")), str), default=None,
              help="Also write a framework config of the plan: --export deepspeed ds.json or --export vllm vllm.json.")
@format_option()
def solve(output_format: str, request_path: str | None, export: tuple[str, str] | None, **options: Any) -> None:
    """Find the highest-throughput plan that fits every GPU with its headroom.

    Plan fields for --allow/--forbid/--pin. Training: gpu, gpus, tensor_parallel,
    pipeline_parallel, data_parallel, sequence_parallel, virtual_stages, precision,
    grad_comm_precision, micro_batch, zero_stage, offload, checkpointing, flash_attention.
    Serving (--workload infer): gpu, gpus, tensor_parallel, pipeline_parallel, quantization,
    mig_profile, kv_cache_dtype, paged_kv, slots, speculative_decoding.
    Exit status: 0 with a plan, 2 when the request is invalid or infeasible (the reason
    and the smallest fix are printed).
    """
    if request_path is not None:
        given_flags = [name for name in options if given(name)]
        if given_flags:
            raise click.UsageError(f"--request carries the whole request; --{given_flags[0].replace('_', '-')} cannot be given with it")
        request = SolveRequest.from_dict(read_json_request(request_path))
        workload, space, engine = request.workload, request.space, request.engine
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
    emit(data, output_format, lambda response: render_solve(response, host_limit, nvme_limit))


@main.command()
@workload_options
@space_options(default_max_gpus=64)
@click.option("--output", "output_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the front as CSV here (one row per plan).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Also draw the front as a PNG (needs the 'plot' extra: matplotlib).")
@click.option("--verify", is_flag=True, help="Certify every front point, and per GPU count a pinned solve's best plan, with CP-SAT (slower).")
@format_option()
def pareto(output_format: str, output_path: str | None, plot_path: str | None, verify: bool, **options: Any) -> None:
    """Every non-dominated plan over tokens/s (up), GPUs (down) and memory per GPU (down).

    The front is exact: it is the non-dominated subset of the whole candidate table, the
    same integer tables the solver and its exhaustive oracle read (docs/pareto.md).
    """
    if output_path and plot_path and os.path.abspath(output_path) == os.path.abspath(plot_path):
        raise click.UsageError(f"--output and --plot name the same file {output_path}")
    for flag, path in (("--output", output_path), ("--plot", plot_path)):
        if path is not None and not path.strip():
            raise click.UsageError(f"{flag} needs a file name")
    workload = build_workload(options)
    space = build_space(options)
    response = pareto_response(workload, space, verify=verify)
    rows = front_rows_for_csv(response)
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
@format_option()
def pack(output_format: str, cluster_path: str, jobs_path: str, running_path: str | None, time_limit_s: float, workers: int) -> None:
    """Admit and place a queue of jobs on a shared cluster: one plan and one placement per
    admitted job, maximizing the weighted normalized throughput, every GPU in its headroom."""
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
    """A request from a file or stdin ('-'), bounded in size, as parsed JSON."""
    import json

    try:
        if path == "-":
            stdin = sys.stdin
            raw = (stdin.buffer if hasattr(stdin, "buffer") else stdin).read(MAX_REQUEST_BYTES + 1)
            if isinstance(raw, str):
                raw = raw.encode("utf-8", "surrogateescape")
        else:
            with open(path, "rb") as stream:
                raw = stream.read(MAX_REQUEST_BYTES + 1)
    except OSError as error:
        raise InputError(f"cannot read the request {path}: {error.strerror}") from None
    except ValueError as error:  # a NUL byte in the path
        raise InputError(f"cannot read the request {path!r}: {error}") from None
    if len(raw) > MAX_REQUEST_BYTES:
        raise InputError(f"the request {path} is larger than {MAX_REQUEST_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"the request {path} is not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"the request {path} is not valid JSON ({error.msg} at line {error.lineno} column {error.colno})") from None
    except RecursionError:
        raise InputError(f"the request {path} is not valid JSON (nested too deeply)") from None


def export_plan(response: dict, target: str, path: str) -> None:
    """Write the framework config and print its companion notes (what it cannot express)."""
    from vramopt.exporters import export

    result = export(target, response)
    write_text_atomically(path, result.text())
    for note in result.notes:
        echo(f"note ({target}): {note}", err=True)


def write_text_atomically(path: str, text: str) -> None:
    """Write next to the target and rename: a failure never leaves a half-written file."""
    write_files_atomically({path: text})


def write_files_atomically(contents: Mapping[str, str | bytes]) -> None:
    """Write every file next to its target, then rename them all: a failure leaves no
    temporary file and no new or half-written output (text is written as UTF-8).
    A file that cannot be written is an ``InputError`` naming it."""
    import os
    import tempfile

    temporaries: list[tuple[str, str]] = []
    try:
        for path, content in contents.items():
            data = content.encode("utf-8", "backslashreplace") if isinstance(content, str) else content
            try:
                handle, temporary = tempfile.mkstemp(prefix=".vramopt-", dir=os.path.dirname(os.path.abspath(path)))
                temporaries.append((temporary, path))
                with os.fdopen(handle, "wb") as stream:
                    stream.write(data)
                # mkstemp makes the file owner-only; give it what a plain open() would.
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(temporary, 0o666 & ~umask)
            except OSError as error:
                raise InputError(f"cannot write {path}: {error.strerror or error}") from None
        for temporary, path in temporaries:
            try:
                os.replace(temporary, path)
            except OSError as error:
                raise InputError(f"cannot write {path}: {error.strerror or error}") from None
    finally:
        for temporary, _ in temporaries:
            if os.path.exists(temporary):
                os.unlink(temporary)


if __name__ == "__main__":  # pragma: no cover
    main()
