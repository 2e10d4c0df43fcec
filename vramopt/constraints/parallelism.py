"""Parallel layout: GPU type and count, tensor, pipeline and data parallel degrees,
sequence parallelism and the interleaved pipeline schedule.

Domains: tensor parallel in powers of two up to the NVLink domain (Narayanan et al. 2021
takeaway 1: keep tensor parallelism inside a server) unless allowed across nodes; pipeline
parallel over the divisors of the layer count (equal stages; for serving up to 8, since a
replica beyond 8 stages only adds latency); data parallel is derived,
``gpus / (tp * pp)``; virtual stages 1, 2 or 4 (Narayanan et al. 2021 section 2.2.2).
"""

from __future__ import annotations

from vramopt.constraints.technique import DomainContext, Technique, parse_bool, parse_int
from vramopt.types import WORKLOADS


def powers_of_two_up_to(limit: int) -> tuple[int, ...]:
    values, value = [], 1
    while value <= limit:
        values.append(value)
        value *= 2
    return tuple(values)


def divisors(number: int) -> tuple[int, ...]:
    """Every divisor of ``number``, ascending (trial division up to its square root, so a
    layer count or global batch near 2**31 takes milliseconds, not minutes)."""
    small, large = [], []
    value = 1
    while value * value <= number:
        if number % value == 0:
            small.append(value)
            if value * value != number:
                large.append(number // value)
        value += 1
    return tuple(small + large[::-1])


def gpu_counts(max_gpus: int, gpus_per_node: int, whole_nodes: bool) -> tuple[int, ...]:
    """GPU counts a job may use: any count inside one node, whole nodes beyond it."""
    inside = [count for count in range(1, min(max_gpus, gpus_per_node) + 1)]
    if not whole_nodes:
        return tuple(range(1, max_gpus + 1))
    beyond = list(range(2 * gpus_per_node, max_gpus + 1, gpus_per_node))
    return tuple(inside + beyond)


def _tensor_parallel_values(context: DomainContext) -> tuple[int, ...]:
    limit = context.max_gpus if context.allow_tp_across_nodes else min(context.gpus_per_node, context.max_gpus)
    return powers_of_two_up_to(limit)


GPU = Technique(
    field="gpu",
    group="key",
    description="GPU type (from --gpu)",
    parse=lambda text: str(text).strip().lower(),
    default_values=lambda context: (),
    columns=lambda value: {},
    decode=lambda codes: None,
    workloads=WORKLOADS,
)

GPUS = Technique(
    field="gpus",
    group="key",
    description="GPU count",
    parse=parse_int("gpus", 1),
    default_values=lambda context: (),
    columns=lambda value: {"gpus": value},
    decode=lambda codes: int(codes["gpus"]),
    workloads=WORKLOADS,
)

TENSOR_PARALLEL = Technique(
    field="tensor_parallel",
    group="key",
    description="tensor parallel degree (Megatron-LM)",
    parse=parse_int("tensor_parallel", 1),
    default_values=_tensor_parallel_values,
    columns=lambda value: {"tensor_parallel": value},
    decode=lambda codes: int(codes["tensor_parallel"]),
    workloads=WORKLOADS,
)

PIPELINE_PARALLEL = Technique(
    field="pipeline_parallel",
    group="key",
    description="pipeline parallel degree (equal stages)",
    parse=parse_int("pipeline_parallel", 1),
    default_values=lambda context: divisors(context.layers)
    if context.kind != "infer"
    else tuple(value for value in divisors(context.layers) if value <= 8),
    columns=lambda value: {"pipeline_parallel": value},
    decode=lambda codes: int(codes["pipeline_parallel"]),
    workloads=WORKLOADS,
)

DATA_PARALLEL = Technique(
    field="data_parallel",
    group="key",
    description="data parallel degree (derived: gpus / (tp * pp))",
    parse=parse_int("data_parallel", 1),
    default_values=lambda context: (),
    columns=lambda value: {"data_parallel": value},
    decode=lambda codes: int(codes["data_parallel"]),
)

SEQUENCE_PARALLEL = Technique(
    field="sequence_parallel",
    group="activation",
    description="sequence parallelism with tensor parallelism (Korthikanti et al. 2022)",
    parse=parse_bool("sequence_parallel"),
    default_values=lambda context: (True, False),
    columns=lambda value: {"sequence_parallel": int(value)},
    decode=lambda codes: bool(codes["sequence_parallel"]),
)

VIRTUAL_STAGES = Technique(
    field="virtual_stages",
    group="activation",
    description="interleaved pipeline: model chunks per GPU",
    parse=parse_int("virtual_stages", 1),
    default_values=lambda context: (1, 2, 4),
    columns=lambda value: {"virtual_stages": value},
    decode=lambda codes: int(codes["virtual_stages"]),
)

TECHNIQUES = (GPU, GPUS, TENSOR_PARALLEL, PIPELINE_PARALLEL, DATA_PARALLEL, SEQUENCE_PARALLEL, VIRTUAL_STAGES)
