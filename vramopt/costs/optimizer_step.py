"""The optimizer step and the gradient-norm pass, timed at HBM bandwidth on each GPU's shard.

The update streams every trainable parameter's state through HBM once
(``optimizer_states.step_bytes_per_parameter``: gradient read, master weight and states read
and written, model-dtype copy written); gradient clipping first reads every gradient once to
take the global norm (``torch.nn.utils.clip_grad_norm_``; Megatron ``clip_grad_norm_fp32``).
Both are memory-bound elementwise passes, so their time is bytes over the HBM bandwidth
(coefficient ``hbm_bandwidth_efficiency``). Under ZeRO each GPU updates its
``1 / optimizer_zero_shards`` share; under offload the host runs the step
(``costs/offload.py`` times it) and the GPU does none of it.

Megatron-LM with bf16 accumulates and reduces gradients in an fp32 ``main_grad`` buffer
(``megatron/arguments.py``: "bfloat16 requires gradient accumulation and all-reduce to be done in
fp32"; ``TrainingCase.fp32_gradient_buffer``). Its step then reads 4-byte gradients (the update and
the norm, ``clip_grad_norm_fp32``), zeroes the buffer each iteration (``zero_grad_buffer``, 4 bytes
written) and copies the fp32 master weights to the bf16 model weights in a pass of its own
(``_copy_main_params_to_model_params``: 4 read, 2 written, of which the write is already counted):
12 bytes per parameter more than the generic count (Megatron-LM ``megatron/optimizer/optimizer.py``
at 7fccd6a, May 2022).
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.coefficients import coefficient
from vramopt.costs.columns import OFFLOAD_NONE
from vramopt.costs.optimizer_states import FP32, optimizer_column, step_bytes_per_parameter


UNFUSED_ACCUMULATION_BYTES_PER_ELEMENT = 3.0
"""An in-place ``grad += new_grad`` reads both operands and writes the sum: 3 elements of the
gradient's dtype per parameter (PyTorch autograd ``AccumulateGrad`` from the second micro-batch on;
Megatron-LM 2021's fp16 path), which fused weight-gradient accumulation (Megatron-LM since
February 2022, ``--gradient-accumulation-fusion``: the weight-gradient GEMM adds into
``main_grad``) does not pay."""


def unfused_accumulation_seconds(gpu, trainable_params_per_gpu, gradient_bytes, micro_batches) -> np.ndarray:
    """Seconds of the separate gradient-accumulation passes of one step: one per micro-batch after
    the first, each on the critical path of its stage's backward."""
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * coefficient("hbm_bandwidth_efficiency")
    per_pass = UNFUSED_ACCUMULATION_BYTES_PER_ELEMENT * gradient_bytes * trainable_params_per_gpu / bandwidth
    return np.maximum(np.asarray(micro_batches, dtype=float) - 1.0, 0.0) * per_pass


LOCAL_DDP_SCALE_BYTES_PER_ELEMENT = 2.0
"""Megatron-LM's local DDP (``megatron/model/distributed.py`` ``allreduce_gradients``, 2020-2022,
the code of Narayanan et al. 2021 and Korthikanti et al. 2022) divides the whole contiguous
gradient buffer by the data-parallel size in place (``buffer_.data /= world_size``) before its
all-reduce, on every iteration and whatever the size (``train_step`` calls it unconditionally,
also at dp = 1): one read and one write of each gradient element."""


def local_ddp_scale_seconds(gpu, trainable_params_per_gpu, gradient_bytes) -> np.ndarray:
    """Seconds of that in-place division pass over one GPU's gradient buffer."""
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * coefficient("hbm_bandwidth_efficiency")
    return LOCAL_DDP_SCALE_BYTES_PER_ELEMENT * np.asarray(gradient_bytes, dtype=float) * trainable_params_per_gpu / bandwidth


FP32_GRADIENT_BYTES = 4.0
ZERO_GRADIENT_BUFFER_BYTES = 4.0
"""The fp32 ``main_grad`` buffer zeroed once per iteration."""
MASTER_COPY_READ_BYTES = 4.0
"""The fp32 master weight read again by the separate master-to-model copy."""


def optimizer_step_seconds(model, gpu, columns, trainable_shard_params, gradient_bytes, weight_bytes,
                           fp32_gradient_buffer: bool = False) -> np.ndarray:
    """Seconds of one optimizer step plus the gradient-norm read on one GPU's shard."""
    extra = 0.0
    if fp32_gradient_buffer:
        gradient_bytes = np.maximum(gradient_bytes, FP32_GRADIENT_BYTES)
        extra = ZERO_GRADIENT_BUFFER_BYTES + MASTER_COPY_READ_BYTES
    step = step_bytes_per_parameter(
        model.hidden_size, optimizer_column(columns), gradient_bytes, weight_bytes, columns.precision != FP32
    ) + extra
    norm = gradient_bytes
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * coefficient("hbm_bandwidth_efficiency")
    seconds = (step + norm) * trainable_shard_params / bandwidth
    return np.where(np.asarray(columns.offload) == OFFLOAD_NONE, seconds, 0.0)
