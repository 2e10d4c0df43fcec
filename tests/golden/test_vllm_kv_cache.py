"""Golden test: KV cache bytes per token, Kwon et al. 2023 (vLLM) section 3.

Kwon et al. 2023, "Efficient Memory Management for Large Language Model Serving with
PagedAttention", section 3: "the KV cache of a single token demands 800 KB of space,
calculated as 2 (key and value vectors) x 5120 (hidden state size) x 40 (number of layers) x
2 (bytes per FP16)" for OPT-13B: 819,200 bytes (the paper's KB is 1,024 bytes). The same
formula for Llama 3.1 70B (80 layers, 8 KV heads of 128, bf16) gives 327,680 bytes.
Exact.
"""

from __future__ import annotations

import pytest

from vramopt.costs.kv_cache import kv_cache_bytes, kv_cache_bytes_per_token
from vramopt.models import load_model


def test_opt_13b_fp16_is_800_kb_per_token():
    per_token = kv_cache_bytes_per_token(load_model("opt-13b"), "fp16")
    assert per_token == 2 * 5120 * 40 * 2 == 819_200
    assert per_token / 1024 == 800


def test_llama_3_1_70b_bf16_per_token():
    assert kv_cache_bytes_per_token(load_model("llama-3.1-70b"), "bf16") == 2 * 80 * 8 * 128 * 2 == 327_680


def test_fp8_cache_halves_it():
    model = load_model("llama-3.1-70b")
    assert kv_cache_bytes_per_token(model, "fp8") == 327_680 / 2


def test_opt_13b_full_context_of_2048_tokens_is_1_6_gb():
    # Section 3: "Since OPT can generate sequences up to 2048 tokens, the memory required to
    # store the KV cache of one request can be as much as 1.6 GB": 800 KB x 2048 = 1,600 MB
    # in the paper's binary units (1.68e9 bytes).
    contiguous = kv_cache_bytes(load_model("opt-13b"), slots=1, context=2048, kv_dtype="fp16", paged=False)
    assert contiguous == 819_200 * 2048
    assert contiguous / 2**20 == 1600
    assert contiguous / 1e9 == pytest.approx(1.68, abs=0.01)
