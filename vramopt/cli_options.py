"""The option decorators, parameter types and builders shared by the ``vramopt`` commands
(``workload_options``, ``plan_options``, ``space_options``, ``format_option``), and
``emit``, which writes one result to stdout as a table, JSON or CSV."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import click

from vramopt.cli_group import echo
from vramopt.costs.coefficients import coefficient
from vramopt.display import OUTPUT_FORMATS, flatten, to_csv, to_json
from vramopt.errors import InputError
from vramopt.hardware import load_gpu
from vramopt.constraints.technique import REQUIRED
from vramopt.plan_record import plan_techniques, serving_plan_techniques
from vramopt.types import MAX_COUNT, WORKLOADS, SearchSpace, ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload

DEFAULT_HEADROOM_FRACTION = 0.10
"""The seed's rule: keep at least 10% of each GPU's memory free."""


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


class TechniqueValueType(click.ParamType):
    """A value read by the technique's own parser (checkpointing's none, selective, full
    (= every:1) or every:K), normalized to the plan's spelling."""

    def __init__(self, technique) -> None:
        self.technique = technique
        self.name = technique.plan_field.metavar or technique.field

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return self.technique.parse(str(value))
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
        click.option("--input-tokens", type=int, default=None,
                     help="infer: prompt tokens per request (with --output-tokens: the request-level model, docs/serving.md)."),
        click.option("--output-tokens", type=int, default=None, help="infer: generated tokens per request."),
        click.option("--lengths", "lengths_path", type=str, default=None,
                     help="infer: CSV of request lengths (header input_tokens,output_tokens), instead of the two flags above."),
        click.option("--rate", "rate_per_s", type=float, default=None,
                     help="infer: Poisson arrival rate of requests over the deployment, requests/s."),
        click.option("--concurrency", type=int, default=None,
                     help="infer: clients each keeping one request in flight (instead of --rate)."),
        click.option("--ttft-p99-ms", type=float, default=None, help="infer: bound on the p99 time to first token, ms."),
        click.option("--tpot-ms", type=float, default=None, help="infer: bound on the mean time per output token, ms."),
        click.option("--input-tokens-p99", type=int, default=None,
                     help="infer: p99 of the prompt tokens; --input-tokens is then the mean of lognormal lengths (docs/serving.md)."),
        click.option("--output-tokens-p99", type=int, default=None,
                     help="infer: p99 of the generated tokens; --output-tokens is then the mean (lognormal)."),
        click.option("--shared-prefix-tokens", type=int, default=None,
                     help="infer: the first N tokens of every prompt are shared (a system prompt): vLLM's prefix caching computes them once."),
        click.option("--disaggregation", type=click.Choice(["auto", "off"]), default="auto", show_default=True,
                     help="infer: solve also searches disaggregated prefill/decode plans at a --rate (docs/serving.md)."),
        click.option("--lora-rank", type=click.IntRange(1, 65536), default=16, show_default=True,
                     help="lora/qlora: adapter rank (adapters on every linear layer)."),
        click.option("--seq-len", type=POSITIVE, default=4096, show_default=True, help="Tokens per sequence."),
        click.option("--global-batch", type=POSITIVE, default=1024, show_default=True,
                     help="Sequences per optimizer step (must be a multiple of micro-batch x data parallel)."),
        click.option("--headroom", type=HeadroomType(), default=DEFAULT_HEADROOM_FRACTION, show_default=True,
                     help="Fraction of each GPU's memory that must stay free: 0.1 or 10%."),
    ]
)

def with_plan_fields(function: Callable) -> Callable:
    """Fill a command's help with the plan fields --allow/--forbid/--pin take, from the
    techniques (registry.PLAN_ORDER and SERVING_ORDER), so a new technique is listed."""
    from vramopt.constraints import registry

    training = [technique.field for technique in registry.training_techniques()]
    function.__doc__ = function.__doc__.format(training_fields=", ".join(training),
                                               serving_fields=", ".join(registry.SERVING_ORDER))
    return function


def _technique_option(technique) -> Callable:
    """The estimate option of one training technique, from its ``PlanField`` declaration
    (flags, type, default, help), so that a new technique brings its own option."""
    declaration = technique.plan_field
    default = declaration.option_default if declaration.default is REQUIRED else declaration.default
    if declaration.follows:
        default = None  # the value of the field it follows (build_plan)
    if declaration.python_type is bool:
        return click.option(*declaration.flags, technique.field, default=default, show_default=declaration.show_default,
                            help=declaration.help)
    if declaration.python_type is int:
        values = declaration.choices
        kind = (click.IntRange(min(values), max(values)) if values
                else click.IntRange(min=min(declaration.minimum, default), max=MAX_COUNT))
    elif declaration.cli_type == "parse":
        kind = TechniqueValueType(technique)
    else:
        kind = click.Choice(declaration.choices) if declaration.choices else None
    return click.option(*declaration.flags, technique.field, type=kind, default=default,
                        show_default=declaration.show_default and not declaration.follows, help=declaration.help)


SERVING_ONLY_TECHNIQUES = tuple(technique for technique in serving_plan_techniques() if technique.workloads == ("infer",))
"""The serving plan's own techniques (quantization, KV cache, slots, MIG, speculative
decoding); gpu, gpus, tp and pp are shared with training."""

plan_options = apply_options(
    [_technique_option(technique) for technique in plan_techniques()]
    + [_technique_option(technique) for technique in SERVING_ONLY_TECHNIQUES]
)

TRAINING_ONLY = {
    "seq_len": "--seq-len", "global_batch": "--global-batch",
    **{technique.field: technique.plan_field.flags[0].split("/")[0] for technique in plan_techniques()
       if "infer" not in technique.workloads},
}
"""The options a serving request refuses: the training workload's and every training-only
technique's (its first flag)."""
SERVING_ONLY = {
    "context": "--context", "min_slots": "--min-slots", "max_latency_ms": "--max-latency-ms",
    **{technique.field: technique.plan_field.flags[0].split("/")[0] for technique in SERVING_ONLY_TECHNIQUES},
    "input_tokens": "--input-tokens", "output_tokens": "--output-tokens",
    "rate_per_s": "--rate", "concurrency": "--concurrency", "lengths_path": "--lengths", "ttft_p99_ms": "--ttft-p99-ms", "tpot_ms": "--tpot-ms",
    "disaggregation": "--disaggregation", "shared_prefix_tokens": "--shared-prefix-tokens",
    "input_tokens_p99": "--input-tokens-p99", "output_tokens_p99": "--output-tokens-p99",
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
        return ServingPlan(**{technique.field: options[technique.field] for technique in serving_plan_techniques()})
    values = {technique.field: options[technique.field] for technique in plan_techniques()}
    for technique in plan_techniques():
        if technique.plan_field.follows and values[technique.field] is None:  # default: the field it follows
            values[technique.field] = values[technique.plan_field.follows]
    return TrainingPlan(**values)


def request_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The request-level serving fields; without --context, max-model-len is the larger of
    8,192 and the longest request's input + output tokens."""
    fields = {name: options.get(name) for name in ("input_tokens", "output_tokens", "rate_per_s", "concurrency", "ttft_p99_ms", "tpot_ms",
                                                  "shared_prefix_tokens", "input_tokens_p99", "output_tokens_p99")}
    lengths = (fields["input_tokens"], fields["output_tokens"])
    longest = sum(lengths) if all(isinstance(length, int) and length > 0 for length in lengths) else None
    if longest is not None and (fields["input_tokens_p99"] is not None or fields["output_tokens_p99"] is not None):
        from vramopt.costs.length_distribution import percentile_pairs
        from vramopt.errors import InputError

        names = ("input_tokens", "output_tokens", "input_tokens_p99", "output_tokens_p99")
        try:  # the longest request of the lognormal mix sets the default max-model-len
            longest = max(i + o for i, o in percentile_pairs(ServingWorkload(model="", **{name: fields[name] for name in names})))
        except InputError:  # an invalid p99: the library's check says so
            longest = None
    if options.get("lengths_path") is not None:
        from vramopt.length_samples_file import read_length_samples

        fields["length_samples"] = read_length_samples(options["lengths_path"])
        longest = max(prompt + output for prompt, output in fields["length_samples"])
    if longest is not None and not given("context"):
        fields["context"] = max(options["context"], longest)
    return fields


def build_workload(options: Mapping[str, Any]):
    kind = options["workload_kind"]
    reject_unused_options(kind)
    if kind == "infer":
        requests = request_options(options)
        return ServingWorkload(
            model=options["model"],
            context=requests.pop("context", options["context"]),
            headroom_fraction=options["headroom"],
            min_slots=options["min_slots"],
            max_latency_ms=options["max_latency_ms"],
            disaggregation=options.get("disaggregation") or "auto",
            **requests,
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
# The search space (solve, pareto)


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
