"""Exposed communication: what of a collective's time the compute beside it does not hide.

Data parallelism (PyTorch DDP, FSDP, DeepSpeed ZeRO with ``overlap_comm``, Megatron-Core's
``overlap_grad_reduce``) reduces gradients in buckets as the backward pass produces them
(Li et al. 2020, "PyTorch Distributed", section 3.2.3), so the reduction runs beside the
backward compute that remains after each bucket is ready. vramopt counts only the GEMMs of
that compute as the overlap window (they depend only on the layout, precision and
micro-batch, not on checkpointing, which keeps the step time separable for the solver; the
kernels between GEMMs would hide a little more):

- ZeRO 0-2: gradients are reduced once per step, during the last micro-batch's backward
  (earlier micro-batches accumulate locally: DDP ``no_sync``). Exposed:
  ``max(0, comm - backward GEMMs of one micro-batch)``, at least the tail.
- ZeRO-3 / FSDP: every micro-batch all-gathers the parameters for its forward and backward
  and reduce-scatters its gradients, prefetching the next layer's parameters while the
  current one computes (FSDP ``forward_prefetch``/``backward_prefetch``; DeepSpeed
  ``stage3_prefetch_bucket_size``). Exposed: ``m * max(0, comm per micro-batch - GEMMs per
  micro-batch)``, at least the tail.
- ZeRO 1-2 with the parameter all-gather overlapped (Megatron-Core's distributed optimizer with
  ``--overlap-param-gather``, ``TrainingCase.parameter_gather_overlap``): the gradients'
  reduce-scatter runs beside the last micro-batch's backward as above, and the updated
  parameters' all-gather beside the next step's first forward, bucket by bucket in forward
  pre-hooks (``megatron/core/distributed/param_and_grad_buffer.py``). Exposed:
  ``max(0, reduce-scatter - backward GEMMs) + max(0, all-gather - forward GEMMs)`` of one
  micro-batch, each half of the step's volume.
- tail: the last bucket is produced by the last operator of the backward and cannot overlap
  anything: one bucket of ``DDP_BUCKET_BYTES`` at the collective's bandwidth.

Frameworks that reduce after the backward instead (Megatron-LM's local DDP before
``overlap_grad_reduce``, the 2021-2022 papers' setup: Korthikanti et al. 2022 section 6.3,
"the gradient all-reduce is not overlapped") expose the whole reduction
(``TrainingCase.data_parallel_overlap = False``).

Tensor parallelism: exposed by default (Megatron-LM's collectives sit between GEMMs that
need their result); with ``TrainingCase.tensor_parallel_overlap`` (Megatron-Core
``--tp-comm-overlap`` via Transformer Engine userbuffers, Wang et al. 2022 "Overlap
Communication with Dependent Computation via Decomposition"; torchtitan async TP) each
collective is pipelined with the GEMM it feeds, leaving ``max(0, comm - GEMM time)``.
Megatron-LM since September 2021 (``--async-tensor-model-parallel-allreduce``, on unless
``--no-async-...``; ``megatron/mpu/layers.py`` ``LinearWithGradAccumulationAndAsyncCommunication``
at 7fccd6a, May 2022, the code of Korthikanti et al. 2022) hides part of the backward
(``TrainingCase.tensor_parallel_backward_overlap``): each column-parallel linear (QKV, MLP up)
launches its input-gradient all-reduce (the f operator's backward), or under sequence
parallelism its reduce-scatter, asynchronously and computes its weight gradient meanwhile. Per
layer that is 2 of the 4 all-reduces without sequence parallelism, and 2 reduce-scatters (one
all-reduce's volume) of the 4 all-reduce volumes with it (the backward's all-gathers, the
reduce-scatter's gradients, stay exposed; the re-gather of the input for the weight gradient runs
beside the input-gradient GEMM and is not counted); a recomputed forward adds exposed
collectives. Hidden: up to the column-parallel weight-gradient GEMMs' time. Not modelled: the
SMs NCCL takes from the GEMM it runs beside. The Megatron-LM of Narayanan et al. 2021
(``examples/sc21``, August 2021) predates it.
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.communication import RECOMPUTE_EXTRA_ALL_REDUCES_PER_LAYER, TENSOR_PARALLEL_ALL_REDUCES_PER_LAYER

BACKWARD_HIDEABLE_ALL_REDUCE = 2.0
"""All-reduce volumes per layer the column-parallel weight gradients can hide without sequence
parallelism: the input-gradient all-reduces of QKV and MLP up."""
BACKWARD_HIDEABLE_SEQUENCE_PARALLEL = 1.0
"""With sequence parallelism: their two reduce-scatters, each half an all-reduce's volume."""

DDP_BUCKET_BYTES = 25 * 2**20
"""PyTorch DDP's default ``bucket_cap_mb=25`` (MiB; torch.nn.parallel.DistributedDataParallel).
DeepSpeed's ``reduce_bucket_size`` default 5e8 elements is larger; 25 MiB is the common case."""


def exposed_data_parallel_seconds(
    communication_s, bandwidth_bytes_per_s, backward_per_micro_batch_s, compute_per_micro_batch_s,
    micro_batches, zero_stage, overlap: bool, parameter_gather_overlap: bool = False,
) -> np.ndarray:
    """Exposed data-parallel time per step (see the module docstring); arrays broadcast."""
    communication_s = np.asarray(communication_s, dtype=float)
    if not overlap:
        return communication_s
    tail = np.minimum(communication_s, DDP_BUCKET_BYTES / np.asarray(bandwidth_bytes_per_s, dtype=float))
    replicated = np.maximum(0.0, communication_s - backward_per_micro_batch_s)
    if parameter_gather_overlap:
        forward_per_micro_batch_s = np.asarray(compute_per_micro_batch_s) - np.asarray(backward_per_micro_batch_s)
        split = (np.maximum(0.0, communication_s / 2.0 - backward_per_micro_batch_s)
                 + np.maximum(0.0, communication_s / 2.0 - forward_per_micro_batch_s))
        replicated = np.where((np.asarray(zero_stage) >= 1) & (np.asarray(zero_stage) <= 2), split, replicated)
    per_micro_batch = communication_s / micro_batches
    sharded = micro_batches * np.maximum(0.0, per_micro_batch - compute_per_micro_batch_s)
    hidden_part = np.where(np.asarray(zero_stage) >= 3, sharded, replicated)
    return np.maximum(hidden_part, tail)


def exposed_tensor_parallel_seconds(communication_s, gemm_s, overlap: bool, backward_overlap: bool = False,
                                    sequence_parallel=0, full_recompute=False, column_weight_gradient_s=0.0) -> np.ndarray:
    """Exposed tensor-parallel time per micro-batch: all of it, what outlasts the GEMMs (full
    overlap), or all but the input-gradient collectives that the column-parallel weight
    gradients hide (``backward_overlap``, Megatron-LM's asynchronous all-reduce)."""
    communication_s = np.asarray(communication_s, dtype=float)
    if overlap:
        return np.maximum(0.0, communication_s - gemm_s)
    if not backward_overlap:
        return communication_s
    collectives = TENSOR_PARALLEL_ALL_REDUCES_PER_LAYER + np.where(full_recompute, RECOMPUTE_EXTRA_ALL_REDUCES_PER_LAYER, 0)
    hideable_share = np.where(np.asarray(sequence_parallel) == 1, BACKWARD_HIDEABLE_SEQUENCE_PARALLEL,
                              BACKWARD_HIDEABLE_ALL_REDUCE) / collectives
    hidden = np.minimum(communication_s * hideable_share, np.asarray(column_weight_gradient_s, dtype=float))
    return communication_s - hidden
