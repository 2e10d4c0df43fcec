"""Every technique module, in the fixed order used for tie-breaking and display.

``tests/unit/test_registry.py`` fails when a module under vramopt/constraints/ declares
techniques that are not registered here, or a technique lacks a decode step.
"""

from __future__ import annotations

from vramopt.constraints import attention, batching, checkpointing, offload, parallelism, precision, zero
from vramopt.constraints.technique import Technique

MODULES = (parallelism, precision, batching, zero, offload, checkpointing, attention)

TECHNIQUES: tuple[Technique, ...] = tuple(technique for module in MODULES for technique in module.TECHNIQUES)
BY_FIELD = {technique.field: technique for technique in TECHNIQUES}

KEY_FIELDS = ("gpu", "gpus", "tensor_parallel", "pipeline_parallel", "data_parallel", "precision", "micro_batch")
STATE_FIELDS = ("zero_stage", "offload", "grad_comm_precision")
ACTIVATION_FIELDS = ("checkpointing", "flash_attention", "sequence_parallel", "virtual_stages")


def technique(field: str) -> Technique:
    return BY_FIELD[field]
