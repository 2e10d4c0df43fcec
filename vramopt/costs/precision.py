"""Bytes per element for each precision, and the Adam state bytes K.

Sources: IEEE 754 / OCP FP8 and MX formats for the element sizes; Rajbhandari et al. 2020
(ZeRO) section 3.1 for K = 12 (fp32 master weights + Adam momentum + variance) under mixed
precision; in pure fp32 the weights are the master copy, so K = 8.

FP8 training stores weights and gradients in 1 byte, as FP8-LM does (Peng et al. 2023,
MS-AMP level O2: FP8 weights and FP8 gradients, high-precision master weights and Adam
states kept by the optimizer) and as the seed counts them. Transformer Engine's default
recipe keeps bf16 weights and casts them per GEMM, which would cost ~1-3 more bytes per
parameter; pin a wider precision to plan for that layout.
"""

from __future__ import annotations

import numpy as np

from vramopt.types import PRECISIONS

BYTES_PER_ELEMENT = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5, "int8": 1.0, "int4": 0.5}
"""Storage bytes per element (fp4/int4 ignore the small block-scale overhead)."""

ADAM_STATE_BYTES_MIXED = 12.0
"""ZeRO paper section 3.1: fp32 master copy + momentum + variance, K = 12."""
ADAM_STATE_BYTES_FP32 = 8.0
"""Pure fp32: momentum + variance only, the weights themselves are the master copy."""

# Activation element bytes relative to Korthikanti et al. 2022, whose formulas assume 16-bit
# activations. fp32 doubles them; fp8/fp4 training (Transformer Engine) still keeps most
# saved activations in bf16, so they are counted as 16-bit (assumption, conservative).
ACTIVATION_SCALE = {"fp32": 2.0, "bf16": 1.0, "fp16": 1.0, "fp8": 1.0, "fp4": 1.0}

# Bytes of the activations that tensor-parallel collectives move (bf16 unless fp32 training;
# Transformer Engine's fp8 recipe communicates activations in bf16: assumption).
COMMUNICATION_ACTIVATION_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 2.0, "fp4": 2.0}

PRECISION_BYTES = np.array([BYTES_PER_ELEMENT[name] for name in PRECISIONS])
PRECISION_ACTIVATION_SCALE = np.array([ACTIVATION_SCALE[name] for name in PRECISIONS])
PRECISION_COMMUNICATION_BYTES = np.array([COMMUNICATION_ACTIVATION_BYTES[name] for name in PRECISIONS])
PRECISION_ADAM_BYTES = np.array(
    [ADAM_STATE_BYTES_FP32 if name == "fp32" else ADAM_STATE_BYTES_MIXED for name in PRECISIONS]
)


def precision_index(name: str) -> int:
    return PRECISIONS.index(name)
