"""Hybrid sharding (HSDP): model states sharded within a group of data-parallel ranks and
replicated across the groups; the terms of the ``data_parallel_shard`` plan field.

What the references do (read in their code):

- torchtitan 0.3.0 / PyTorch FSDP2: ``data_parallel_shard_degree`` x ``data_parallel_replicate_degree``
  = dp. ``fully_shard`` on the 2-D mesh ``["dp_replicate", "fsdp"]`` (``fsdp`` = dp_shard x cp;
  ``torchtitan/models/llama3/parallelize.py``, ``distributed/parallel_dims.py``) keeps weights,
  gradients and optimizer states sharded over ``fsdp`` only. Each micro-batch all-gathers the
  weights and reduce-scatters the gradients inside the shard group, then all-reduces the
  gradient shard over ``dp_replicate`` (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``
  ``foreach_reduce``: ``all_reduce_group`` "not None iff HSDP"; torchtitan never turns the
  all-reduce off between micro-batches).
- Megatron-Core 0.16.1's distributed optimizer with ``num_distributed_optimizer_instances`` r:
  the dp-cp ranks split into r consecutive "intra-partial" groups (``parallel_state.py``:
  ``(dp * cp) % r == 0``); optimizer states shard within one, the gradients reduce-scatter in it
  and then all-reduce across the instances (``distributed/param_and_grad_buffer.py``, "With
  multiple DistOpt instances, we need to all-reduce across instances"), once per step.
- DeepSpeed 0.19's ZeRO++ hpZ (``zero_hpz_partition_size``) is not this: it keeps a *secondary*
  copy of the ZeRO-3 weights sharded within groups of consecutive ranks
  (``utils/groups.py _create_zero_param_parallel_group``: "all reduce is on ZeRO model") for the
  backward's all-gather, while gradients and optimizer states stay sharded over all of dp and the
  forward's all-gather still crosses nodes. The exporter writes it with that note; the DeepSpeed
  framework rule refuses the field, since vramopt does not model hpZ's bytes.

Modelled, for ``s`` = data_parallel_shard and ``r = dp / s``:

- memory: every ZeRO shard divides by ``s * cp`` instead of ``dp * cp``
  (``ParallelLayout.sharding_group``, which every model-state term already asks);
- time: the shard group's collectives are ZeRO's own over the smaller group
  (``costs/communication.data_parallel_seconds_per_step``, at the bandwidth of the links the
  group spans: NVLink while ``tp * cp * s`` GPUs fit a node), plus the all-reduce of each GPU's
  gradient shard, ``2 (r - 1) / r`` of it, over the replicas (strided ``tp * cp * s`` apart, so
  across nodes once the stage spans more than one): per micro-batch under ZeRO-3 (FSDP2),
  once per step under ZeRO-1/2 (Megatron's instances). Both join the data-parallel time and
  its overlap with the backward (costs/overlap.py).
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.communication import group_bandwidth
from vramopt.costs.precision import PRECISION_BYTES
from vramopt.parallel_layout import ParallelLayout
from vramopt.types import GpuSpec


def shard_column(columns) -> np.ndarray:
    """The plan's data_parallel_shard codes (0, all of dp, where the columns carry none)."""
    return np.asarray(getattr(columns, "data_parallel_shard", 0))


def replica_all_reduce_seconds(parameters_per_gpu: np.ndarray, gpu: GpuSpec, columns, micro_batches: np.ndarray,
                               trainable_fraction: float = 1.0) -> np.ndarray:
    """Time term: the all-reduce of each GPU's gradient shard across the shard groups' replicas
    per step (0 without hybrid sharding), not yet overlapped."""
    shard = shard_column(columns)
    if not np.any(shard > 0):
        return np.zeros(np.broadcast(shard, np.asarray(micro_batches)).shape)
    layout = ParallelLayout.from_columns(columns)
    replicas = np.asarray(layout.replicate_group, dtype=float)
    shard_bytes = (parameters_per_gpu * trainable_fraction * PRECISION_BYTES[columns.grad_comm_precision]
                   / np.asarray(layout.sharding_group, dtype=float))
    per_reduction = 2.0 * np.maximum(replicas - 1.0, 0.0) / np.maximum(replicas, 1.0) * shard_bytes  # 0 on rows validity refuses
    reductions = np.where(np.asarray(columns.zero_stage) >= 3, micro_batches, 1.0)
    bandwidth = group_bandwidth(gpu, layout.replicate_group, layout.group_span("replicate"))
    return np.where(shard > 0, reductions * per_reduction / bandwidth, 0.0)


def hybrid_invalid_reasons(columns) -> dict[str, np.ndarray]:
    """The plans hybrid sharding cannot make, by message."""
    shard = shard_column(columns)
    on = shard > 0
    data = np.asarray(columns.data_parallel)
    layout = ParallelLayout.from_columns(columns)
    safe = np.maximum(shard, 1)
    return {
        "data_parallel_shard must divide data_parallel (torchtitan: dp_replicate x dp_shard = dp; Megatron-Core: "
        "dp x cp divisible by the distributed optimizer instances)": on & (data % safe != 0),
        "data_parallel_shard equal to data_parallel is full sharding (data_parallel_shard=0)": on & (shard == data),
        "hybrid sharding needs zero_stage >= 1 (a shard to keep within the group)": on & (np.asarray(columns.zero_stage) == 0),
        # torchtitan: efsdp = dp_shard x cp x tp / ep; Megatron-Core: the expert data-parallel
        # size divisible by the instances. Both: ep x etp divides the shard group's tp x cp x s.
        "expert_parallel x expert_tensor_parallel must divide the shard group's tensor_parallel x context_parallel x "
        "data_parallel_shard": on & (np.asarray(layout.group_span("sharding")) % np.asarray(layout.expert_weight_shards) != 0),
    }
