"""Parallel layout: GPU type and count, tensor, pipeline and data parallel degrees, and
sequence parallelism.

Domains: tensor parallel in powers of two up to the NVLink domain (Narayanan et al. 2021
takeaway 1: keep tensor parallelism inside a server) unless allowed across nodes; pipeline
parallel over the divisors of the layer count (equal stages; for serving up to 8, since a
replica beyond 8 stages only adds latency) and, for training, the powers of two that split
the layers with fewer on the first or last stage (costs/pipeline_stages.py); data parallel is derived,
``gpus / (tp * pp)``; virtual stages in constraints/virtual_stages.py.
"""

from __future__ import annotations

from typing import Any

from vramopt.constraints.contribution import Contribution, ContractField, Export, no_rules
from vramopt.constraints.key_domain import KeyDomain, KeyRequest
from vramopt.constraints.parallelism_exports import (  # noqa: F401 (the exports the Contributions below name)
    _tensor_parallel_notes,
    _pipeline_parallel_notes,
    _data_parallel_notes,
    _sequence_parallel_notes,
    _launch_notes,
    _on_off,
    _megatron_tensor_parallel,
    _megatron_pipeline_parallel,
    _torchtitan_tensor_parallel,
    _torchtitan_pipeline_parallel,
    _torchtitan_sequence_parallel,
    _megatron_sequence_parallel,
)
from vramopt.constraints.serving_layout import serving_layout_invalid_reasons, vllm_pipeline_parallel, vllm_replicas, vllm_tensor_parallel
from vramopt.constraints.technique import DomainContext, PlanField, Technique, parse_bool, parse_int
from vramopt.costs.activations import layer_bytes
from vramopt.costs.communication import data_parallel_seconds_per_step, group_bandwidth, tensor_parallel_seconds_per_micro_batch
from vramopt.costs.gemm import gemm_seconds
from vramopt.costs.memory import in_flight_micro_batches, parameters_per_gpu
from vramopt.costs.pipeline_stages import pipeline_degrees, uneven
from vramopt.costs.training import gpus_on_busiest_node
from vramopt.parallel_layout import STATE_DEGREES, ParallelLayout
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


# ---------------------------------------------------------------------------------------
# Key enumeration (optimizer/keys.py): each layout field's candidates and rules


def _gpu_count_candidates(request: KeyRequest) -> tuple[int, ...]:
    """The counts a layout's world size must be one of, in tie-break order."""
    space = request.space
    counts = request.resolve("gpus", gpu_counts(space.max_gpus, request.gpu.node.gpus_per_node, space.whole_nodes))
    return tuple(count for count in counts if count <= space.max_gpus)


def _tensor_parallel_candidates(request: KeyRequest) -> tuple[int, ...]:
    """tp divides the attention heads and the KV heads divide it or it them (grouped-query
    attention replicates KV heads), and stays in a node unless allowed across nodes."""
    model, gpu = request.model, request.gpu
    return tuple(t for t in request.resolve("tensor_parallel")
                 if model.heads % t == 0 and (model.kv_heads % t == 0 or t % model.kv_heads == 0)
                 and (t <= gpu.node.gpus_per_node or request.space.allow_tp_across_nodes))


def _data_parallel_candidates(request: KeyRequest) -> tuple[int, ...]:
    """The divisors of the global batch the user's choices leave (dp is enumerated and the
    GPU count computed: a million-GPU space has few dp values and many counts)."""
    allowed = request.resolve("data_parallel", default=(None,))
    forbidden = request.forbidden("data_parallel")
    return tuple(dp for dp in divisors(request.workload.global_batch)
                 if (None in allowed or dp in allowed) and dp not in forbidden)


GPUS_KEY = KeyDomain(
    values=_gpu_count_candidates,
    derive=lambda rows: ParallelLayout.from_columns(rows).world_size,
    derive_reads=tuple(name for name in ParallelLayout.__dataclass_fields__ if name not in STATE_DEGREES),  # every key degree
)
TENSOR_PARALLEL_KEY = KeyDomain(values=_tensor_parallel_candidates)
PIPELINE_PARALLEL_KEY = KeyDomain(values=lambda request: request.resolve("pipeline_parallel"))


DATA_PARALLEL_KEY = KeyDomain(values=_data_parallel_candidates)


# ---------------------------------------------------------------------------------------
# Validity, terms, display and DeepSpeed notes of the layout fields


def layout_invalid_reasons(case, columns) -> dict[str, Any]:
    """The layout's divisibility rules (ParallelLayout: heads, layers, gpus = tp x cp x pp x
    dp, the global batch), owned by the tensor-parallel field because tp is the degree they
    constrain first."""
    model = case.model
    return ParallelLayout.from_columns(columns).invalid_reasons(
        gpus=columns.gpus, heads=model.heads, kv_heads=model.kv_heads, layers=model.layers,
        global_batch=case.global_batch, micro_batch=columns.micro_batch, uneven_stages=uneven(columns))


def sequence_parallel_invalid_reasons(case, columns) -> dict[str, Any]:
    return {"sequence_parallel needs tensor_parallel > 1": (columns.sequence_parallel == 1) & (columns.tensor_parallel == 1)}


TRAINING_ONLY_VLLM = "a training plan has no vLLM export"


NARAYANAN = "Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"
KORTHIKANTI = "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models"


GPU = Technique(
    field="gpu",
    runner_up_rank=17,
    group="key",
    description="GPU type (from --gpu)",
    parse=lambda text: str(text).strip().lower(),
    default_values=lambda context: (),
    columns=lambda value: {},
    decode=lambda codes: None,
    workloads=WORKLOADS,
    plan_field=PlanField(python_type=str, option_default="b200", flags=("--gpu",), help="GPU type (see `vramopt gpus`)."),
    contribution=Contribution(
        validity=no_rules,  # its precision support is the precision field's rule
        memory=lambda case: float(case.gpu.memory_bytes),  # the capacity every term is held against
        time=gemm_seconds,  # its generation's GEMM efficiency curve and peaks
        contract=ContractField(name="gpu", json_type="string", description="GPU type (catalog name, `vramopt gpus`)"),
        display=lambda plan: str(plan["gpu"]),  # on the hardware line, with the count and nodes
        exports={"torchtitan": Export(not_exported="the GPU type is no torchtitan setting; the launch line runs on the GPUs it starts on"),
                 "megatron": Export(not_exported="the GPU type is no Megatron-LM argument; the launch line runs on the GPUs it starts on"),
                 "deepspeed": Export(not_exported="the GPU type is no DeepSpeed setting; the launch note names it"),
                 "vllm": Export(not_exported="the GPU type is no vLLM argument; the hardware or MIG launch note names it")},
        serving_validity=no_rules,
        sources=("hardware/gpus/*.toml: each GPU's datasheet and CUDA-runtime-reported memory",),
    ),
)

GPUS = Technique(
    field="gpus",
    serving_columns=lambda value, gpu: {"gpus": int(value)},
    runner_up_rank=9,
    group="key",
    description="GPU count",
    parse=parse_int("gpus", 1),
    default_values=lambda context: (),
    columns=lambda value: {"gpus": value},
    decode=lambda codes: int(codes["gpus"]),
    workloads=WORKLOADS,
    plan_field=PlanField(python_type=int, minimum=1, option_default=1, flags=("--gpus",), help="GPU count = tp x cp x pp x dp."),
    contribution=Contribution(
        validity=no_rules,  # gpus = tp x cp x pp x dp is the layout's rule (tensor_parallel)
        memory=gpus_on_busiest_node,  # host RAM and NVMe are held per node
        time=group_bandwidth,
        contract=ContractField(name="gpus", json_type="integer", description="GPU count = tp x cp x pp x dp"),
        display=lambda plan: f"{plan['gpus']} x {plan['gpu']}",
        exports={"torchtitan": Export(not_exported="the GPU count is the launch line's world size (torchrun --nnodes x --nproc-per-node)"),
                 "megatron": Export(not_exported="the GPU count is the launch line's world size (torchrun --nnodes x --nproc-per-node)"),
                 "deepspeed": Export(apply=_launch_notes), "vllm": Export(apply=vllm_replicas, launch=True)},
        serving_validity=no_rules,  # tp x pp divides the GPU count: the layout's rule (tensor_parallel)
        sources=("DeepSpeed launcher: --num_nodes, --num_gpus (docs/_tutorials/getting-started.md)",
                 "vLLM vllm/engine/arg_utils.py: data_parallel_size, tensor_parallel_size, pipeline_parallel_size"),
    ),
    key_domain=GPUS_KEY,
)

TENSOR_PARALLEL = Technique(
    field="tensor_parallel",
    serving_columns=lambda value, gpu: {"tensor_parallel": int(value)},
    runner_up_rank=6,
    group="key",
    description="tensor parallel degree (Megatron-LM)",
    parse=parse_int("tensor_parallel", 1),
    default_values=_tensor_parallel_values,
    columns=lambda value: {"tensor_parallel": value},
    decode=lambda codes: int(codes["tensor_parallel"]),
    workloads=WORKLOADS,
    plan_field=PlanField(python_type=int, default=1, minimum=1, flags=("--tp",), help="Tensor-parallel degree."),
    aliases=("tp",),
    contribution=Contribution(
        brief=lambda plan: f"tp={plan['tensor_parallel']}",
        validity=layout_invalid_reasons,
        memory=parameters_per_gpu,
        time=tensor_parallel_seconds_per_micro_batch,
        contract=ContractField(name="tensor_parallel", json_type="integer",
                               description="tensor-parallel degree (Megatron-LM column/row-parallel layers)"),
        display=lambda plan: f"tp={plan['tensor_parallel']}",
        display_line="parallel",
        exports={"torchtitan": Export(apply=_torchtitan_tensor_parallel), "megatron": Export(apply=_megatron_tensor_parallel), "deepspeed": Export(apply=_tensor_parallel_notes), "vllm": Export(apply=vllm_tensor_parallel)},
        serving_validity=serving_layout_invalid_reasons,
        sources=(f"Shoeybi et al. 2019, Megatron-LM, section 3; {NARAYANAN}, section 2.3 and takeaway 1",),
    ),
    key_domain=TENSOR_PARALLEL_KEY,
)

PIPELINE_PARALLEL = Technique(
    field="pipeline_parallel",
    serving_columns=lambda value, gpu: {"pipeline_parallel": int(value)},
    runner_up_rank=8,
    group="key",
    description="pipeline parallel degree (equal stages)",
    parse=parse_int("pipeline_parallel", 1),
    default_values=lambda context: pipeline_degrees(context.layers, context.max_gpus)
    if context.kind != "infer"
    else tuple(value for value in divisors(context.layers) if value <= 8),
    columns=lambda value: {"pipeline_parallel": value},
    decode=lambda codes: int(codes["pipeline_parallel"]),
    workloads=WORKLOADS,
    plan_field=PlanField(python_type=int, default=1, minimum=1, flags=("--pp",), help="Pipeline-parallel stages."),
    aliases=("pp",),
    contribution=Contribution(
        brief=lambda plan: f"pp={plan['pipeline_parallel']}",
        validity=no_rules,  # pp divides the layers: the layout's rule (tensor_parallel)
        memory=in_flight_micro_batches,
        time=ParallelLayout.pipeline_slots,
        contract=ContractField(name="pipeline_parallel", json_type="integer", description="pipeline stages (equal layer counts)"),
        display=lambda plan: f"pp={plan['pipeline_parallel']}",
        display_line="parallel",
        display_separator=" ",
        exports={"torchtitan": Export(apply=_torchtitan_pipeline_parallel), "megatron": Export(apply=_megatron_pipeline_parallel), "deepspeed": Export(apply=_pipeline_parallel_notes), "vllm": Export(apply=vllm_pipeline_parallel)},
        serving_validity=no_rules,  # pp divides the layers: the layout's rule (tensor_parallel)
        sources=(f"{NARAYANAN}, section 2.2.1 (1F1B: min(p, m) micro-batches in flight, bubble (p - 1) / m)",
                 "DeepSpeed deepspeed/runtime/pipe/engine.py (ZeRO-2/3 refused with pipeline parallelism)"),
    ),
    key_domain=PIPELINE_PARALLEL_KEY,
)

DATA_PARALLEL = Technique(
    field="data_parallel",
    group="key",
    description="data parallel degree (derived: gpus / (tp * cp * pp))",
    parse=parse_int("data_parallel", 1),
    default_values=lambda context: (),
    columns=lambda value: {"data_parallel": value},
    decode=lambda codes: int(codes["data_parallel"]),
    derived=True,
    aliases=("dp",),
    contribution=Contribution(
        brief=lambda plan: f"dp={plan['data_parallel']}",
        validity=no_rules,  # derived from the GPU count: the layout's rule (tensor_parallel)
        memory=lambda columns, zero_stage: ParallelLayout.from_columns(columns).optimizer_zero_shards(zero_stage),
        time=data_parallel_seconds_per_step,
        contract=ContractField(name="data_parallel", json_type="integer", description="data-parallel replicas = gpus / (tp x cp x pp)"),
        display=lambda plan: f"dp={plan['data_parallel']}",
        display_line="parallel",
        display_separator=" ",
        exports={"torchtitan": Export(not_exported="the data-parallel degree is written as the replicate or shard degree by zero_stage's export"),
                 "megatron": Export(not_exported="Megatron-LM derives the data-parallel size: world size / (tp x cp x pp)"),
                 "deepspeed": Export(apply=_data_parallel_notes), "vllm": Export(not_exported=TRAINING_ONLY_VLLM)},
        sources=("PyTorch DistributedDataParallel; Rajbhandari et al. 2020, ZeRO, section 5 (states sharded over dp)",),
    ),
    key_domain=DATA_PARALLEL_KEY,
)

SEQUENCE_PARALLEL = Technique(
    field="sequence_parallel",
    group="activation",
    description="sequence parallelism with tensor parallelism (Korthikanti et al. 2022)",
    parse=parse_bool("sequence_parallel"),
    default_values=lambda context: (True, False),
    columns=lambda value: {"sequence_parallel": int(value)},
    decode=lambda codes: bool(codes["sequence_parallel"]),
    neutral=False,
    plan_field=PlanField(
        python_type=bool, default=False, flags=("--sequence-parallel/--no-sequence-parallel",),
        doc="Shard the layer-norm/dropout activations over the tensor-parallel group (needs tp > 1).",
        help="Shard norm/dropout activations over the tensor-parallel group (needs --tp > 1).",
    ),
    aliases=("sp",),
    contribution=Contribution(
        validity=sequence_parallel_invalid_reasons,
        memory=layer_bytes,
        time=tensor_parallel_seconds_per_micro_batch,  # all-gather + reduce-scatter replace the all-reduces
        contract=ContractField(name="sequence_parallel", json_type="boolean",
                               description="sequence parallelism: norm/dropout activations sharded over the tensor-parallel group"),
        display=lambda plan: f"sequence parallel {_on_off(plan['sequence_parallel'])}",
        display_line="parallel",
        exports={"torchtitan": Export(apply=_torchtitan_sequence_parallel), "megatron": Export(apply=_megatron_sequence_parallel), "deepspeed": Export(apply=_sequence_parallel_notes), "vllm": Export(not_exported=TRAINING_ONLY_VLLM)},
        sources=(f"{KORTHIKANTI} (sequence parallelism) and Table 2",),
    ),
)

TECHNIQUES = (GPU, GPUS, TENSOR_PARALLEL, PIPELINE_PARALLEL, DATA_PARALLEL, SEQUENCE_PARALLEL)
