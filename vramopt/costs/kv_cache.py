"""Inference memory: KV cache and quantized weights.

KV cache per token (Kwon et al. 2023, vLLM, section 3): keys and values for every layer,
``2 * layers * kv_heads * head_dim * bytes``; OPT-13B in fp16: 2*40*5120*2 = 819,200 bytes
(the paper's "800 KB"). Multi-head latent attention (DeepSeek-V2/V3) caches one compressed
latent of ``kv_lora_rank + qk_rope_head_dim`` values per layer instead (DeepSeek-V2 paper,
section 2.1).
"""

from __future__ import annotations

import math

from vramopt.costs.coefficients import coefficient
from vramopt.costs.precision import BYTES_PER_ELEMENT
from vramopt.types import ModelSpec


def kv_cache_bytes_per_token(model: ModelSpec, kv_dtype: str = "bf16") -> float:
    element_bytes = BYTES_PER_ELEMENT[kv_dtype]
    if model.mla is not None:
        latent = model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
        return model.layers * latent * element_bytes
    return 2 * model.layers * model.kv_heads * model.head_dim * element_bytes


def kv_cache_bytes(
    model: ModelSpec,
    slots: int,
    context: int,
    kv_dtype: str = "bf16",
    paged: bool = True,
    average_context_fraction: float = 1.0,
    block_size_tokens: int = 16,
) -> float:
    """KV cache of ``slots`` concurrent sequences.

    Contiguous allocation reserves the full ``context`` per slot. Paged allocation holds the
    tokens in use (``average_context_fraction`` of the context) rounded up to whole blocks,
    plus vLLM's measured waste (< 4%).
    """
    per_token = kv_cache_bytes_per_token(model, kv_dtype)
    if not paged:
        return slots * context * per_token
    tokens = math.ceil(context * average_context_fraction / block_size_tokens) * block_size_tokens
    return slots * tokens * per_token * (1.0 + coefficient("paged_kv_waste_fraction"))


def quantized_weight_bytes(params: int, quantization: str) -> float:
    return params * BYTES_PER_ELEMENT[quantization]
