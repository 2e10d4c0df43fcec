"""Context parallelism: ring attention over a group of ``cp`` GPUs that share the sequence.

What is modelled (sources):
- Sharding. The cp ranks of a group split every sequence: each holds ``s/cp`` tokens of every
  layer's activations and of the logits, and runs the GEMMs of its tokens only (Liu et al.
  2023, "Ring Attention with Blockwise Transformers", section 3; Megatron-Core
  ``docs/source/api-guide/context_parallel.rst``; torchtitan ``docs/context_parallel.md``).
- Load balancing. The sequence is cut into ``2*cp`` chunks and rank r keeps chunks r and
  ``2*cp-1-r`` (Megatron-Core ``get_batch_on_this_cp_rank``; torchtitan's round-robin
  ``_HeadTailLoadBalancer``), so under a causal mask every rank does the same attention
  work: attention FLOPs per rank are the total over cp. Without it the last rank would do
  about twice the average (its queries see the whole prefix); vramopt models the balanced
  split only, which both frameworks use by default.
- Ring. Attention of a layer takes cp steps; in each of the first cp-1 a rank sends its
  current K,V chunk to the next rank and receives one from the previous, while it computes
  attention on the chunk it holds (Liu et al. 2023 section 3, Megatron-Core/Transformer
  Engine ``AttnFuncWithCPAndKVP2P``). A chunk is ``2 * (s/cp) * b * kv_heads * head_dim``
  16-bit elements, divided over tp (each tp rank holds kv_heads/tp heads). The backward
  pass sends K,V and receives their gradients dK,dV: twice the forward bytes, against
  the attention backward's twice-the-forward FLOPs. A step's transfer is exposed only where
  it outlasts that step's attention compute: ``max(0, transfer - attention / cp)``.
- Variant not modelled separately: Llama 3 (Dubey et al. 2024, section 3.3.2) all-gathers
  K and V before computing attention on its local queries instead of passing them round a
  ring; each rank receives the same (cp-1)/cp of the K,V, but exposed before the attention
  rather than overlapped with it. vramopt plans the ring (Megatron-Core, torchtitan).
- Link. The cp group of rank order tp (innermost), cp, dp, pp spans ``tp * cp`` consecutive
  GPUs: NVLink while that fits one node, the network once it does not (the ring's slowest
  hop sets the pace). Each step is a point-to-point exchange with one neighbour, so a
  fully connected mesh offers one link (``group_bandwidth`` with a group of 2).
- Gradients. cp ranks hold the same weights, so they join the data-parallel group for the
  gradient reduction and for ZeRO/FSDP sharding: that group has ``dp * cp`` ranks
  (Megatron-Core's distributed optimizer shards over the data-parallel-with-context-parallel
  group; torchtitan's FSDP mesh is ``dp_shard_cp``).
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.pipeline_stages import most_layers_on_a_stage, timed_stage_layers, uneven
from vramopt.costs.columns import CHECKPOINT_EVERY, PlanColumns, sharding_group  # noqa: F401 (re-exported)
from vramopt.costs.communication import group_bandwidth
from vramopt.costs.operators import attention_core_seconds
from vramopt.parallel_layout import ParallelLayout
from vramopt.types import GpuSpec, ModelSpec

ATTENTION_TILE_TOKENS = 128
"""Tokens of one FlashAttention tile along the sequence (FlashAttention-2, Dao 2023, section
3.3: block sizes 64 or 128, the head-dim-128 forward kernel uses 128-row query blocks).
Each of the 2*cp load-balanced chunks must be whole tiles, so no rank computes a padded
tile (assumption: vramopt's validity rule; Megatron-Core itself only needs s divisible by
2*cp)."""

LOAD_BALANCED_CHUNKS_PER_RANK = 2
"""Megatron-Core ``get_batch_on_this_cp_rank``: 2*cp chunks, two per rank (r and 2cp-1-r)."""

RING_KV_BYTES_PER_ELEMENT = 2.0
"""K and V travel in 16-bit (bf16) around the ring: torchtitan and Transformer Engine run the
attention core in bf16 also under Float8 linears (torchao float8 converts nn.Linear only);
fp32 training moves 4 bytes (see ``ring_kv_bytes_per_element``)."""

BACKWARD_RING_FACTOR = 2.0
"""Backward sends K,V and returns dK,dV: twice the forward bytes (Transformer Engine
``AttnFuncWithCPAndKVP2P.backward``), overlapped with the attention backward's 2x FLOPs."""


def tokens_per_rank(seq_len, columns: PlanColumns) -> np.ndarray:
    """Tokens of one sequence each cp rank holds: s / cp."""
    return ParallelLayout.from_columns(columns).tokens_per_rank(seq_len)


def whole_tile_chunks(seq_len, context_parallel) -> np.ndarray:
    """True where s splits into 2*cp chunks of whole attention tiles (cp = 1 always does)."""
    cp = np.asarray(context_parallel, dtype=np.int64)
    tile = LOAD_BALANCED_CHUNKS_PER_RANK * cp * ATTENTION_TILE_TOKENS
    return (cp == 1) | (int(seq_len) % tile == 0)


def context_parallel_invalid_reasons(seq_len: int, columns: PlanColumns) -> dict[str, np.ndarray]:
    cp = columns.context_parallel
    return {
        f"context_parallel must split seq_len into 2 x context_parallel chunks of whole "
        f"{ATTENTION_TILE_TOKENS}-token attention tiles": ~whole_tile_chunks(seq_len, cp),
        "context_parallel > 1 needs flash_attention (ring attention is blockwise)": (cp > 1)
        & (columns.flash_attention == 0),
    }


def kv_elements_per_token(model: ModelSpec) -> float:
    """K plus V elements of one token of one layer (MLA: the per-head expanded K and V that
    the attention core consumes, as Megatron-Core's MLA passes them to the CP attention)."""
    if model.mla is not None:
        mla = model.mla
        return float(model.heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim))
    return 2.0 * model.kv_heads * model.head_dim


def ring_kv_bytes_per_element(columns: PlanColumns) -> np.ndarray:
    from vramopt.types import PRECISIONS

    fp32 = PRECISIONS.index("fp32")
    return np.where(columns.precision == fp32, 4.0, RING_KV_BYTES_PER_ELEMENT)


def kv_chunk_bytes(model: ModelSpec, columns: PlanColumns, seq_len) -> np.ndarray:
    """Bytes one rank sends per ring step of one layer's forward: its K,V of s/cp tokens.

    Tensor parallelism splits the KV heads; with tp above the KV heads each rank keeps one
    (replicated) head, as Megatron-Core does for grouped-query attention."""
    tp = columns.tensor_parallel.astype(float)
    if model.mla is not None:
        per_token = kv_elements_per_token(model) / tp
    else:
        per_token = 2.0 * np.maximum(model.kv_heads / tp, 1.0) * model.head_dim
    return tokens_per_rank(seq_len, columns) * columns.micro_batch * per_token * ring_kv_bytes_per_element(columns)


def ring_bandwidth(gpu: GpuSpec, columns: PlanColumns) -> np.ndarray:
    """Per-GPU bandwidth of the ring's point-to-point steps over the link the group crosses."""
    span = ParallelLayout.from_columns(columns).group_span("context_parallel")  # cp ranks, tp apart
    return group_bandwidth(gpu, 2, span)


def attention_forward_seconds_per_layer(model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, seq_len) -> np.ndarray:
    """Forward attention-core time of one layer on one rank, as the compute model charges it
    (``operators.attention_core_seconds``, per layer of the stage)."""
    forward, _ = attention_core_seconds(model, gpu, columns, int(seq_len))
    timed_layers = timed_stage_layers(model, columns, "last")  # the stage attention_core_seconds times
    return np.where(uneven(columns), forward / np.maximum(timed_layers, 1), forward * columns.pipeline_parallel / model.layers)


def ring_transfer_seconds_per_step(model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, seq_len) -> np.ndarray:
    return kv_chunk_bytes(model, columns, seq_len) / ring_bandwidth(gpu, columns)


def forward_passes(columns: PlanColumns) -> np.ndarray:
    """Forward rings per layer and micro-batch: one, two under full recomputation."""
    return np.where(columns.checkpoint_kind == CHECKPOINT_EVERY, 2.0, 1.0)


def ring_seconds_per_micro_batch(model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, seq_len) -> dict[str, np.ndarray]:
    """Ring transfer time of one micro-batch on one stage: total and exposed (not hidden
    behind the attention compute of the same step), forward and backward, all layers."""
    cp = columns.context_parallel.astype(float)
    if np.all(cp == 1.0):  # no ring anywhere: skip timing the attention it would hide behind
        zeros = np.zeros(len(columns))
        return {"ring_transfer_s": zeros, "ring_exposed_s": zeros}
    steps = cp - 1.0
    layers = most_layers_on_a_stage(model, columns)  # layers / pp for even stages (costs/pipeline_stages.py)
    transfer = ring_transfer_seconds_per_step(model, gpu, columns, seq_len)
    attention_step = attention_forward_seconds_per_layer(model, gpu, columns, seq_len) / cp
    forward_exposed = np.maximum(0.0, transfer - attention_step)
    passes = forward_passes(columns)
    total = layers * steps * transfer * (passes + BACKWARD_RING_FACTOR)
    exposed = layers * steps * forward_exposed * (passes + BACKWARD_RING_FACTOR)
    return {"ring_transfer_s": total, "ring_exposed_s": exposed}
