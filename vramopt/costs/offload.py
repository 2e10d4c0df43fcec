"""Time of offloaded model states per step.

CPU offload (ZeRO-Offload, Ren et al. 2021): each GPU sends its gradient shard to the host
and receives the updated parameters over PCIe; the host runs Adam (memory-bandwidth bound,
see coefficient ``cpu_adam_params_per_s_per_node``). NVMe offload (ZeRO-Infinity,
Rajbhandari et al. 2021): parameters are read from NVMe for the forward and backward of
every micro-batch, gradients and updated parameters written, Adam states read and written
once per step, all through the node's aggregate NVMe bandwidth (shared by its GPUs), and
the host runs Adam too. The transfers are not overlapped with compute (DeepSpeed's
defaults; a conservative assumption).
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.coefficients import coefficient
from vramopt.costs.columns import OFFLOAD_CPU, OFFLOAD_NVME, PlanColumns, sharding_group
from vramopt.costs.precision import PRECISION_ADAM_BYTES, PRECISION_BYTES
from vramopt.types import GpuSpec


def offload_seconds_per_step(
    parameters_per_gpu: np.ndarray,
    gpu: GpuSpec,
    columns: PlanColumns,
    micro_batches: np.ndarray,
    trainable_fraction: float = 1.0,
    frozen_bytes_per_param: float | None = None,
) -> np.ndarray:
    from vramopt.costs.memory import weight_bytes_per_parameter

    shard = parameters_per_gpu / sharding_group(columns)
    trainable = shard * trainable_fraction
    gpus_per_node = np.minimum(columns.gpus, gpu.node.gpus_per_node)
    bytes_per_weight = PRECISION_BYTES[columns.precision]
    stored_bytes = weight_bytes_per_parameter(columns, trainable_fraction, frozen_bytes_per_param)
    adam_bytes = PRECISION_ADAM_BYTES[columns.precision]
    pcie = gpu.pcie_bandwidth_bytes_per_s * coefficient("pcie_efficiency")
    adam_seconds = trainable * gpus_per_node / coefficient("cpu_adam_params_per_s_per_node")

    cpu_transfer = trainable * 2.0 * bytes_per_weight / pcie
    nvme_bytes_per_gpu = (
        2.0 * micro_batches * shard * stored_bytes  # parameter reads, forward + backward
        + trainable * 2.0 * bytes_per_weight  # gradients and updated parameters written
        + trainable * 2.0 * adam_bytes  # Adam states read and written
    )
    nvme_transfer = nvme_bytes_per_gpu * gpus_per_node / gpu.node.nvme_bandwidth_bytes_per_s
    return np.where(
        columns.offload == OFFLOAD_CPU,
        cpu_transfer + adam_seconds,
        np.where(columns.offload == OFFLOAD_NVME, nvme_transfer + adam_seconds, 0.0),
    )


OFFLOAD_RULES = (
    (OFFLOAD_CPU, 1, "offload=cpu needs zero_stage >= 1 (DeepSpeed ZeRO-Offload)"),
    (OFFLOAD_NVME, 3, "offload=nvme needs zero_stage 3 (ZeRO-Infinity)"),
)
"""The offload/ZeRO compatibility rules, written once: (offload code, lowest ZeRO stage,
message). DeepSpeed offloads optimizer states only under ZeRO (ZeRO-Offload, Ren et al.
2021) and parameters only under ZeRO-3 (ZeRO-Infinity, Rajbhandari et al. 2021). The cost
model's validity masks, the DeepSpeed exporter's input check and the infeasibility
explanation read them from here."""


def offload_invalid_reasons(offload, zero_stage) -> dict[str, np.ndarray]:
    """Masks (or booleans, for one plan) of offload choices the ZeRO stage does not allow."""
    return {message: (np.asarray(offload) == code) & (np.asarray(zero_stage) < lowest) for code, lowest, message in OFFLOAD_RULES}
