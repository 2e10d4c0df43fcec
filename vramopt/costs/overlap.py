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
"""

from __future__ import annotations

import numpy as np

DDP_BUCKET_BYTES = 25 * 2**20
"""PyTorch DDP's default ``bucket_cap_mb=25`` (MiB; torch.nn.parallel.DistributedDataParallel).
DeepSpeed's ``reduce_bucket_size`` default 5e8 elements is larger; 25 MiB is the common case."""


def exposed_data_parallel_seconds(
    communication_s, bandwidth_bytes_per_s, backward_per_micro_batch_s, compute_per_micro_batch_s,
    micro_batches, zero_stage, overlap: bool,
) -> np.ndarray:
    """Exposed data-parallel time per step (see the module docstring); arrays broadcast."""
    communication_s = np.asarray(communication_s, dtype=float)
    if not overlap:
        return communication_s
    tail = np.minimum(communication_s, DDP_BUCKET_BYTES / np.asarray(bandwidth_bytes_per_s, dtype=float))
    replicated = np.maximum(0.0, communication_s - backward_per_micro_batch_s)
    per_micro_batch = communication_s / micro_batches
    sharded = micro_batches * np.maximum(0.0, per_micro_batch - compute_per_micro_batch_s)
    hidden_part = np.where(np.asarray(zero_stage) >= 3, sharded, replicated)
    return np.maximum(hidden_part, tail)


def exposed_tensor_parallel_seconds(communication_s, gemm_s, overlap: bool) -> np.ndarray:
    """Exposed tensor-parallel time per micro-batch: all of it, or what outlasts the GEMMs."""
    communication_s = np.asarray(communication_s, dtype=float)
    if not overlap:
        return communication_s
    return np.maximum(0.0, communication_s - gemm_s)
