"""Choosing the scaled-dot-product-attention kernel, and finding out which one really runs.

``torch.nn.attention.sdpa_kernel`` restricts SDPA to the listed backends; a backend that
cannot serve the call (flash in fp32 on CUDA, a head_dim it does not support, grouped-query
K/V on a kernel without ``enable_gqa``) makes SDPA raise instead of silently falling back.
So before each run a tiny call with the run's dtype, heads and head_dim probes which
backend will serve it, and the row records that backend rather than the one requested.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from decoder_model import ModelShape

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    SDPA_BACKENDS: dict[str, Any] = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }
except ImportError:  # torch < 2.3: no way to force a backend; the row says 'default'
    SDPA_BACKENDS = {}


@contextmanager
def attention_kernel(backend: str) -> Iterator[None]:
    """Allow only the given SDPA backend for everything inside (recomputation included)."""
    if backend not in SDPA_BACKENDS:
        with nullcontext():
            yield
        return
    with sdpa_kernel([SDPA_BACKENDS[backend]]):
        yield


def _kernel_runs(backend: str, native_gqa: bool, dtype: torch.dtype, shape: ModelShape, device: torch.device,
                 training: bool) -> bool:  # fmt: skip
    """Try a tiny causal SDPA (and its backward) with only ``backend`` allowed."""
    kv_heads = shape.kv_heads if native_gqa else shape.heads
    factory = {"device": device, "dtype": dtype, "requires_grad": training}
    query = torch.randn(1, shape.heads, 64, shape.head_dim, **factory)
    key = torch.randn(1, kv_heads, 64, shape.head_dim, **factory)
    value = torch.randn(1, kv_heads, 64, shape.head_dim, **factory)
    extra = {"enable_gqa": True} if kv_heads != shape.heads else {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a refused backend warns before it raises
            with attention_kernel(backend):
                output = F.scaled_dot_product_attention(query, key, value, is_causal=True, **extra)
                if training:
                    output.sum().backward()
        return True
    except (RuntimeError, TypeError, NotImplementedError):
        return False


_RESOLVED: dict[tuple[Any, ...], tuple[str, str]] = {}


def resolve_attention(requested: str, dtype: torch.dtype, shape: ModelShape, device: torch.device,
                      training: bool) -> tuple[str, str]:  # fmt: skip
    """The backend that will actually run, and how K/V reach it ('mha', 'native', 'repeat').

    Flash has no fp32 kernel on CUDA, so a flash request falls back to the memory-efficient
    kernel (no s^2 scores either), and to math only if neither runs. Grouped-query K/V go
    to the kernel natively (``enable_gqa``) when it accepts them, else repeated to all heads.
    """
    if not SDPA_BACKENDS:
        return "default", "mha" if shape.kv_heads == shape.heads else "native"
    key = (requested, dtype, shape.heads, shape.kv_heads, shape.head_dim, training, device.type)
    if key in _RESOLVED:
        return _RESOLVED[key]
    order = ["flash", "efficient", "math"] if requested == "flash" else [requested]
    gqa_modes = [True] if shape.kv_heads == shape.heads else [True, False]
    for backend in order:
        for native in gqa_modes:
            if _kernel_runs(backend, native, dtype, shape, device, training):
                mode = "mha" if shape.kv_heads == shape.heads else ("native" if native else "repeat")
                _RESOLVED[key] = (backend, mode)
                return backend, mode
    raise RuntimeError(f"no SDPA backend among {order} runs {dtype} head_dim {shape.head_dim} here")
