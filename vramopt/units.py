"""Units. Internally: bytes, seconds, FLOP and FLOP/s, bytes/s. Conversions happen only
in loaders and at the display edge.

GB means 1e9 bytes (decimal, as GPU datasheets use it); GiB means 2**30 bytes. They are
not interchangeable: a datasheet's "80 GB" is 80e9 bytes (74.5 GiB), while the CUDA
runtime of that H100 reports 85,045,477,376 bytes (79.2 GiB), the capacity plans fill.
"""

from __future__ import annotations

import math

import numpy as np

BYTES_PER_KB = 1e3
BYTES_PER_MB = 1e6
BYTES_PER_GB = 1e9
BYTES_PER_TB = 1e12
BYTES_PER_KIB = 2**10
BYTES_PER_MIB = 2**20
BYTES_PER_GIB = 2**30
BYTES_PER_TIB = 2**40
BITS_PER_BYTE = 8
FLOPS_PER_TFLOPS = 1e12

# Suffix of a catalog key -> factor to the internal unit. The suffix names the unit, so a
# datasheet's "GB" and a measurement's "GiB" can both be written down exactly as given.
SUFFIX_FACTORS: dict[str, float] = {
    "_bytes": 1.0,
    "_kb": BYTES_PER_KB,
    "_mb": BYTES_PER_MB,
    "_gb": BYTES_PER_GB,
    "_tb": BYTES_PER_TB,
    "_mib": BYTES_PER_MIB,
    "_gib": BYTES_PER_GIB,
    "_tib": BYTES_PER_TIB,
    "_gb_per_s": BYTES_PER_GB,
    "_tb_per_s": BYTES_PER_TB,
    "_gbit_per_s": BYTES_PER_GB / BITS_PER_BYTE,
    "_tflops": FLOPS_PER_TFLOPS,
}


def bytes_to_gib(value_bytes: float) -> float:
    return value_bytes / BYTES_PER_GIB


def bytes_to_gb(value_bytes: float) -> float:
    return value_bytes / BYTES_PER_GB


def bytes_to_mib_ceil(value_bytes: float) -> int:
    """Round up to whole MiB: the solver's integer memory unit (never rounds a need down)."""
    return math.ceil(value_bytes / BYTES_PER_MIB)


MAX_TABLE_MIB = 2**40
"""Largest memory the solver's int64 tables hold (2**40 MiB = 1 EiB, millions of times
any GPU): a larger need (an absurd config.json) is stored as this, which still never fits."""


def mib_ceil_array(value_bytes) -> np.ndarray:
    """Needs in whole MiB, rounded up, as int64 (NaN or above MAX_TABLE_MIB -> MAX_TABLE_MIB,
    so a cast can never wrap around to a negative need)."""
    mib = np.ceil(np.asarray(value_bytes, dtype=float) / BYTES_PER_MIB)
    return np.where(np.isnan(mib), MAX_TABLE_MIB, np.minimum(mib, MAX_TABLE_MIB)).astype(np.int64)


def bytes_to_mib_floor(value_bytes: float) -> int:
    """Round down to whole MiB: used for capacities (never rounds a budget up)."""
    return math.floor(value_bytes / BYTES_PER_MIB)


def format_bytes(value_bytes: float) -> str:
    """Human display in decimal GB (the unit of GPU datasheets), e.g. '140.0 GB'."""
    if abs(value_bytes) >= BYTES_PER_TB:
        return f"{value_bytes / BYTES_PER_TB:.2f} TB"
    if abs(value_bytes) >= BYTES_PER_GB:
        return f"{value_bytes / BYTES_PER_GB:.1f} GB"
    if abs(value_bytes) >= BYTES_PER_MB:
        return f"{value_bytes / BYTES_PER_MB:.1f} MB"
    return f"{value_bytes:.0f} B"


def micro_batches_phrase(count: float) -> str:
    """'1 micro-batch', '2 micro-batches', '1.5 micro-batches' (a count of micro-batches in flight)."""
    return f"{count:.3g} micro-batch" + ("" if float(count) == 1.0 else "es")
