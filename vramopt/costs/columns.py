"""The numeric encoding of training plans that every cost formula consumes.

One ``PlanColumns`` holds many plans at once as numpy arrays of equal length (or
broadcastable scalars), so the exhaustive enumerator, the solver's tables and ``estimate``
all evaluate the very same formulas. Codes: precision and grad_comm_precision index
``types.PRECISIONS``; checkpoint_kind 0 none, 1 selective, 2 full every ``checkpoint_every``
layers; offload 0 none, 1 cpu (optimizer states), 2 nvme (all states).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

CHECKPOINT_NONE, CHECKPOINT_SELECTIVE, CHECKPOINT_EVERY = 0, 1, 2
OFFLOAD_NONE, OFFLOAD_CPU, OFFLOAD_NVME = 0, 1, 2
OFFLOAD_NAMES = ("none", "cpu", "nvme")


@dataclass(frozen=True, slots=True)
class PlanColumns:
    gpus: np.ndarray
    tensor_parallel: np.ndarray
    pipeline_parallel: np.ndarray
    data_parallel: np.ndarray
    sequence_parallel: np.ndarray
    virtual_stages: np.ndarray
    zero_stage: np.ndarray
    checkpoint_kind: np.ndarray
    checkpoint_every: np.ndarray
    precision: np.ndarray
    grad_comm_precision: np.ndarray
    offload: np.ndarray
    flash_attention: np.ndarray
    micro_batch: np.ndarray
    context_parallel: np.ndarray = field(default_factory=lambda: np.ones(1, dtype=np.int64))
    """Ranks that split each sequence (ring attention, costs/context_parallel.py); 1 = none."""
    optimizer: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    """Optimizer-state format, an index of ``costs/optimizer_states.OPTIMIZER_NAMES``; 0 = adam."""
    expert_parallel: np.ndarray = field(default_factory=lambda: np.ones(1, dtype=np.int64))
    """Ranks that split the routed experts (costs/expert_parallel.py); 1 = none."""
    expert_tensor_parallel: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    """Ranks that split each routed expert's matrices; 0 = the tensor-parallel degree."""
    first_stage_layers: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    """Layers of the first pipeline stage, 0 = as a middle stage (costs/pipeline_stages.py)."""
    last_stage_layers: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    """Layers of the last pipeline stage, 0 = as a middle stage (costs/pipeline_stages.py)."""
    expert_comm_overlap: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    """1: the experts' all-to-all overlapped with another micro-batch (costs/expert_overlap.py)."""
    data_parallel_shard: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    """Data-parallel ranks a state is sharded over under hybrid sharding, 0 = all (costs/hybrid_shard.py)."""

    @classmethod
    def from_scalars(cls, **values) -> "PlanColumns":
        return cls(**{name: np.atleast_1d(np.asarray(value)) for name, value in values.items()})

    def column_names(self) -> tuple[str, ...]:
        return tuple(field.name for field in fields(self))

    def __len__(self) -> int:
        return int(np.broadcast_shapes(*(np.shape(getattr(self, name)) for name in self.column_names()))[0])


def sharding_group(columns: PlanColumns) -> np.ndarray:
    """Ranks that reduce, and under ZeRO/FSDP shard, each gradient and model state: the
    data-parallel ranks times the context-parallel ranks, which hold the same weights
    (``ParallelLayout.sharding_group``)."""
    from vramopt.parallel_layout import ParallelLayout

    return ParallelLayout.from_columns(columns).sharding_group
