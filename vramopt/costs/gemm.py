"""Time of one matrix multiplication from its shape, per GPU generation.

A GEMM ``C[M, N] = A[M, K] @ B[K, N]`` does ``2 M N K`` FLOPs. Its efficiency (achieved over
the dense peak of its precision) is the product of three factors:

- ``large_gemm_fraction``: what a large, well-shaped GEMM sustains during training on that
  generation (one coefficient per generation; see ``GENERATIONS`` for which are fitted and
  on what). It stays below the generation's maximum achievable matmul FLOP/s, measured
  with large aligned shapes (stas00/ml-engineering, compute/accelerator/README.md,
  "Maximum Achievable Matmul FLOPS comparison table": A100 SXM 267.9 of 312 TFLOP/s, 85.9%;
  H100 SXM 792.1 of 989, 80.1%; MI300X 781.9 of 1,300, 60.1%; B200 1,745 of 2,250, 77.6%,
  from the same author's B200 comparison), which a test checks.
- wave quantization: cuBLAS/CUTLASS tile the output into ``TILE_M x TILE_N`` blocks, one per
  streaming multiprocessor at a time; the last wave runs partly empty. Averaged over shapes,
  ``w / ceil(w)`` for ``w`` waves is about ``w / (w + 1/2)``: ``tiles / (tiles + SMs / 2)``
  (NVIDIA Deep Learning Performance Guide, "Matrix Multiplication Background", sections
  "Tile quantization" and "Wave quantization"). A thin GEMM (micro-batch 1 at high tensor
  parallelism, a LoRA adapter) fills few tiles and runs slower per FLOP.
- main-loop depth: each tile's K loop pays a prologue and an epilogue (loading the first
  stages of the software pipeline, writing C), about ``GEMM_DEPTH_OVERHEAD`` of K:
  ``K / (K + overhead)``. Small K (the attention core's head dimension) runs slower.

Everything is numpy arithmetic on arrays of shapes, so one call times a GEMM for many
plans at once.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np

from vramopt.costs.coefficients import coefficient
from vramopt.types import GpuSpec

TILE_M = 128
TILE_N = 256
"""Output tile of the cuBLAS/CUTLASS kernels that large bf16 GEMMs select on Ampere and Hopper
(CUTLASS default ``128x256x64`` threadblock shape for SM80/SM90 tensor-op GEMMs; NVIDIA
Matrix Multiplication Background guide, "Tile quantization", lists 256x128 as the most
efficient tile). Assumption: the same tile on the other generations."""

GEMM_DEPTH_OVERHEAD = 128.0
"""Prologue + epilogue of a tile's K loop, in elements of K: a 3-4 stage cp.async/TMA pipeline
of 32- to 64-deep K slices fills and drains about two slices (CUTLASS multistage mainloop).
Assumption with that reasoning; it sets how much slower a K = 64-128 batched GEMM (the
unfused attention core) runs than a K = 4,096 projection."""


GEMM_ELEMENT_BYTES = 2.0
"""Operands and result in 16-bit (fp8 GEMMs still write 16-bit outputs; counted at 2 bytes)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmGeneration:
    name: str
    large_gemm_fraction: float
    """Sustained fraction of the dense peak of a large GEMM in training."""
    max_achievable_fraction: float
    """Measured maximum achievable matmul FLOP/s over peak (upper bound of the above)."""
    flash_attention_fraction: float
    """FlashAttention forward + backward FLOP/s over the 16-bit peak (causal, head dim 128)."""
    sdpa_attention_fraction: float
    """The same for FlashAttention-2-class kernels: torch's ``scaled_dot_product_attention``
    flash backend (Dao's FlashAttention-2 kernels inside ATen) and FlexAttention, which
    torchtitan runs; on Hopper these lack FlashAttention-3's warp specialization and FP8 paths."""
    source: str


FITTED_A100 = 0.7475
FITTED_H100 = 0.6775

GENERATIONS = {
    "ampere": GemmGeneration(
        name="ampere", large_gemm_fraction=FITTED_A100, max_achievable_fraction=267.9 / 312,
        flash_attention_fraction=0.60, sdpa_attention_fraction=0.60,
        source="large_gemm_fraction fitted on Narayanan et al. 2021 Table 1 (ten A100 rows; "
               "benchmarks/calibrate_throughput.py, leave-one-out there); maximum achievable 267.9/312 "
               "(ml-engineering MAMF table, A100 SXM, CUDA 12.1); flash attention: Dao 2023 (FlashAttention-2) "
               "Figure 4-6, forward + backward 176-203 TFLOP/s on A100 at head dim 128, causal, long sequences "
               "(torch's SDPA flash backend runs the same FlashAttention-2 kernels: the same fraction)",
    ),
    "hopper": GemmGeneration(
        name="hopper", large_gemm_fraction=FITTED_H100, max_achievable_fraction=792.1 / 989,
        flash_attention_fraction=0.45, sdpa_attention_fraction=335.0 / 989.5,
        source="large_gemm_fraction fitted on the Megatron-LM README H100 weak-scaling table (nine GPT rows "
               "1.7B-462B; benchmarks/calibrate_throughput.py, leave-one-out there); maximum achievable "
               "792.1/989 (ml-engineering MAMF table, H100 SXM, CUDA 12.1); flash attention: Shah et al. 2024 "
               "(FlashAttention-3) section 4.1, forward up to 740 TFLOP/s (75%) bf16, backward 1.5-1.75x "
               "FlashAttention-2's ~335 TFLOP/s forward + backward: about 45% of peak over both; FlashAttention-2-class "
               "kernels (torch SDPA, FlexAttention) at FlashAttention-2's ~335 TFLOP/s forward + backward on H100 "
               "(Shah et al. 2024 Figures 5-6; its abstract: FlashAttention-2 reaches 35% utilization on H100)",
    ),
    "blackwell": GemmGeneration(
        name="blackwell", large_gemm_fraction=FITTED_H100 * (1745.0 / 2250) / (792.1 / 989),
        max_achievable_fraction=1745.0 / 2250, flash_attention_fraction=0.45,
        sdpa_attention_fraction=335.0 / 989.5,
        source="assumption: no published training run on B200/GB200 in the project's data; the Hopper fit "
               "scaled by the ratio of maximum achievable matmul fractions (B200 1,745/2,250 bf16, "
               "ml-engineering B200 comparison; H100 792.1/989); flash attention as Hopper (FlashAttention-3 "
               "class kernels; FlashAttention-2-class ones at Hopper's fraction too)",
    ),
    "cdna3": GemmGeneration(
        name="cdna3", large_gemm_fraction=FITTED_H100 * (781.9 / 1300) / (792.1 / 989),
        max_achievable_fraction=781.9 / 1300, flash_attention_fraction=0.35,
        sdpa_attention_fraction=0.35,
        source="assumption: no MI300X training run in the project's data; the Hopper fit scaled by the ratio "
               "of maximum achievable matmul fractions (MI300X 781.9/1,300, ROCm 6.2, ml-engineering MAMF "
               "table); flash attention (CK FlashAttention-2 port) at the same 0.6 of the GEMM fraction as "
               "Ampere's FlashAttention-2 (the port is FlashAttention-2 class: the same fraction for torch SDPA)",
    ),
    "consumer": GemmGeneration(
        name="consumer", large_gemm_fraction=FITTED_A100 * 0.8 / (267.9 / 312),
        max_achievable_fraction=0.8, flash_attention_fraction=0.55,
        sdpa_attention_fraction=0.55,
        source="assumption: GeForce/L40-class cards (Ada, consumer Blackwell) have no published MAMF in the "
               "project's sources; 0.8 of peak taken as their maximum achievable matmul fraction, scaled to "
               "training by the A100 fit's ratio; flash attention as Ampere's FlashAttention-2, slightly lower (FlashAttention-2 "
               "kernels: the same for torch SDPA)",
    ),
}

GPU_GENERATION = {
    "a100-40gb": ("ampere", 108), "a100-80gb": ("ampere", 108),
    "h100": ("hopper", 132), "h100-grand-teton": ("hopper", 132), "h100-pcie": ("hopper", 114), "h200": ("hopper", 132), "h800": ("hopper", 132),
    "b200": ("blackwell", 148), "b200-192gb": ("blackwell", 148), "gb200": ("blackwell", 148),
    "mi300x": ("cdna3", 304),
    "rtx4090": ("consumer", 128), "l40s": ("consumer", 142), "rtx5090": ("consumer", 170), "rtx6090": ("consumer", 170),
}
"""Catalog GPU -> (generation, streaming multiprocessors / compute units). SM counts: NVIDIA A100
whitepaper (108), H100 whitepaper (SXM5 132, PCIe 114; H200 and H800 SXM are the same GH100 die as SXM5),
Blackwell B200 (148 SMs, NVIDIA Blackwell architecture technical brief), AMD CDNA3 whitepaper
(MI300X 304 CUs), Ada whitepaper (RTX 4090 128, L40S 142), RTX 5090 (170, NVIDIA RTX Blackwell
whitepaper); RTX 6090 carries the RTX 5090's figures (catalog notes: not a published product).
``h100-grand-teton`` is no catalog GPU: the SXM5 H100 of torchtitan's published runs
(vramopt/validation/grand_teton.py)."""

DEFAULT_GENERATION = ("hopper", 132)
"""assumption: a GPU from a user file with no generation known is timed like an H100 SXM."""


@contextmanager
def large_gemm_fraction_set_to(generation: str, fraction: float):
    """Calibration only (``vramopt/validation/calibration.py``): inside the block, time the
    GEMMs of ``generation`` at ``fraction``; the catalog value is restored on exit."""
    original = GENERATIONS[generation]
    GENERATIONS[generation] = replace(original, large_gemm_fraction=float(fraction))
    try:
        yield
    finally:
        GENERATIONS[generation] = original


def generation_of(gpu: GpuSpec) -> tuple[GemmGeneration, int]:
    name, multiprocessors = GPU_GENERATION.get(gpu.name, DEFAULT_GENERATION)
    return GENERATIONS[name], multiprocessors


def gemm_efficiency(gpu: GpuSpec, m, n, k, large_gemm_fraction: float | None = None, batch=1.0) -> np.ndarray:
    """Achieved over dense peak for a GEMM of shape (m, n, k), ``batch`` of them in one kernel
    (batched or grouped GEMM: their tiles share the waves); arrays broadcast."""
    generation, multiprocessors = generation_of(gpu)
    fraction = generation.large_gemm_fraction if large_gemm_fraction is None else large_gemm_fraction
    m, n, k = (np.asarray(value, dtype=float) for value in (m, n, k))
    tiles = m * n * np.asarray(batch, dtype=float) / (TILE_M * TILE_N)
    waves = tiles / (tiles + 0.5 * multiprocessors)
    depth = k / (k + GEMM_DEPTH_OVERHEAD)
    return fraction * waves * depth


def gemm_seconds(gpu: GpuSpec, peak_flops_per_s, m, n, k, count=1.0, batch=1.0, large_gemm_fraction: float | None = None) -> np.ndarray:
    """Seconds of ``count`` GEMMs of shape (m, n, k) at ``peak_flops_per_s`` (the precision's
    peak), run ``batch`` at a time in one kernel.

    Roofline: a GEMM cannot finish before its operands and result have crossed HBM once
    (``GEMM_ELEMENT_BYTES * (mk + kn + mn)``), which bounds thin GEMMs such as the unfused
    attention core's ``QK^T`` with k = head dim (Williams et al. 2009, the roofline model)."""
    m, n, k = (np.asarray(value, dtype=float) for value in (m, n, k))
    flops = 2.0 * m * n * k * count
    rate = np.asarray(peak_flops_per_s, dtype=float) * gemm_efficiency(gpu, m, n, k, large_gemm_fraction, batch)
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * coefficient("hbm_bandwidth_efficiency")
    memory = GEMM_ELEMENT_BYTES * (m * k + k * n + m * n) * count / bandwidth
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(rate > 0, np.maximum(flops / np.where(rate > 0, rate, 1.0), memory), np.inf)
