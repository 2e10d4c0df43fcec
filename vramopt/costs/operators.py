"""Operator-level compute time of one micro-batch on one GPU: GEMMs, attention core, and the
memory-bound kernels, forward, backward and recomputation.

Per layer, for ``T = s * b / cp`` tokens on one tensor-parallel rank (``t`` ranks):

- GEMMs (``costs/gemm.py`` times each from its shape): QKV ``(T, (a + 2 kv) d / t, h)``,
  attention output ``(T, h, a d / t)``, MLP up (+ gate) ``(T, f / t or 2 f / t, h)`` and down
  ``(T, h, f / t)``; routed experts with ``T k / E`` tokens each, shared experts; the output
  head ``(T, V / t, h)``. The backward pass runs the activation gradient ``(T, K, N)`` and,
  for trainable weights, the weight gradient ``(K, N, T)`` of each. The FLOPs are scaled to
  the exact parameter count (``compute.linear_flops_per_parameter``), so multi-head latent
  attention and biases are counted, with the shapes setting the efficiency.
- Attention core. FlashAttention (Dao 2023): a causal kernel computes half of the ``s x s``
  scores; the backward runs 2.5x the forward FLOPs (it recomputes the scores), at the
  generation's flash-attention fraction of the 16-bit peak (fp8 training keeps attention in
  bf16: torchao Float8 and Transformer Engine convert the linear layers only). Unfused
  (Megatron-LM before flash attention): batched GEMMs ``QK^T (s, s, d)`` and ``PV (s, d, s)``
  over ``b a / t`` heads, four of the same shapes in the backward, plus the score matrices'
  memory traffic (``UNFUSED_SCORE_BYTES``).
- Memory-bound kernels at the HBM bandwidth (coefficient ``hbm_bandwidth_efficiency``), from
  the bytes each reads and writes (``ELEMENTWISE_*``): norms, bias-dropout-residual, the
  activation function, rotary embedding, MoE token permutation, and the cross-entropy over
  the vocabulary. The norm and residual kernels run on all ``T`` tokens on every
  tensor-parallel rank unless sequence parallelism splits them (Korthikanti et al. 2022
  section 4.2.2).
- Recomputation re-runs what each mode discards: full (``every:k``) the whole forward of the
  layers; selective the attention core (its GEMMs and score kernels) where flash attention
  is off; under flash attention selective recomputes nothing (the kernel already recomputes
  its scores in the backward).

Pipeline stages. Megatron-LM and torchtitan place the output head and the loss on the last
stage, so under pipeline parallelism that stage is the slowest and sets the pace of the
schedule: the time returned is the last stage's (its ``layers / pp`` layers plus the head and
the loss; at pp = 1 the whole model), or with ``stage="inner"`` the heaviest other stage's
layers without the head (uneven stages, costs/pipeline_stages.py; compute.py takes the slower). Everything is numpy over ``PlanColumns``.
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.coefficients import coefficient
from vramopt.costs.columns import CHECKPOINT_EVERY, CHECKPOINT_SELECTIVE, PlanColumns
from vramopt.costs.gemm import gemm_seconds, generation_of
from vramopt.costs.pipeline_stages import timed_stage_layers
from vramopt.costs.precision import PRECISION_ACTIVATION_SCALE
from vramopt.models.parameters import moe_layer_count
from vramopt.parallel_layout import ParallelLayout
from vramopt.types import PRECISIONS, GpuSpec, ModelSpec

ELEMENTWISE_REPLICATED_FORWARD_H = 22.0
"""Bytes per token per layer, in units of h, of the kernels sequence parallelism splits, 16-bit:
two norms (read x, write y: 4h each) and two bias-dropout-residual adds (read the branch and
the residual, write the sum, write a 1-byte dropout mask: 7h each), as Megatron-LM fuses them
(``fused_layer_norm``, ``bias_dropout_add_fused_train``). Dropout kept as in costs/activations.py."""
ELEMENTWISE_REPLICATED_BACKWARD_H = 22.0
"""Their backward: norm backward reads x and dy and writes dx (6h each); dropout-residual
backward reads the gradient and the mask and writes the branch gradient (5h each)."""

ACTIVATION_FORWARD_F = {False: 4.0, True: 6.0}
"""Activation function per token, in units of the MLP width f: GELU reads f and writes f
(Megatron's fused bias-GELU); SwiGLU reads gate and up (2f) and writes f."""
ACTIVATION_BACKWARD_F = {False: 6.0, True: 10.0}
"""GELU backward reads the gradient and the input, writes the input gradient (3f x 2 bytes);
SwiGLU's reads the gradient, gate and up, writes both input gradients (5f x 2 bytes)."""

ROTARY_BYTES_PER_ELEMENT = 4.0
"""Rotary embedding reads and writes Q and K (2 + 2 bytes per element), forward and backward."""
MOE_PERMUTE_BYTES_H = 8.0
"""Token dispatch and combine of a MoE layer: each of the k copies of a token is read and
written once on the way in and once on the way out (2 x (2 + 2) bytes per element of h)."""
CROSS_ENTROPY_BYTES_PER_LOGIT = 16.0
"""Vocabulary-parallel cross-entropy per logit, forward and backward: read the bf16 logit, write
and re-read the fp32 exponentials, write the bf16 gradient (Megatron
``vocab_parallel_cross_entropy``; 2 + 4 + 4 + 4 + 2 bytes)."""

UNFUSED_SCORE_BYTES_FORWARD = 9.0
"""Bytes per score element of unfused attention, forward: masked softmax reads and writes the
16-bit scores (4), dropout reads, writes and keeps a 1-byte mask (5) (Megatron-LM
``FusedScaleMaskSoftmax`` + ``attention_dropout``; Korthikanti et al. 2022 eq. 1 counts the
same tensors)."""
UNFUSED_SCORE_BYTES_BACKWARD = 11.0
"""Backward: dropout backward reads the gradient and mask, writes the gradient (5); softmax
backward reads the gradient and the output, writes the input gradient (6)."""

FLASH_CAUSAL_WORK_FRACTION = 0.5
"""A causal FlashAttention kernel skips the blocks above the diagonal: half the s x s work
(Dao 2023 section 3.1; its benchmarks count causal FLOPs as half)."""
FLASH_BACKWARD_WORK_RATIO = 2.5
"""FlashAttention backward FLOPs over forward: 5 GEMMs of the tile against 2 (Dao 2023 section
3.2; the FLOP count of its benchmark script)."""

BF16 = PRECISIONS.index("bf16")
FP32 = PRECISIONS.index("fp32")


def linear_peak(gpu: GpuSpec, precision) -> np.ndarray:
    """Peak of the linear layers' GEMMs per precision code, with the fp8/fp4/fp32 ratios."""
    ratios = {"fp32": coefficient("fp32_utilization_ratio"), "bf16": 1.0, "fp16": 1.0,
              "fp8": coefficient("fp8_utilization_ratio"), "fp4": coefficient("fp4_utilization_ratio")}
    return np.array([gpu.peak_flops_per_s.get(name, 0.0) * ratios[name] for name in PRECISIONS])[np.asarray(precision)]


def attention_peak(gpu: GpuSpec, precision) -> np.ndarray:
    """Peak of the attention core: 16-bit, except in fp32 training; 0 where the GPU lacks the
    plan's own precision (the plan is invalid anyway)."""
    precision = np.asarray(precision)
    supported = np.array([gpu.peak_flops_per_s.get(name, 0.0) for name in PRECISIONS])[precision] > 0
    sixteen = gpu.peak_flops_per_s.get("bf16", 0.0) or gpu.peak_flops_per_s.get("fp16", 0.0)
    peak = np.where(precision == FP32, gpu.peak_flops_per_s.get("fp32", 0.0) * coefficient("fp32_utilization_ratio"), sixteen)
    return np.where(supported, peak, 0.0)


def _mlp_gemms(width: float, hidden: int, gated: bool):
    """(n, k) of the up(+gate) and down projections of an MLP of ``width`` (before tp)."""
    return ((2.0 * width if gated else width), hidden), (hidden, width)


def layer_gemms(model: ModelSpec):
    """Per-layer GEMMs as (tokens multiplier, n, k, count, sharded_dim, batch): tokens
    multiplier scales T (experts see T k / E), ``count`` is how many per layer on average,
    ``sharded_dim`` says whether tp splits n (0) or k (1), ``batch`` how many run in one kernel."""
    h, d = model.hidden_size, model.head_dim
    gemms = [(1.0, (model.heads + 2 * model.kv_heads) * d, h, 1.0, 0, 1), (1.0, h, model.heads * d, 1.0, 1, 1)]
    dense = _mlp_gemms(model.ffn_hidden_size, h, model.gated_mlp)
    if model.moe is None:
        return gemms + [(1.0, *dense[0], 1.0, 0, 1), (1.0, *dense[1], 1.0, 1, 1)], []
    moe = model.moe
    share = moe_layer_count(model.layers, moe) / model.layers
    routed = _mlp_gemms(moe.expert_ffn_hidden_size, h, model.gated_mlp)
    tokens = moe.experts_per_token / moe.experts
    # Routed experts run as one grouped GEMM of E problems (their tiles share the waves).
    moe_gemms = [(tokens, *routed[0], moe.experts * share, 0, moe.experts), (tokens, *routed[1], moe.experts * share, 1, moe.experts)]
    if moe.shared_experts:
        shared = _mlp_gemms(moe.shared_experts * moe.shared_expert_ffn_hidden_size, h, model.gated_mlp)
        moe_gemms += [(1.0, *shared[0], share, 0, 1), (1.0, *shared[1], share, 1, 1)]
    dense_share = 1.0 - share
    return gemms + [(1.0, *dense[0], dense_share, 0, 1), (1.0, *dense[1], dense_share, 1, 1)], moe_gemms


def _pass_seconds(gpu, peak, tokens, n, k, count, trainable_fraction, batch=1.0):
    """Forward, and activation- plus weight-gradient, time of ``count`` GEMMs (m = tokens)."""
    forward = gemm_seconds(gpu, peak, tokens, n, k, count, batch)
    activation_gradient = gemm_seconds(gpu, peak, tokens, k, n, count, batch)
    weight_gradient = gemm_seconds(gpu, peak, k, n, tokens, count, batch) * trainable_fraction
    return forward, activation_gradient + weight_gradient


def linear_seconds(model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, tokens, trainable_fraction: float, linear_parameters: float,
                   stage: str = "last"):
    """GEMM seconds for ``tokens`` tokens on one rank: (layers forward, layers backward, head
    forward, head backward, the column-parallel layers' weight gradients) of the last stage,
    scaled so the forward FLOPs are ``2 * linear_parameters`` per token. The last is the window
    behind which Megatron-LM runs each column-parallel linear's input-gradient collective
    (costs/overlap.py)."""
    t = columns.tensor_parallel.astype(float)
    peak = linear_peak(gpu, columns.precision)
    dense, moe = layer_gemms(model)
    layout = ParallelLayout.from_columns(columns)
    ep = np.asarray(layout.expert_parallel, dtype=float)
    etp = np.asarray(layout.expert_tensor_parallel, dtype=float)
    forward = backward = column_weight_gradient = 0.0
    shape_flops = 0.0
    for multiplier, n, k, count, sharded, batch in dense + moe:
        split, rank_multiplier, rank_count, rank_batch = t, multiplier, count, batch
        if batch > 1:
            # Routed experts: E/ep of them on this rank, each f/etp wide, fed by the tokens
            # of the ep x etp ranks that route to them (costs/expert_parallel.py): the same
            # FLOPs as a 1/tp share of all E, in fatter GEMMs as ep grows.
            split, rank_multiplier = etp, multiplier * ep * etp / t
            rank_count, rank_batch = count / ep, batch / ep
        n_rank, k_rank = (n / split, k) if sharded == 0 else (n, k / split)
        fwd, bwd = _pass_seconds(gpu, peak, tokens * rank_multiplier, n_rank, k_rank, rank_count, trainable_fraction, rank_batch)
        forward, backward = forward + fwd, backward + bwd
        if sharded == 0:  # column-parallel (QKV, MLP up/gate, expert up): tp splits n
            column_weight_gradient = column_weight_gradient + trainable_fraction * gemm_seconds(
                gpu, peak, k_rank, n_rank, tokens * rank_multiplier, rank_count, rank_batch)
        shape_flops += 2.0 * multiplier * n * k * count
    layers = timed_stage_layers(model, columns, stage)  # layers / pp for even stages
    head_forward, head_backward = _pass_seconds(gpu, peak, tokens, model.vocab_size / t, model.hidden_size, 1.0, trainable_fraction)
    if stage != "last":  # the first and middle stages run no head
        head_forward, head_backward = 0.0 * head_forward, 0.0 * head_backward
    head_flops = 2.0 * model.vocab_size * model.hidden_size
    # Scale forward FLOPs to the exact parameter count (norms, biases, MLA's low-rank shapes).
    scale = 2.0 * linear_parameters / (model.layers * shape_flops + head_flops)
    return (scale * layers * forward, scale * layers * backward, scale * head_forward, scale * head_backward,
            scale * layers * column_weight_gradient)


def attention_core_seconds(model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, seq_len: int, stage: str = "last"):
    """(forward, backward) attention-core seconds of one stage's layers for one micro-batch on one rank."""
    t = columns.tensor_parallel.astype(float)
    heads = model.heads / t * columns.micro_batch
    d = float(model.head_dim if model.mla is None else model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim)
    s = float(seq_len)
    tokens_per_rank = ParallelLayout.from_columns(columns).tokens_per_rank(s)
    generation, _ = generation_of(gpu)
    peak = attention_peak(gpu, columns.precision)
    layers = timed_stage_layers(model, columns, stage)
    flash_forward_flops = 4.0 * tokens_per_rank * s * d * heads * FLASH_CAUSAL_WORK_FRACTION
    with np.errstate(divide="ignore", invalid="ignore"):
        flash_rate = np.where(peak > 0, peak * generation.flash_attention_fraction, np.nan)
        flash_forward = flash_forward_flops / flash_rate
    unfused_forward = gemm_seconds(gpu, peak, s, s, d, heads, heads) + gemm_seconds(gpu, peak, s, d, s, heads, heads)
    unfused_backward = gemm_seconds(gpu, peak, s, s, d, heads, heads) + 3.0 * gemm_seconds(gpu, peak, s, d, s, heads, heads)
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * coefficient("hbm_bandwidth_efficiency")
    scores = heads * s * s * PRECISION_ACTIVATION_SCALE[columns.precision]
    unfused_forward = unfused_forward + scores * UNFUSED_SCORE_BYTES_FORWARD / bandwidth
    unfused_backward = unfused_backward + scores * UNFUSED_SCORE_BYTES_BACKWARD / bandwidth
    flash = columns.flash_attention == 1
    forward = np.where(flash, flash_forward, unfused_forward)
    backward = np.where(flash, flash_forward * FLASH_BACKWARD_WORK_RATIO, unfused_backward)
    forward, backward = np.nan_to_num(forward, nan=np.inf), np.nan_to_num(backward, nan=np.inf)
    return layers * forward, layers * backward


def elementwise_seconds(model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, tokens, stage: str = "last"):
    """(forward, backward) seconds of the memory-bound kernels of one stage for ``tokens`` tokens on one rank."""
    t = columns.tensor_parallel.astype(float)
    h = float(model.hidden_size)
    scale = PRECISION_ACTIVATION_SCALE[columns.precision]
    replicated_share = np.where(columns.sequence_parallel == 1, 1.0 / t, 1.0)
    gated = bool(model.gated_mlp)
    if model.moe is None:
        width = float(model.ffn_hidden_size)
        permute = 0.0
    else:
        moe = model.moe
        share = moe_layer_count(model.layers, moe) / model.layers
        moe_width = moe.experts_per_token * moe.expert_ffn_hidden_size + moe.shared_experts * moe.shared_expert_ffn_hidden_size
        width = share * moe_width + (1.0 - share) * model.ffn_hidden_size
        permute = share * MOE_PERMUTE_BYTES_H * moe.experts_per_token * h
    rotary = 0.0 if model.learned_positions else ROTARY_BYTES_PER_ELEMENT * (model.heads + model.kv_heads) * model.head_dim
    forward = h * ELEMENTWISE_REPLICATED_FORWARD_H * replicated_share + (ACTIVATION_FORWARD_F[gated] * width + rotary + permute) / t
    backward = h * ELEMENTWISE_REPLICATED_BACKWARD_H * replicated_share + (ACTIVATION_BACKWARD_F[gated] * width + rotary + permute) / t
    layers = timed_stage_layers(model, columns, stage)
    loss = CROSS_ENTROPY_BYTES_PER_LOGIT * model.vocab_size / t * (1.0 if stage == "last" else 0.0)
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * coefficient("hbm_bandwidth_efficiency")
    per_byte = tokens * scale / bandwidth
    return per_byte * (layers * forward + loss / 2.0), per_byte * (layers * backward + loss / 2.0)


def sdpa_attention_extra_seconds(model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, seq_len: int) -> np.ndarray:
    """Extra seconds of one micro-batch's flash attention when it runs as FlashAttention-2-class
    kernels (torch ``scaled_dot_product_attention``, FlexAttention: what torchtitan calls) instead
    of the generation's best kernels that ``attention_core_seconds`` charges (FlashAttention-3 /
    cuDNN on Hopper, as Megatron-Core's Transformer Engine runs): the forward and backward, and
    the forward again under full recomputation. Zero where flash attention is off or the two
    fractions agree (Ampere)."""
    generation, _ = generation_of(gpu)
    forward, backward = attention_core_seconds(model, gpu, columns, seq_len)
    full = columns.checkpoint_kind == CHECKPOINT_EVERY
    flash_seconds = forward + backward + np.where(full, forward, 0.0)
    slower = generation.flash_attention_fraction / generation.sdpa_attention_fraction - 1.0
    return np.where(columns.flash_attention == 1, flash_seconds * slower, 0.0)


EAGER_NORM_FORWARD_BYTES = 36.0
"""torch eager RMSNorm per element (ATen ``rms_norm`` composite, torch.nn.RMSNorm as torchtitan
builds it without torch.compile): upcast to fp32 (read 2, write 4), pow (4 + 4), mean (read 4),
x * rsqrt (4 + 4), back to bf16 (4 + 2), x weight (2 + 2) bytes."""
EAGER_NORM_BACKWARD_BYTES = 64.0
"""Its autograd backward per element: weight product (8, with the weight-gradient reduction),
the cast (6), x * rsqrt (16, with the reduction for the rsqrt gradient), the mean's expand
(4), pow (12), the two upcast-gradient branches summed (12), the cast back (6) bytes."""
EAGER_RESIDUAL_BYTES_H = 12.0
"""Two residual adds per layer, each reading two bf16 tensors and writing one (6h), forward;
the same for the gradient accumulation of the backward."""
EAGER_ACTIVATION_FORWARD_F = {False: 8.0, True: 10.0}
"""Eager activation per element of f: SwiGLU's ``silu(w1 x) * w3 x`` (torchtitan FeedForward) as
two kernels, silu (2 + 2) and the product (2 + 2 + 2); GELU as one kernel plus the bias add."""
EAGER_ACTIVATION_BACKWARD_F = {False: 12.0, True: 18.0}
"""The product's backward (two gradients, 6 + 6) and silu's (read gradient and input, write: 6)."""
EAGER_ROTARY_BYTES_PER_ELEMENT = 40.0
"""torchtitan ``apply_rotary_emb`` per element of Q and K, forward + backward: upcast to fp32
(2 + 4), complex multiply by the frequencies (4 + 4), cast back (4 + 2) = 20 bytes each pass."""
EAGER_LAYOUT_BYTES_PER_ATTENTION_ELEMENT = 16.0
"""Copies around the attention core per element of a*d, forward + backward: the output's
``transpose(1, 2).contiguous()`` (2 + 2) and the materialized ``repeat_kv`` of K and V for
grouped-query attention (writing a*d elements of each, 2 + 2), each pass."""
EAGER_CROSS_ENTROPY_BYTES_PER_LOGIT = 36.0
"""Eager cross-entropy per logit, forward + backward: bf16 logits cast to fp32 (2 + 4),
log_softmax (read 4 twice, write 4), its backward (4 + 4 + 4), cast of the gradient (4 + 2)."""


def eager_elementwise_extra_seconds(model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, seq_len: int) -> np.ndarray:
    """Extra seconds of one micro-batch's memory-bound kernels when they run as separate eager
    PyTorch kernels (no torch.compile, no fused norm/activation/rotary kernels) instead of the
    fused kernels ``elementwise_seconds`` charges: the unfused byte counts above minus the
    fused ones. torchtitan without ``--training.compile`` runs this way."""
    tokens = ParallelLayout.from_columns(columns).tokens_per_rank(seq_len) * columns.micro_batch
    t = columns.tensor_parallel.astype(float)
    h = float(model.hidden_size)
    scale = PRECISION_ACTIVATION_SCALE[columns.precision]
    replicated_share = np.where(columns.sequence_parallel == 1, 1.0 / t, 1.0)
    gated = bool(model.gated_mlp)
    width = float(model.ffn_hidden_size) if model.moe is None else (
        model.moe.experts_per_token * model.moe.expert_ffn_hidden_size + model.moe.shared_experts * model.moe.shared_expert_ffn_hidden_size)
    rotary = 0.0 if model.learned_positions else EAGER_ROTARY_BYTES_PER_ELEMENT * (model.heads + model.kv_heads) * model.head_dim
    layout = EAGER_LAYOUT_BYTES_PER_ATTENTION_ELEMENT * model.heads * model.head_dim
    per_layer = (h * (2.0 * (EAGER_NORM_FORWARD_BYTES + EAGER_NORM_BACKWARD_BYTES) + 2.0 * EAGER_RESIDUAL_BYTES_H) * replicated_share
                 + ((EAGER_ACTIVATION_FORWARD_F[gated] + EAGER_ACTIVATION_BACKWARD_F[gated]) * width + rotary + layout) / t)
    layers = model.layers / columns.pipeline_parallel
    loss = EAGER_CROSS_ENTROPY_BYTES_PER_LOGIT * model.vocab_size / t
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * coefficient("hbm_bandwidth_efficiency")
    eager = tokens * scale / bandwidth * (layers * per_layer + loss)
    fused_forward, fused_backward = elementwise_seconds(model, gpu, columns, tokens)
    return np.maximum(eager - fused_forward - fused_backward, 0.0)


def micro_batch_operator_seconds(
    model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, seq_len: int, trainable_fraction: float,
    compute_overhead_fraction: float, linear_parameters: float, stage: str = "last",
) -> dict[str, np.ndarray]:
    """Forward + backward + recomputation of one micro-batch on one GPU (one cp rank of one
    stage), split by operator class; ``compute_s`` is their sum."""
    tokens = ParallelLayout.from_columns(columns).tokens_per_rank(seq_len) * columns.micro_batch
    layer_forward, layer_backward, head_forward, head_backward, column_weight_gradient = (
        part * (1.0 + compute_overhead_fraction)
        for part in linear_seconds(model, gpu, columns, tokens, trainable_fraction, linear_parameters, stage)
    )
    attention_forward, attention_backward = attention_core_seconds(model, gpu, columns, seq_len, stage)
    other_forward, other_backward = elementwise_seconds(model, gpu, columns, tokens, stage)
    full = columns.checkpoint_kind == CHECKPOINT_EVERY
    selective = (columns.checkpoint_kind == CHECKPOINT_SELECTIVE) & (columns.flash_attention == 0)
    # The head and the loss run once after the last layer: full recomputation repeats the layers only.
    recompute = (np.where(full, layer_forward + other_forward, 0.0)
                 + np.where(full | selective, attention_forward, 0.0))
    linear = layer_forward + layer_backward + head_forward + head_backward
    attention = attention_forward + attention_backward
    other = other_forward + other_backward
    return {
        "linear_s": linear,
        "linear_backward_s": layer_backward + head_backward,
        "column_weight_gradient_s": column_weight_gradient,
        "attention_s": attention,
        "elementwise_s": other,
        "recompute_s": recompute,
        "forward_s": layer_forward + head_forward + attention_forward + other_forward,
        "compute_s": linear + attention + other + recompute,
    }
