"""The optimizer step and the gradient-norm pass, timed at HBM bandwidth on each GPU's shard.

The update streams every trainable parameter's state through HBM once
(``optimizer_states.step_bytes_per_parameter``: gradient read, master weight and states read
and written, model-dtype copy written); gradient clipping first reads every gradient once to
take the global norm (``torch.nn.utils.clip_grad_norm_``; Megatron ``clip_grad_norm_fp32``).
Both are memory-bound elementwise passes, so their time is bytes over the HBM bandwidth
(coefficient ``hbm_bandwidth_efficiency``). Under ZeRO each GPU updates its
``1 / optimizer_zero_shards`` share; under offload the host runs the step
(``costs/offload.py`` times it) and the GPU does none of it.
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.coefficients import coefficient
from vramopt.costs.columns import OFFLOAD_NONE
from vramopt.costs.optimizer_states import FP32, optimizer_column, step_bytes_per_parameter


def optimizer_step_seconds(model, gpu, columns, trainable_shard_params, gradient_bytes, weight_bytes) -> np.ndarray:
    """Seconds of one optimizer step plus the gradient-norm read on one GPU's shard."""
    step = step_bytes_per_parameter(
        model.hidden_size, optimizer_column(columns), gradient_bytes, weight_bytes, columns.precision != FP32
    )
    norm = gradient_bytes
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * coefficient("hbm_bandwidth_efficiency")
    seconds = (step + norm) * trainable_shard_params / bandwidth
    return np.where(np.asarray(columns.offload) == OFFLOAD_NONE, seconds, 0.0)
