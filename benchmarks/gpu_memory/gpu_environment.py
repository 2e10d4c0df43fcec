"""The machine a measurement ran on: GPU, driver, versions, and the CUDA context's memory."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from typing import Any

import torch
import torch.nn.functional as F


def _nvidia_smi(fields: str) -> list[str] | None:
    """One GPU's values from nvidia-smi (the first visible one), or None without nvidia-smi."""
    try:
        result = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line for line in result.stdout.strip().splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    index = int(visible) if visible.isdigit() and int(visible) < len(lines) else 0
    return [value.strip() for value in lines[index].split(",")] if lines else None


def measure_cuda_context(device: torch.device) -> dict[str, Any]:
    """Device memory that CUDA and PyTorch use outside the caching allocator.

    nvidia-smi's memory.used is read before PyTorch touches CUDA; then CUDA is initialized,
    a small matmul, an SDPA forward/backward and a cross-entropy load the kernels (lazy
    module loading grows the context at first use), and
    ``cuda_context_bytes = (total - free) - memory_reserved - used_before``.
    Without nvidia-smi, used_before is taken as 0 (the GPU is assumed otherwise idle).
    """
    before = _nvidia_smi("memory.used")
    used_before = int(float(before[0]) * 2**20) if before else 0  # nvidia-smi reports MiB
    torch.cuda.set_device(device)
    matrix = torch.randn(1024, 1024, device=device, requires_grad=True)
    (matrix @ matrix).sum().backward()
    for dtype in (torch.bfloat16, torch.float32):
        query = torch.randn(1, 8, 128, 64, device=device, dtype=dtype, requires_grad=True)
        F.scaled_dot_product_attention(query, query, query, is_causal=True).sum().backward()
        F.cross_entropy(query.float().view(-1, 64), torch.zeros(1024, dtype=torch.long, device=device)).backward()
    torch.cuda.synchronize(device)
    del matrix, query
    free, total = torch.cuda.mem_get_info(device)
    reserved = torch.cuda.memory_reserved(device)
    return {
        "cuda_context_bytes": total - free - reserved - used_before,
        "nvidia_smi_used_before_init_bytes": used_before if before else None,
        "device_total_memory_bytes": total,
    }


def describe_environment(device: torch.device, dry_run: bool) -> dict[str, Any]:
    environment: dict[str, Any] = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda or "",
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "dry_run": dry_run,
        "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    if device.type != "cuda":
        environment.update(gpu_name="cpu (dry run)", driver_version="", cuda_context_bytes=None)
        return environment
    smi = _nvidia_smi("driver_version")
    try:
        environment.update(measure_cuda_context(device))
    except Exception as error:  # noqa: BLE001 - an unknown context size must not stop the grid
        environment.update(cuda_context_bytes=None, cuda_context_error=f"{type(error).__name__}: {error}"[:300])
    environment.update(
        gpu_name=torch.cuda.get_device_name(device),
        driver_version=smi[0] if smi else "",
        cudnn_version=torch.backends.cudnn.version(),
        compute_capability=".".join(map(str, torch.cuda.get_device_capability(device))),
    )
    return environment
