"""Communication time of tensor- and data-parallel collectives.

Ring all-reduce moves ``2*(n-1)/n`` times the buffer per GPU, reduce-scatter and all-gather
``(n-1)/n`` each (Patarasuk & Yuan 2009; NCCL's bus-bandwidth convention). Each collective
runs at the bandwidth of the slowest link it crosses: inside the node the GPU-to-GPU fabric,
across nodes the per-GPU network share. The fabric's per-GPU bandwidth depends on its
topology (``GpuSpec.intra_node_topology``, sources in the catalog): behind a switch
(NVSwitch) a GPU has its full NVLink bandwidth towards any group; on a fully connected mesh
(MI300X Infinity Fabric: one link to each peer) a GPU in a group of k reaches its k-1 peers
over k-1 links, so it has (k-1) x the link bandwidth (RCCL spreads a collective over all of
them); without a fabric each card uses its PCIe link. All figures are per direction.

Tensor parallelism (Shoeybi et al. 2019): two all-reduces of ``s*b*h`` activations per layer
in the forward pass and two in the backward, two more when the forward is recomputed;
sequence parallelism replaces each by a reduce-scatter + all-gather of the same volume
(Korthikanti et al. 2022 section 4.2.2). Data parallelism (Rajbhandari et al. 2020 section
7): stages 0-2 move ``2*(dp-1)/dp`` of the gradients per step; stage 3 also gathers the
parameters for the forward and the backward of every micro-batch and reduce-scatters the
gradients as they are produced (1.5x DDP's volume at one micro-batch per step).
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.coefficients import coefficient
from vramopt.costs.columns import CHECKPOINT_EVERY, PlanColumns
from vramopt.costs.pipeline_stages import most_layers_on_a_stage
from vramopt.costs.precision import PRECISION_BYTES, PRECISION_COMMUNICATION_BYTES
from vramopt.types import GpuSpec, ModelSpec

TENSOR_PARALLEL_ALL_REDUCES_PER_LAYER = 4
"""Shoeybi et al. 2019 section 3: f and g operators, two in forward, two in backward."""
RECOMPUTE_EXTRA_ALL_REDUCES_PER_LAYER = 2


def intra_node_bandwidth(gpu: GpuSpec, group_size=None):
    """Per-GPU, one-direction bandwidth towards the other members of a group of
    ``group_size`` GPUs of one node (the whole node when ``None``)."""
    if gpu.intra_node_topology == "pcie":
        return gpu.pcie_bandwidth_bytes_per_s
    if gpu.intra_node_topology == "full_mesh":
        size = gpu.node.gpus_per_node if group_size is None else np.minimum(group_size, gpu.node.gpus_per_node)
        # A group of one moves nothing; one link keeps the division defined.
        peers = np.maximum(np.asarray(size, dtype=float) - 1.0, 1.0)
        return peers * gpu.mesh_link_bandwidth_bytes_per_s
    return gpu.nvlink_bandwidth_bytes_per_s


def group_bandwidth(gpu: GpuSpec, group_size, span_gpus) -> np.ndarray:
    """Per-GPU bandwidth of a collective among ``group_size`` ranks whose consecutive ranks
    span ``span_gpus`` GPUs (a data-parallel group strided by the tensor-parallel degree
    spans ``tp * dp``): the intra-node fabric while the span fits one node, the network
    share across nodes; times the collective efficiency."""
    inside = np.asarray(span_gpus) <= gpu.node.gpus_per_node
    bandwidth = np.where(inside, intra_node_bandwidth(gpu, group_size), gpu.node.network_bandwidth_bytes_per_s_per_gpu)
    return bandwidth * coefficient("collective_bandwidth_efficiency")


def tensor_parallel_seconds_per_micro_batch(
    model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, seq_len: int
) -> np.ndarray:
    t = columns.tensor_parallel.astype(float)
    layers_per_stage = most_layers_on_a_stage(model, columns)  # layers / pp for even stages
    message = seq_len * columns.micro_batch * model.hidden_size * PRECISION_COMMUNICATION_BYTES[columns.precision]
    count = TENSOR_PARALLEL_ALL_REDUCES_PER_LAYER + np.where(
        columns.checkpoint_kind == CHECKPOINT_EVERY, RECOMPUTE_EXTRA_ALL_REDUCES_PER_LAYER, 0
    )
    bandwidth = group_bandwidth(gpu, columns.tensor_parallel, columns.tensor_parallel)
    per_all_reduce = 2.0 * (t - 1.0) / t * message / bandwidth
    return layers_per_stage * count * per_all_reduce


def data_parallel_seconds_per_step(
    parameters_per_gpu: np.ndarray,
    gpu: GpuSpec,
    columns: PlanColumns,
    micro_batches: np.ndarray,
    trainable_fraction: float = 1.0,
    frozen_bytes_per_param: float | None = None,
) -> np.ndarray:
    """Total (not yet overlapped) data-parallel communication time per step.

    Only trainable parameters have gradients to reduce; ZeRO-3 gathers every stored
    parameter (frozen ones in their own format)."""
    from vramopt.costs.memory import weight_bytes_per_parameter

    # The context-parallel ranks reduce gradients with the data-parallel ones: a group of
    # dp x cp ranks strided by tp, spanning tp x cp x dp GPUs (ParallelLayout 'sharding').
    from vramopt.parallel_layout import ParallelLayout

    layout = ParallelLayout.from_columns(columns)
    group = layout.sharding_group
    dp = np.asarray(group).astype(float)
    fraction = (dp - 1.0) / dp
    gradient_bytes = parameters_per_gpu * trainable_fraction * PRECISION_BYTES[columns.grad_comm_precision]
    weight_bytes = parameters_per_gpu * weight_bytes_per_parameter(columns, trainable_fraction, frozen_bytes_per_param)
    bandwidth = group_bandwidth(gpu, group, layout.group_span("sharding"))
    replicated = 2.0 * fraction * gradient_bytes
    sharded = micro_batches * fraction * (2.0 * weight_bytes + gradient_bytes)
    volume = np.where(columns.zero_stage >= 3, sharded, replicated)
    return volume / bandwidth
