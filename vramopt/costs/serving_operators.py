"""Operator-level step time of a serving engine: the same GEMM efficiency as training
(``costs/gemm.py``), at the batch a serving step actually runs.

A serving step multiplies ``M`` tokens (the decodes of every running sequence plus the
prompt chunk of the step) by every weight matrix of the model, tensor-parallel shards of
them on each GPU. With ``costs/gemm.py``'s efficiency, ``fraction x waves x depth`` with
``waves = tiles / (tiles + SMs / 2)`` and ``tiles = M N / (TILE_M TILE_N)``, one GEMM of
``(M, N, K)`` takes

    2 M N K / (peak x fraction x depth(K))  +  (SMs / 2) x TILE_M TILE_N x 2 K / (peak x fraction x depth(K))

i.e. its FLOPs at the large-GEMM rate plus half a wave of tiles that run partly empty (NVIDIA
Deep Learning Performance Guide, "Wave quantization"). From ``M = TILE_M`` up the second term
does not depend on ``M``: a decode step of 256 tokens pays the same wave term as one of
8,192 and is much slower per FLOP (decode GEMMs are thin). Below ``TILE_M`` rows the
libraries pick tiles of about ``M`` rows and split K to fill the SMs (cuBLASLt heuristics;
CUTLASS's 64-, 32- and 16-row tile configurations), so the half-empty wave costs
``min(M, TILE_M) / TILE_M`` of it: ``wave(M) = min(M / TILE_M, 1) x gemm_wave_s``. The step is
the smaller of two functions affine in ``M`` (the wave per token, or the constant wave),
which is how the request-level model (``costs/request_serving.py``) keeps an exact fixed
point: the fixed point of the minimum of two increasing functions of slope < 1 is the
smaller of their fixed points. (Routed experts see ``M k / E`` rows each; their wave is
bounded at the same ``M`` as the dense GEMMs: an approximation that overcharges thin expert
GEMMs of a step between ``TILE_M`` and ``TILE_M E / k`` tokens.)
Weight-streaming bound: the GEMMs of a step cannot finish before every weight has crossed
HBM once (the request model's ``max(weights / bandwidth, GEMM time)``).

Per token the model's GEMMs are the layers' (QKV, attention output, MLP or experts:
``costs/operators.py layer_gemms``, scaled to the exact non-embedding parameter count as the
training model does) and the output head, which runs only for tokens that produce logits:
every decode token and the last token of each prompt (vLLM and SGLang compute prefill
logits only at the last position: vLLM ``LogitsProcessor`` over ``logits_indices``).

Memory-bound kernels between the GEMMs, at the HBM bandwidth, from the bytes each reads and
writes per token per GPU (16-bit activations; serving engines fuse them as training does):
``SERVING_NORM_BYTES_H``, the activation function, rotary embedding, the KV-cache write, MoE
token permutation, and the logits with the sampler. The attention core: FlashAttention
kernels at the generation's flash-attention fraction of the 16-bit peak for its FLOPs, or the
KV bytes it reads, whichever is longer (the request model's attention group).

Nothing here is fitted on serving runs: the large-GEMM fractions are the training fits of
``costs/gemm.py`` (Narayanan et al. 2021 Table 1 for Ampere, the Megatron-LM H100 table for
Hopper), so every serving row is out of sample.
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.coefficients import coefficient
from vramopt.costs.compute import non_embedding_active_parameters
from vramopt.costs.gemm import GEMM_DEPTH_OVERHEAD, TILE_M, TILE_N, generation_of
from vramopt.costs.operators import MOE_PERMUTE_BYTES_H, layer_gemms
from vramopt.models.parameters import moe_layer_count
from vramopt.types import GpuSpec, ModelSpec

COMPUTE_PRECISION = ("bf16", "fp8", "bf16", "bf16", "fp4")
"""Tensor-core precision of each serving weight format (costs/inference.py QUANTIZATIONS):
weight-only int8/int4 dequantize to bf16 (Marlin/AWQ kernels), fp8 and fp4 run on their
tensor cores."""

SERVING_NORM_BYTES_H = 16.0
"""Bytes per token per layer, in units of h: two fused add + RMSNorm kernels, each reading the
input and the residual and writing both (4 tensors x 2 bytes; vLLM ``fused_add_rms_norm``,
SGLang's FlashInfer ``fused_add_rmsnorm``). Not split by tensor parallelism (no sequence
parallelism in serving engines)."""
ACTIVATION_BYTES_F = {False: 4.0, True: 6.0}
"""Activation function per token, in units of the MLP width per GPU: GELU reads and writes f;
SiLU-and-mul reads gate and up (2f) and writes f (vLLM ``silu_and_mul``), 2 bytes each."""
ROTARY_BYTES_PER_ELEMENT = 4.0
"""Rotary embedding rewrites Q and K in place: reads and writes 2 bytes per element."""
KV_WRITE_BYTES_PER_ELEMENT = 4.0
"""The new token's K and V read from the projection output and written to the paged cache
(vLLM ``reshape_and_cache``), 2 + 2 bytes per element."""
LOGIT_BYTES = 10.0
"""Per vocabulary entry of a token that produces logits: the head writes the 16-bit logit (2),
the sampler reads it and writes and re-reads fp32 probabilities (2 + 4 + 2 of the top-k/top-p
path counted at 8)."""


def _peak(gpu: GpuSpec, quantization_codes) -> np.ndarray:
    ratios = {"bf16": 1.0, "fp8": coefficient("fp8_utilization_ratio"), "fp4": coefficient("fp4_utilization_ratio")}
    rates = np.array([gpu.peak_flops_per_s.get(name, 0.0) * ratios[name] for name in COMPUTE_PRECISION])
    return rates[np.asarray(quantization_codes)]


def _kernels(model: ModelSpec, tensor_parallel):
    """Per GEMM kernel of one layer, per GPU: (tokens multiplier, n, k, GEMMs, kernels)."""
    t = np.asarray(tensor_parallel, dtype=float)
    dense, moe = layer_gemms(model)
    for multiplier, n, k, count, sharded, batch in dense + moe:
        yield multiplier, n / (t if sharded == 0 else 1.0), k / (t if sharded == 1 else 1.0), count, count / batch


def serving_operator_terms(model: ModelSpec, gpu: GpuSpec, quantization_codes, compute_share, tensor_parallel) -> dict[str, np.ndarray]:
    """Per-GPU building blocks of a serving step for each plan row (arrays broadcast):

    - ``gemm_body_s_per_token``: the layers' GEMMs per token at the large-GEMM rate;
    - ``gemm_head_s_per_token``: the output head's GEMM per token that produces logits;
    - ``gemm_wave_s``: the half-empty last wave of every GEMM kernel of one step (all layers
      and the head), independent of the token count;
    - ``gemm_large_flops_per_s``: the layers' GEMM FLOPs per token over their seconds;
    - ``attention_flops_per_s``: the attention core's rate (FlashAttention, 16-bit);
    - ``elementwise_bytes_per_token`` and ``logit_bytes_per_token``: HBM bytes of the
      memory-bound kernels per token and per token that produces logits.
    """
    generation, multiprocessors = generation_of(gpu)
    fraction = generation.large_gemm_fraction
    t = np.asarray(tensor_parallel, dtype=float)
    peak = _peak(gpu, quantization_codes) * np.asarray(compute_share, dtype=float)
    # A MIG instance has compute_share of the SMs and of the peak: the wave term is unchanged.
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(peak > 0, peak * fraction, np.nan)
        shape_flops, body_s, wave_s = 0.0, 0.0, 0.0
        for multiplier, n, k, count, kernels in _kernels(model, t):
            depth = k / (k + GEMM_DEPTH_OVERHEAD)
            shape_flops = shape_flops + 2.0 * multiplier * n * k * count
            body_s = body_s + 2.0 * multiplier * n * k * count / (rate * depth)
            wave_s = wave_s + kernels * 0.5 * multiprocessors * TILE_M * TILE_N * 2.0 * k / (rate * depth)
        body_flops = 2.0 * non_embedding_active_parameters(model) / model.layers / t
        # Scale to the exact parameter count (biases, norms, MLA's low-rank shapes), as training does.
        body_s = body_s * body_flops / shape_flops * model.layers
        wave_s = wave_s * model.layers
        h = float(model.hidden_size)
        head_depth = h / (h + GEMM_DEPTH_OVERHEAD)
        head_s = 2.0 * model.vocab_size * h / t / (rate * head_depth)
        wave_s = wave_s + 0.5 * multiprocessors * TILE_M * TILE_N * 2.0 * h / (rate * head_depth)
        sixteen = gpu.peak_flops_per_s.get("bf16", 0.0) or gpu.peak_flops_per_s.get("fp16", 0.0)
        attention_rate = np.full(np.shape(t), sixteen * generation.flash_attention_fraction) * np.asarray(compute_share, dtype=float)
    elementwise = elementwise_bytes_per_token(model, t)
    return {
        "gemm_body_s_per_token": np.nan_to_num(body_s, nan=np.inf),
        "gemm_head_s_per_token": np.nan_to_num(head_s, nan=np.inf),
        "gemm_wave_s": np.nan_to_num(wave_s, nan=np.inf),
        "gemm_large_flops_per_s": np.nan_to_num(body_flops * model.layers / body_s, nan=0.0),
        "attention_flops_per_s": attention_rate,
        "elementwise_bytes_per_token": elementwise,
        "logit_bytes_per_token": LOGIT_BYTES * model.vocab_size / t,
    }


def elementwise_bytes_per_token(model: ModelSpec, tensor_parallel) -> np.ndarray:
    """HBM bytes of the memory-bound kernels of every layer for one token on one GPU."""
    t = np.asarray(tensor_parallel, dtype=float)
    h = float(model.hidden_size)
    if model.moe is None:
        width, permute = float(model.ffn_hidden_size), 0.0
    else:
        moe = model.moe
        share = moe_layer_count(model.layers, moe) / model.layers
        width = share * (moe.experts_per_token * moe.expert_ffn_hidden_size + moe.shared_experts * moe.shared_expert_ffn_hidden_size) \
            + (1.0 - share) * model.ffn_hidden_size
        # Dispatch and combine, forward only: half of training's in-and-out permutation bytes.
        permute = share * MOE_PERMUTE_BYTES_H / 2.0 * moe.experts_per_token * h
    # Beyond the KV-head count every GPU keeps one KV head (replicated), as the KV cache does.
    kv_heads = np.maximum(model.kv_heads / t, 1.0)
    rotary = 0.0 if model.learned_positions else ROTARY_BYTES_PER_ELEMENT * (model.heads / t + kv_heads) * model.head_dim
    kv_write = KV_WRITE_BYTES_PER_ELEMENT * 2.0 * kv_heads * model.head_dim
    per_layer = SERVING_NORM_BYTES_H * h + (ACTIVATION_BYTES_F[bool(model.gated_mlp)] * width + permute) / t + rotary + kv_write
    return model.layers * per_layer


def wave_seconds(terms: dict[str, np.ndarray], tokens) -> np.ndarray:
    """The wave term of a step of ``tokens`` tokens: ``min(tokens / TILE_M, 1) x gemm_wave_s``."""
    return np.minimum(np.asarray(tokens, dtype=float) / TILE_M, 1.0) * terms["gemm_wave_s"]


def serving_gemm_flops_per_s(terms: dict[str, np.ndarray], tokens) -> np.ndarray:
    """The achieved rate of the layers' GEMMs in a step of ``tokens`` tokens per GPU row:
    their FLOPs over FLOPs at the large-GEMM rate plus the wave term (thin steps are slow)."""
    tokens = np.asarray(tokens, dtype=float)
    body = terms["gemm_body_s_per_token"]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.nan_to_num(terms["gemm_large_flops_per_s"] * tokens * body / (tokens * body + wave_seconds(terms, tokens)), nan=0.0)
