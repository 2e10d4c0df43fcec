"""Coefficients of the cost model that are not hardware or model data, each with a source.

A coefficient is a calibrated or assumed number the formulas need (utilization,
overlap, bandwidth efficiency). ``tests/unit/test_sources.py`` fails when one lacks a
source. Values are read through ``COEFFICIENTS[name].value``; nothing mutates them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Coefficient:
    value: float
    source: str


_COEFFICIENTS = {
    "base_utilization": Coefficient(
        0.574,
        "calibration of the earlier model, used by no cost formula any more: training and serving time each GEMM from its "
        "shape (costs/gemm.py, costs/operators.py, costs/serving_operators.py); kept as the earlier model's reference for "
        "benchmarks/claims_audit.py and benchmarks/serving_claims.py. "
        "Original calibration, with the earlier training model: fraction of dense peak that the GEMM-bound compute of one micro-batch "
        "reaches end to end, before the pipeline bubble and exposed communication that vramopt "
        "models separately. Fitted to Narayanan et al. 2021 Table 1 (A100 80GB, 312 TFLOP/s bf16 "
        "peak; ten GPT rows 1.7B-1T, achieved 135-163 TFLOP/s per GPU; micro-batch and virtual "
        "stages from NVIDIA/Megatron-LM examples/sc21/run_table_1.sh; full recomputation, no "
        "flash attention, no ZeRO) by minimizing the mean absolute relative error of achieved "
        "FLOP/s: fit 0.5738, mean error 4.0%, max 10.5% (1.7B row; 1T row -8.2%). Reproduce with "
        "the earlier benchmark; the training fit is now benchmarks/calibrate_throughput.py.",
    ),
    "fp8_utilization_ratio": Coefficient(
        0.85,
        "assumption: FP8 GEMMs reach 85% of the utilization of bf16 ones (scaling/casting "
        "overhead, non-GEMM work stays bf16), so with a 2x peak FP8 trains 1.7x faster than "
        "bf16: inside the seed's 1.6-2x range.",
    ),
    "fp4_utilization_ratio": Coefficient(
        0.70,
        "assumption: FP4 is experimental (seed: not production-ready); block scaling costs more "
        "than FP8's per-tensor scaling, so 70% of bf16 utilization.",
    ),
    "fp32_utilization_ratio": Coefficient(
        0.90,
        "assumption: pure fp32 runs on the CUDA cores' FP32 rate (no tensor cores), which is "
        "easier to keep busy than tensor cores but still loses some time to memory-bound kernels.",
    ),
    "collective_bandwidth_efficiency": Coefficient(
        0.80,
        "assumption from nccl-tests practice: all-reduce bus bandwidth reaches about 75-85% of the "
        "link's one-direction peak on NVLink and on 400 Gb/s InfiniBand for large messages.",
    ),
    "pcie_efficiency": Coefficient(
        0.80,
        "assumption: pinned-memory cudaMemcpy reaches about 80% of the PCIe link's theoretical "
        "one-direction bandwidth (e.g. ~50 of 63 GB/s on Gen5 x16).",
    ),
    "cpu_adam_params_per_s_per_node": Coefficient(
        10e9,
        "assumption from physics: CPU Adam is host-memory-bandwidth bound; it reads and writes "
        "fp32 params, m, v and reads grads (~28-32 bytes per parameter), and a 2-socket server "
        "sustains ~300-400 GB/s, so ~1e10 parameters/s per node (DeepSpeed CPU-Adam, Ren et al. "
        "2021 ZeRO-Offload, reports the same order of magnitude).",
    ),
    "host_ram_usable_fraction": Coefficient(
        0.80,
        "assumption: the OS, the data loader and pinned staging buffers keep ~20% of host RAM, so "
        "offloaded states may use 80% of it.",
    ),
    "nvme_usable_fraction": Coefficient(
        0.90,
        "assumption: filesystem overhead and other files leave 90% of the NVMe capacity for "
        "offloaded states.",
    ),
    "qlora_dequantization_overhead": Coefficient(
        0.25,
        "assumption: QLoRA's NF4 layers dequantize their weights to bf16 on every matmul "
        "(bitsandbytes); users commonly report 16-bit LoRA 20-40% faster than QLoRA, so the "
        "linear layers' time is charged 25% more.",
    ),
    "hbm_bandwidth_efficiency": Coefficient(
        0.80,
        "assumption: memory-bound decode kernels stream weights and KV cache at about 80% of "
        "the datasheet HBM bandwidth (STREAM-like copies reach 80-90% on H100/H200).",
    ),
    "all_reduce_latency_s": Coefficient(
        10e-6,
        "assumption: latency of one small-message all-reduce inside an NVLink node (nccl-tests "
        "report ~10-20 us; vLLM's custom all-reduce ~5 us). With 2 all-reduces per layer it puts "
        "the tensor-parallel decode overhead of a 70B model at ~9-12% for tp 2 (the seed's 5-15%), "
        "more at tp 4-8 where each GPU's share of the step shrinks (docs/claims.md).",
    ),
    "paged_kv_waste_fraction": Coefficient(
        0.04,
        "Kwon et al. 2023 (vLLM, PagedAttention) section 6: under 4% of KV cache memory wasted.",
    ),
}

COEFFICIENTS = MappingProxyType(_COEFFICIENTS)


def coefficient(name: str) -> float:
    return COEFFICIENTS[name].value
