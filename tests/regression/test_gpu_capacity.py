"""Issue 11 item 17: a GPU's capacity is the memory the runtime reports, not the datasheet's.

Before the fix every GPU's capacity was its datasheet figure read as decimal GB ("80 GB"
H100 = 80e9 bytes), while the CUDA runtime of an H100 80GB HBM3 reports 85,045,477,376
bytes (deviceQuery; nvidia-smi shows 81,559 MiB, the driver's reservation included). Now
``capacity_bytes`` (``GpuSpec.memory_bytes``) is the runtime figure, the datasheet figure
is a separate field for display, and the headroom rule applies to the runtime figure.
Each expected value below is the published reading the catalog cites (or, where none is
published, the derivation the catalog states as an assumption).
"""

from __future__ import annotations

import pytest

from vramopt.estimate import estimate_serving, estimate_training
from vramopt.hardware import all_gpus, load_gpu
from vramopt.types import ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload

MIB = 2**20
GIB = 2**30

RUNTIME_BYTES = {
    # CUDA deviceQuery "Total amount of global memory" (GitHub thamada/nvidia-smi, gls/*_deviceQuery.py).
    "h100": 85_045_477_376,      # H100 80GB HBM3; nvidia-smi 81559 MiB on the same machine
    "a100-80gb": 85_100_068_864,  # A100-SXM4-80GB; nvidia-smi 81920 MiB
    "l40s": 47_803_596_800,      # L40S; nvidia-smi 46068 MiB
    "rtx4090": 25_386_352_640,   # RTX 4090; nvidia-smi 24564 MiB
    # HIP hipGetDeviceProperties "Total Global Memory (MB)" 196592 on MI300X (same repository).
    "mi300x": 196_592 * MIB,
    # hashcat's CUDA device listing on 8x B200: 182642 MiB (nvidia-smi 183359 MiB).
    "b200": 182_642 * MIB,
    # PyTorch OOM messages on H200: "GPU 0 has a total capacity of 139.80 GiB".
    "h200": round(139.80 * GIB),
    # Assumptions stated in the catalog: nvidia-smi total less a sibling's measured reservation.
    "h100-pcie": 85_045_477_376,  # 81559 MiB like the H100 SXM; the SXM's runtime figure
    "h800": 85_045_477_376,  # the H100 SXM's: the same 80 GB HBM3 part (issue 17)
    "a100-40gb": 40_536 * MIB,  # cudaDeviceProp.totalGlobalMem of an A100-SXM4-40GB (PaddlePaddle get_device_properties docstring)
    "gb200": (189_471 - 717) * MIB,  # B200's 183359 - 182642 MiB
    "rtx5090": (32_607 - 354) * MIB,  # RTX 4090's 24564 - 24210 MiB
    # Not products: scaled from the B200 (192/180) and a shipping 48 GB card (RTX 6000 Ada).
    "b200-192gb": 194_818 * MIB,
    "rtx6090": 51_002_867_712,
}

DATASHEET_GB = {
    "h100": 80, "h100-pcie": 80, "h800": 80, "a100-80gb": 80, "a100-40gb": 40, "h200": 141, "b200": 180, "b200-192gb": 192,
    "gb200": 186, "l40s": 48, "mi300x": 192, "rtx4090": 24, "rtx5090": 32, "rtx6090": 48,
}


def test_every_catalog_gpu_is_covered():
    """issue 11 item 17: all 14 catalog GPUs (13, and the H800 of issue 17) state a runtime capacity."""
    assert {gpu.name for gpu in all_gpus()} == set(RUNTIME_BYTES) == set(DATASHEET_GB)


@pytest.mark.parametrize("name", sorted(RUNTIME_BYTES))
def test_capacity_is_the_runtime_figure_and_the_datasheet_is_kept_apart(name):
    """issue 11 item 17: capacity_bytes = runtime-reported bytes, with its source."""
    gpu = load_gpu(name)
    assert gpu.memory_bytes == RUNTIME_BYTES[name]
    assert gpu.datasheet_memory_bytes == DATASHEET_GB[name] * 10**9
    source = gpu.sources["memory_bytes"]
    assert "runtime" in source or source.startswith("assumption:"), source
    assert gpu.sources["datasheet_memory_bytes"]


def test_h100_capacity_differs_from_the_datasheet_read_as_gb():
    """issue 11 item 17: the H100 plans with 79.2 GiB, not 74.5 GiB (80e9 bytes)."""
    h100 = load_gpu("h100")
    assert h100.memory_bytes / GIB == pytest.approx(79.205, abs=0.001)
    assert h100.memory_bytes > 80e9


def test_training_headroom_rule_applies_to_the_runtime_capacity():
    """issue 11 item 17: a training estimate's capacity_bytes is the runtime figure, and
    fits_gpu compares the need with 90% of it."""
    workload = TrainingWorkload(model="llama-3.1-8b", seq_len=4096, global_batch=8, headroom_fraction=0.10)
    estimate = estimate_training(workload, TrainingPlan(gpu="h100", gpus=8, zero_stage=3))
    values = estimate.values
    assert values["capacity_bytes"] == RUNTIME_BYTES["h100"]
    assert values["headroom_fraction"] == pytest.approx(1 - values["total_bytes"] / RUNTIME_BYTES["h100"], rel=1e-12)
    assert bool(values["fits_gpu"]) == (values["total_bytes"] <= 0.9 * RUNTIME_BYTES["h100"])


def test_serving_headroom_rule_applies_to_the_runtime_capacity():
    """issue 11 item 17: serving uses the same capacity for whole GPUs."""
    workload = ServingWorkload(model="llama-3.1-8b", context=8192, headroom_fraction=0.10)
    estimate = estimate_serving(workload, ServingPlan(gpu="l40s", gpus=1))
    values = estimate.values
    assert values["capacity_bytes"] == RUNTIME_BYTES["l40s"]  # below the datasheet's 48e9
    assert bool(values["fits"]) == (values["total_bytes"] <= 0.9 * RUNTIME_BYTES["l40s"])
