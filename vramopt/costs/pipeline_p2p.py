"""Pipeline point-to-point time: the activations each stage sends to the next, and their
gradients sent back, for every micro-batch.

Message. A stage boundary carries the hidden state of one micro-batch: ``b * (s / cp) * h``
elements, 16-bit (4 bytes in fp32 training; fp8 recipes keep the pipeline tensors in bf16, as
the tensor-parallel collectives: ``precision.COMMUNICATION_ACTIVATION_BYTES``). Under tensor
parallelism each of the ``t`` ranks of a stage holds the same tensor; Megatron-LM sends only
``1 / t`` of it from each rank and all-gathers the pieces over NVLink on the receiving stage
(Narayanan et al. 2021 section 4.1, "scatter/gather optimization"; Megatron-LM
``--scatter-gather-tensors-in-pipeline``, on by default). Under sequence parallelism the
boundary tensor is already split ``s / t`` per rank (Korthikanti et al. 2022 section 4.2.2), so
each rank sends its ``1 / t`` and nothing is gathered. Either way a rank sends
``b * (s / cp) * h / t`` elements; without sequence parallelism the receiver also all-gathers
``(t - 1) / t`` of the full tensor over its tensor-parallel group.

Link. Consecutive stages are ``tp * cp * dp`` ranks apart (``ParallelLayout`` rank order); the
transfer runs over the intra-node fabric when the pipeline group stays in one node, else over
the GPU's network share (``ParallelLayout.spans_nodes('pipeline_parallel')``,
``communication.group_bandwidth``: the slowest link sets the pace of the lock-step schedule).

Exposure. Per micro-batch and model chunk a stage sends one activation forward and one
gradient backward and receives one of each; the two sends leave through the same link, so a
micro-batch slot holds ``2 * v`` message times on every stage (v model chunks per GPU: the
interleaved schedule multiplies the communication by v, Narayanan et al. 2021 section 2.2.2).
Over a step that is ``slots * 2 * v`` with ``slots = m + (p - 1) / v``, i.e.
``2 * (v * m + p - 1)`` messages: the steady state's ``2 v m`` and the ``p - 1`` hops forward
and back that the fill and drain of the pipeline cross. The transfers are blocking: Megatron-LM's
1F1B schedules wait for ``send_forward_recv_backward`` / ``send_backward_recv_forward``
(``megatron/core/pipeline_parallel/schedules.py``, p2p ops waited before the next compute), and
PyTorch's ``Schedule1F1B`` (torchtitan) waits on its receives before each stage's compute. So all
of it is on the critical path, except where the framework overlaps it
(``TrainingCase.pipeline_p2p_overlap``): Megatron-Core's ``overlap_p2p_comm`` (on by default,
``--no-overlap-p2p-communication``) issues the next chunk's transfers asynchronously under the
current chunk's compute, for the interleaved schedule only (``megatron/training/arguments.py``
turns it off without interleaving and ``forward_backward_pipelining_without_interleaving``
refuses it; Megatron-LM d98e8a6); then a slot exposes
``max(0, 2 v * message - compute of one micro-batch)``.

Not modelled: per-message latency (a few to tens of microseconds, small beside megabyte
messages at the layouts vramopt plans), and the embedding-gradient all-reduce between the first
and last stages of a tied-embedding model.
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.columns import PlanColumns
from vramopt.costs.communication import group_bandwidth
from vramopt.costs.precision import PRECISION_COMMUNICATION_BYTES
from vramopt.parallel_layout import ParallelLayout
from vramopt.types import GpuSpec, ModelSpec

MESSAGES_PER_SLOT_PER_CHUNK = 2.0
"""One activation forward and one gradient backward per micro-batch and model chunk."""


def boundary_tensor_bytes(model: ModelSpec, columns: PlanColumns, seq_len: int) -> np.ndarray:
    """Bytes of the full hidden state one micro-batch carries across a stage boundary (one cp rank)."""
    tokens = np.asarray(columns.micro_batch, dtype=float) * ParallelLayout.from_columns(columns).tokens_per_rank(seq_len)
    return tokens * model.hidden_size * PRECISION_COMMUNICATION_BYTES[np.asarray(columns.precision)]


def message_seconds(model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, seq_len: int) -> np.ndarray:
    """Seconds of one stage-to-stage message on one rank: its ``1 / t`` share over the link the
    pipeline group crosses, plus (without sequence parallelism) the receiver's all-gather."""
    layout = ParallelLayout.from_columns(columns)
    t = np.asarray(columns.tensor_parallel, dtype=float)
    full = boundary_tensor_bytes(model, columns, seq_len)
    link = group_bandwidth(gpu, 2, layout.group_span("pipeline_parallel"))
    send = full / t / link
    gather_bandwidth = group_bandwidth(gpu, columns.tensor_parallel, columns.tensor_parallel)
    gather = np.where(np.asarray(columns.sequence_parallel) == 1, 0.0, (t - 1.0) / t * full / gather_bandwidth)
    return send + gather


def pipeline_p2p_seconds(
    model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, seq_len: int, micro_batches,
    compute_per_micro_batch_s, overlap: bool = False,
) -> dict[str, np.ndarray]:
    """Pipeline point-to-point time per step: ``transfer_s`` (all messages on one rank's
    critical path) and ``exposed_s`` (what the schedule does not hide); 0 at pp = 1."""
    layout = ParallelLayout.from_columns(columns)
    virtual = np.asarray(columns.virtual_stages, dtype=float)
    slots = layout.pipeline_slots(micro_batches, virtual)
    per_slot = MESSAGES_PER_SLOT_PER_CHUNK * virtual * message_seconds(model, gpu, columns, seq_len)
    pipelined = np.asarray(columns.pipeline_parallel) > 1
    transfer = np.where(pipelined, per_slot * slots, 0.0)
    if not overlap:
        return {"transfer_s": transfer, "exposed_s": transfer}
    hidden_per_slot = np.maximum(0.0, per_slot - np.asarray(compute_per_micro_batch_s, dtype=float))
    exposed = np.where(virtual > 1, np.where(pipelined, hidden_per_slot * slots, 0.0), transfer)
    return {"transfer_s": transfer, "exposed_s": exposed}
