"""Inference memory: KV cache and quantized weights, the one implementation that serving's
cost model (``costs.inference.evaluate_serving``) calls.

KV cache per token (Kwon et al. 2023, vLLM, section 3): keys and values for every layer,
``2 * layers * kv_heads * head_dim * bytes``; OPT-13B in fp16: 2*40*5120*2 = 819,200 bytes
(the paper's "800 KB"). Multi-head latent attention (DeepSeek-V2/V3) caches one compressed
latent of ``kv_lora_rank + qk_rope_head_dim`` values per layer instead (DeepSeek-V2 paper,
section 2.1).

Quantized weights: the bytes per parameter the serving engine allocates for each format,
the packed weights plus their per-group metadata (vLLM's ``create_weights`` of each method):
- ``int4`` is AWQ (vLLM ``awq.py``, ``AWQLinearMethod.create_weights``): ``qweight`` packs
  eight 4-bit weights per int32; per group of ``GROUP_SIZE`` input rows and per output
  column, ``scales`` holds one fp16 scale and ``qzeros`` one 4-bit zero point (also packed
  eight per int32): 4 + (16 + 4) / 128 = 4.15625 bits. A 16-bit zero point would give the
  often-quoted 4.25 bits; AWQ and GPTQ pack zero points at the weight width.
- ``int8`` is GPTQ at 8 bits (vLLM ``gptq.py``, ``GPTQLinearMethod.create_weights``): the
  same layout with 8-bit weights and zero points: 8 + (16 + 8) / 128 = 8.1875 bits. Its
  ``g_idx`` (one int32 per input row, 32 / output-width bits per weight, < 0.01 bits for
  widths of 4,096 and more) is left out.
- ``fp4`` is NVFP4 (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision
  Inference", 2025; TensorRT Model Optimizer's format): 4-bit E2M1 values with one FP8 (E4M3)
  scale per block of 16: 4 + 8 / 16 = 4.5 bits (the one fp32 scale per tensor is left out).
- ``fp8`` is one byte per weight (one fp32 scale per tensor, left out); ``bf16`` two.
"""

from __future__ import annotations

import math

import numpy as np

from vramopt.costs.coefficients import coefficient
from vramopt.costs.precision import BYTES_PER_ELEMENT
from vramopt.types import ModelSpec

GROUP_SIZE = 128
"""Input rows sharing one scale and zero point in int8/int4 checkpoints: the default
``group_size`` / ``q_group_size`` of AutoGPTQ and AutoAWQ, and the common published
checkpoints' setting (e.g. ``w4-g128``)."""

BITS_PER_PARAMETER = {
    "bf16": 16.0,
    "fp8": 8.0,
    "int8": 8.0 + (16.0 + 8.0) / GROUP_SIZE,
    "int4": 4.0 + (16.0 + 4.0) / GROUP_SIZE,
    "fp4": 4.0 + 8.0 / 16,
}
"""Stored bits per weight of each serving format, metadata included (module docstring)."""


def quantized_weight_bytes(params: float, quantization: str) -> float:
    """Bytes of ``params`` weights stored in ``quantization`` (bf16, fp8, int8, int4, fp4)."""
    return params * BITS_PER_PARAMETER[quantization] / 8.0


def kv_cache_bytes_per_token(model: ModelSpec, kv_dtype: str = "bf16") -> float:
    element_bytes = BYTES_PER_ELEMENT[kv_dtype]
    if model.mla is not None:
        latent = model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
        return model.layers * latent * element_bytes
    return 2 * model.layers * model.kv_heads * model.head_dim * element_bytes


def kv_tokens_in_use(context: int, average_context_fraction: float, block_size_tokens: int) -> float:
    """Tokens a sequence holds on average, rounded up to whole PagedAttention blocks."""
    return math.ceil(context * average_context_fraction / block_size_tokens) * block_size_tokens


def kv_cache_bytes(
    model: ModelSpec,
    slots,
    context: int,
    kv_dtype: str = "bf16",
    paged=True,
    average_context_fraction: float = 1.0,
    block_size_tokens: int = 16,
):
    """KV cache of ``slots`` concurrent sequences (``slots`` and ``paged`` may be arrays,
    one value per plan; the result is then an array).

    Contiguous allocation reserves the full ``context`` per slot. Paged allocation holds the
    tokens in use (``average_context_fraction`` of the context) rounded up to whole blocks,
    plus vLLM's measured waste (< 4%).
    """
    per_token = kv_cache_bytes_per_token(model, kv_dtype)
    in_use = kv_tokens_in_use(context, average_context_fraction, block_size_tokens)
    tokens_held = np.where(paged, in_use * (1.0 + coefficient("paged_kv_waste_fraction")), float(context))
    total = slots * tokens_held * per_token
    return float(total) if np.ndim(total) == 0 else total
