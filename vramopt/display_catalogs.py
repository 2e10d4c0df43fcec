"""The table and JSON views of the GPU and model catalogs (``vramopt gpus``, ``vramopt models``)."""

from __future__ import annotations

from typing import Any, Sequence

from vramopt.display_formats import table, to_plain, yes_no
from vramopt.units import BYTES_PER_GB, BYTES_PER_GIB, FLOPS_PER_TFLOPS


# ---------------------------------------------------------------------------------------
# Catalogs


def render_gpus(gpus: Sequence[Any]) -> str:
    rows = []
    for gpu in gpus:
        peak = gpu.peak_flops_per_s
        rows.append(
            [
                gpu.name,
                f"{gpu.datasheet_memory_bytes / BYTES_PER_GB:g}",
                f"{gpu.memory_bytes / BYTES_PER_GIB:.2f}",
                f"{gpu.hbm_bandwidth_bytes_per_s / 1e12:.2f}",
                f"{peak['bf16'] / FLOPS_PER_TFLOPS:,.0f}" if "bf16" in peak else "-",
                f"{peak['fp8'] / FLOPS_PER_TFLOPS:,.0f}" if "fp8" in peak else "-",
                _gpu_link_text(gpu),
                gpu.node.gpus_per_node,
                yes_no(bool(gpu.mig_profiles)),
            ]
        )
    headers = ["gpu", "datasheet GB", "usable GiB", "HBM TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "NVLink GB/s", "GPUs/node", "MIG"]
    note = ("Dense (no sparsity) peaks; usable = the memory the CUDA/HIP runtime reports, the capacity plans fill; "
            "NVLink per GPU, one direction (a mesh: links x GB/s each); GB = 1e9 bytes, GiB = 2^30. "
            "Sources: vramopt gpus --format json")
    return table(rows, headers) + "\n" + note


def _gpu_link_text(gpu: Any) -> str:
    if gpu.intra_node_topology == "full_mesh":
        links = gpu.node.gpus_per_node - 1
        return f"{gpu.nvlink_bandwidth_bytes_per_s / BYTES_PER_GB:g} ({links}x{gpu.mesh_link_bandwidth_bytes_per_s / BYTES_PER_GB:g} mesh)"
    return f"{gpu.nvlink_bandwidth_bytes_per_s / BYTES_PER_GB:g}" if gpu.nvlink_bandwidth_bytes_per_s > 0 else "-"


def gpus_json(gpus: Sequence[Any]) -> list[dict[str, Any]]:
    return [to_plain(gpu) for gpu in gpus]


def render_models(models: Sequence[Any]) -> str:
    rows = []
    for model in models:
        rows.append(
            [
                model.name,
                ", ".join(model.aliases) or "-",
                model.layers,
                model.hidden_size,
                f"{model.heads}/{model.kv_heads}",
                f"{model.params_total / 1e9:,.1f}",
                f"{model.params_active / 1e9:,.1f}",
                yes_no(model.is_moe),
            ]
        )
    headers = ["model", "aliases", "layers", "hidden", "heads/kv", "params B", "active B", "MoE"]
    note = "Parameters counted from the architecture (B = 1e9). Sources: vramopt models --format json"
    return table(rows, headers, align="llrrrrrl") + "\n" + note


def models_json(models: Sequence[Any]) -> list[dict[str, Any]]:
    return [{**to_plain(model), "params_total": model.params_total, "params_active": model.params_active} for model in models]
