"""Every technique module, in the fixed order used for tie-breaking and display.

``tests/unit/test_registry.py`` fails when a module under vramopt/constraints/ declares
techniques that are not registered here, or a technique lacks a decode step.
"""

from __future__ import annotations

from vramopt.constraints import (
    attention,
    batching,
    checkpointing,
    context_parallel,
    expert_overlap,
    expert_parallel,
    hybrid_shard,
    kv_cache,
    mig,
    offload,
    optimizer_format,
    parallelism,
    pipeline_stages,
    precision,
    quantization,
    speculative,
    virtual_stages,
    zero,
)
from vramopt.constraints.technique import Technique

MODULES = (parallelism, virtual_stages, context_parallel, expert_parallel, pipeline_stages, precision, batching, zero, hybrid_shard, offload, optimizer_format, checkpointing, attention, expert_overlap, quantization, mig, kv_cache, speculative)

TECHNIQUES: tuple[Technique, ...] = tuple(technique for module in MODULES for technique in module.TECHNIQUES)
BY_FIELD = {technique.field: technique for technique in TECHNIQUES}

NOT_MIGRATED: tuple[str, ...] = ()
"""Techniques whose parts still live in the shared modules rather than in a ``Contribution``
(none: the serving fields were the last). tests/unit/test_technique_completeness.py fails
when a technique outside this list lacks any part, so a new technique cannot be registered
half-done."""

PLAN_ORDER = (
    "gpu", "gpus", "nodes", "tensor_parallel", "context_parallel", "expert_parallel", "expert_tensor_parallel",
    "pipeline_parallel", "first_stage_layers", "last_stage_layers", "data_parallel",
    "sequence_parallel", "virtual_stages", "zero_stage", "data_parallel_shard", "checkpointing", "precision", "grad_comm_precision",
    "offload", "optimizer", "flash_attention", "expert_comm_overlap", "seq_len", "micro_batch", "grad_accumulation",
    "global_batch",
)
"""The training plan's fields in the order of the JSON contract's ``plan`` object, of the
table display's phrases and of the exporters' notes: every training technique, and the
workload's values the response adds (``WORKLOAD_PLAN_FIELDS``). A new technique takes its
place here."""

WORKLOAD_PLAN_FIELDS = ("nodes", "seq_len", "grad_accumulation", "global_batch")
"""Values in the response's plan that no technique decides: the nodes the GPUs span, and the
workload's batch (seq_len, global_batch) with the accumulation it implies."""

KEY_FIELDS = ("gpu", "gpus", "tensor_parallel", "context_parallel", "expert_parallel", "expert_tensor_parallel",
              "pipeline_parallel", "first_stage_layers", "last_stage_layers", "data_parallel", "precision", "micro_batch",
              "virtual_stages")
STATE_FIELDS = ("zero_stage", "data_parallel_shard", "offload", "grad_comm_precision", "optimizer")
ACTIVATION_FIELDS = ("checkpointing", "flash_attention", "sequence_parallel", "expert_comm_overlap")
SERVING_KEY_FIELDS = ("gpu", "gpus", "tensor_parallel", "expert_parallel", "pipeline_parallel", "quantization", "mig_profile")
SERVING_ITEM_FIELDS = ("kv_cache_dtype", "paged_kv", "speculative_decoding", "slots")
"""Serving is not separable (the KV cache couples slots and dtype): all its non-key choices
form one group, the 'state' items, and the activation group is a single neutral item."""

SERVING_ORDER = SERVING_KEY_FIELDS + SERVING_ITEM_FIELDS
"""The serving techniques in the order their rules are checked, their phrases shown and
their vLLM arguments and notes written: the keys, then the items, as the tables hold them."""

SERVING_PLAN_ORDER = (
    "gpu", "gpus", "nodes", "tensor_parallel", "expert_parallel", "pipeline_parallel", "quantization", "kv_cache_dtype", "paged_kv",
    "context", "slots", "mig_profile", "instances_per_gpu", "replicas", "speculative_decoding",
)
"""The serving plan's fields in the order of the JSON contract's ``plan`` object
(docs/schema/vramopt-serving-v1.schema.json): every serving technique, and the values the
response adds (``SERVING_WORKLOAD_PLAN_FIELDS``)."""

SERVING_WORKLOAD_PLAN_FIELDS = ("nodes", "context", "instances_per_gpu", "replicas")
"""Values in a serving response's plan that no technique decides: the nodes, the workload's
context, and the MIG instances per GPU and replicas the layout implies."""


def training_techniques() -> tuple[Technique, ...]:
    """The training techniques in ``PLAN_ORDER``."""
    return tuple(BY_FIELD[name] for name in PLAN_ORDER if name not in WORKLOAD_PLAN_FIELDS)


def serving_techniques() -> tuple[Technique, ...]:
    """The serving techniques in ``SERVING_ORDER``."""
    return tuple(BY_FIELD[name] for name in SERVING_ORDER)


def technique(field: str) -> Technique:
    return BY_FIELD[field]


def fields_for(kind: str) -> tuple[str, ...]:
    return tuple(technique.field for technique in TECHNIQUES if kind in technique.workloads)
