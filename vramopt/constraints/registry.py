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
    kv_cache,
    mig,
    offload,
    optimizer_format,
    parallelism,
    precision,
    quantization,
    speculative,
    zero,
)
from vramopt.constraints.technique import Technique

MODULES = (parallelism, context_parallel, precision, batching, zero, offload, optimizer_format, checkpointing, attention, quantization, mig, kv_cache, speculative)

TECHNIQUES: tuple[Technique, ...] = tuple(technique for module in MODULES for technique in module.TECHNIQUES)
BY_FIELD = {technique.field: technique for technique in TECHNIQUES}

NOT_MIGRATED = (
    "gpu", "gpus", "tensor_parallel", "pipeline_parallel", "data_parallel", "sequence_parallel", "virtual_stages",
    "precision", "grad_comm_precision", "micro_batch", "zero_stage", "offload", "checkpointing",
    "flash_attention", "quantization", "mig_profile", "kv_cache_dtype", "paged_kv", "slots", "speculative_decoding",
)
"""Techniques whose parts still live in the shared modules (costs/, cli.py, display.py, the
exporters) rather than in a ``Contribution``; tests/unit/test_technique_completeness.py
fails when a technique outside this list lacks any part, so a new technique cannot be
registered half-done. Shrink it as techniques migrate."""

KEY_FIELDS = ("gpu", "gpus", "tensor_parallel", "context_parallel", "pipeline_parallel", "data_parallel", "precision", "micro_batch")
STATE_FIELDS = ("zero_stage", "offload", "grad_comm_precision", "optimizer")
ACTIVATION_FIELDS = ("checkpointing", "flash_attention", "sequence_parallel", "virtual_stages")
SERVING_KEY_FIELDS = ("gpu", "gpus", "tensor_parallel", "pipeline_parallel", "quantization", "mig_profile")
SERVING_ITEM_FIELDS = ("kv_cache_dtype", "paged_kv", "speculative_decoding", "slots")
"""Serving is not separable (the KV cache couples slots and dtype): all its non-key choices
form one group, the 'state' items, and the activation group is a single neutral item."""


def technique(field: str) -> Technique:
    return BY_FIELD[field]


def fields_for(kind: str) -> tuple[str, ...]:
    return tuple(technique.field for technique in TECHNIQUES if kind in technique.workloads)
