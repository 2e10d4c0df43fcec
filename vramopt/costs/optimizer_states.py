"""Optimizer-state formats: bytes per trainable parameter and HBM bytes of one optimizer step.

Every format keeps an fp32 master copy of the trainable weights under mixed precision
(Micikevicius et al. 2018; in pure fp32 the weights themselves are the master copy) beside
the model-dtype gradients, which ``memory.model_state_bytes`` counts apart. The states:

- ``adam``: Adam/AdamW, fp32 momentum and variance: 4 + 4 bytes, so K = 12 with the master
  copy (Rajbhandari et al. 2020, ZeRO, section 3.1).
- ``adam8bit``: bitsandbytes block-wise 8-bit Adam: momentum and variance 1 byte each plus
  one fp32 absmax scale per block of 2,048 values for each of the two states (Dettmers et
  al. 2022, "8-bit Optimizers via Block-wise Quantization", section 2.1: block size 2048;
  bitsandbytes ``optim.Adam8bit``, ``block_wise=True``); fp32 master kept.
  bitsandbytes keeps tensors under 4,096 elements (``min_8bit_size``) in 32-bit: norms and
  biases, under 0.1% of a transformer's parameters, ignored (assumption: negligible).
- ``adafactor``: factored second moment (one fp32 row vector and one column vector per
  weight matrix) and no first moment (Shazeer & Stern 2018, "Adafactor", section 3 and
  Algorithm 4 with beta1 = 0, the paper's and HF ``transformers.Adafactor``'s default).
  A ``r x c`` matrix keeps ``4 (r + c)`` bytes: ``4 (1/c + 1/r)`` per parameter, at most
  ``8 / hidden_size`` for matrices whose both sides are at least the hidden size (every
  attention and MLP matrix of a dense transformer); counted at that bound. Vectors keep an
  unfactored 4-byte moment (norms: under 0.1% of the parameters, ignored).
- ``sgd``: SGD with momentum: one fp32 momentum buffer, 4 bytes (PyTorch ``optim.SGD``
  ``momentum > 0``).

Optimizer step. The update streams each parameter's state through HBM once: it reads the
gradient, the master weight and the states and writes the master weight, the states and
(under mixed precision) the model-dtype weight copy (``step_bytes_per_parameter``). The
training cost model times the whole step from these bytes (``costs/optimizer_step.py``);
``optimizer_step_seconds`` below, the difference from Adam's, is kept for callers that
compare formats.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vramopt.costs.coefficients import coefficient
from vramopt.costs.columns import OFFLOAD_NONE
from vramopt.types import PRECISIONS

MASTER_BYTES = 4.0
"""fp32 master copy per trainable parameter under mixed precision (Micikevicius et al. 2018)."""

EIGHT_BIT_BLOCK_SIZE = 2048
"""bitsandbytes block-wise quantization block (Dettmers et al. 2022 section 2.1)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizerFormat:
    name: str
    label: str
    """How the display and the why line name it."""
    fixed_state_bytes: float
    """State bytes per trainable parameter that do not depend on the model's shape."""
    factored_state_scale: float = 0.0
    """Times ``1 / hidden_size``: the factored states' bytes per parameter (Adafactor: 8)."""
    source: str
    caveat: str
    """What changes in the trained result."""


FORMATS = (
    OptimizerFormat(
        name="adam", label="Adam/AdamW (fp32 states)", fixed_state_bytes=8.0,
        source="Kingma & Ba 2015; ZeRO (Rajbhandari et al. 2020) section 3.1: K = 12 with the fp32 master copy",
        caveat="the reference: vramopt's default and the optimizer its efficiency fits were measured with",
    ),
    OptimizerFormat(
        name="adam8bit", label="8-bit Adam (bitsandbytes, block-wise)", fixed_state_bytes=2.0 + 2.0 * 4.0 / EIGHT_BIT_BLOCK_SIZE,
        source="Dettmers et al. 2022, 8-bit Optimizers via Block-wise Quantization, section 2.1 (block size 2048); "
               "bitsandbytes optim.Adam8bit",
        caveat="matches 32-bit Adam on the paper's benchmarks (section 4, Table 1) with the stable embedding layer; "
               "quantization error on outlier-heavy states is possible",
    ),
    OptimizerFormat(
        name="adafactor", label="Adafactor (factored second moment, no momentum)", fixed_state_bytes=0.0,
        factored_state_scale=8.0,
        source="Shazeer & Stern 2018, Adafactor, section 3 and Algorithm 4 (beta1 = 0); HF transformers.Adafactor",
        caveat="no first moment and relative step sizes: different learning-rate schedules, less stable at large "
               "scale without update clipping (paper section 6)",
    ),
    OptimizerFormat(
        name="sgd", label="SGD with momentum", fixed_state_bytes=4.0,
        source="PyTorch torch.optim.SGD (momentum > 0): one momentum buffer per parameter",
        caveat="transformer training with SGD usually converges slower and worse than with Adam",
    ),
)
OPTIMIZER_NAMES = tuple(entry.name for entry in FORMATS)
BY_NAME = {entry.name: entry for entry in FORMATS}
ADAM = OPTIMIZER_NAMES.index("adam")
ADAFACTOR = OPTIMIZER_NAMES.index("adafactor")
FP32 = PRECISIONS.index("fp32")


def state_bytes_table(hidden_size: int) -> np.ndarray:
    """States (without the master copy) per trainable parameter, indexed by optimizer code."""
    return np.array([entry.fixed_state_bytes + entry.factored_state_scale / hidden_size for entry in FORMATS])


def optimizer_bytes_per_parameter(hidden_size: int, optimizer, mixed_precision) -> np.ndarray:
    """Master copy (mixed precision only) plus states, per trainable parameter (the K of ZeRO)."""
    master = np.where(np.asarray(mixed_precision, dtype=bool), MASTER_BYTES, 0.0)
    return master + state_bytes_table(hidden_size)[np.asarray(optimizer)]


def step_bytes_per_parameter(hidden_size: int, optimizer, gradient_bytes, weight_bytes, mixed_precision) -> np.ndarray:
    """HBM bytes one optimizer step reads and writes per trainable parameter: gradient read,
    master weight read and written, states read and written, model-dtype copy written
    (mixed precision only; in fp32 the master copy is the weight)."""
    states = state_bytes_table(hidden_size)[np.asarray(optimizer)]
    mixed = np.asarray(mixed_precision, dtype=bool)
    return gradient_bytes + 2.0 * MASTER_BYTES + 2.0 * states + np.where(mixed, weight_bytes, 0.0)


def step_seconds_beyond_adam(
    hidden_size: int, optimizer, trainable_shard_params, gradient_bytes, weight_bytes, mixed_precision,
    hbm_bandwidth_bytes_per_s: float,
) -> np.ndarray:
    """Optimizer-step time of the format minus Adam's (which the fitted efficiency holds)."""
    own = step_bytes_per_parameter(hidden_size, optimizer, gradient_bytes, weight_bytes, mixed_precision)
    adam = step_bytes_per_parameter(hidden_size, ADAM, gradient_bytes, weight_bytes, mixed_precision)
    return (own - adam) * trainable_shard_params / hbm_bandwidth_bytes_per_s


# -- the terms the cost model asks for, over PlanColumns ---------------------------------


def optimizer_column(columns) -> np.ndarray:
    """The optimizer codes of ``columns`` (Adam where the columns carry none)."""
    return getattr(columns, "optimizer", ADAM)


def uses_adam(columns) -> np.ndarray:
    """Rows whose optimizer is fp32 Adam/AdamW, the format the frameworks' own byte counts
    describe (``frameworks/memory.py`` keeps the generic bytes for the others)."""
    return optimizer_column(columns) == ADAM


def optimizer_invalid_reasons(trainable_fraction: float, columns) -> dict[str, np.ndarray]:
    """Validity rules: offload needs Adam (DeepSpeed ZeRO-Offload / ZeRO-Infinity run the
    host step with DeepSpeedCPUAdam, and ``cpu_adam_params_per_s_per_node`` is Adam's rate);
    Adafactor is not modelled on LoRA adapters (``r x h`` matrices, far narrower than the
    hidden size its factored estimate assumes)."""
    optimizer = np.asarray(optimizer_column(columns))
    return {
        "offload cpu or nvme needs optimizer adam (DeepSpeed's offloaded step runs DeepSpeedCPUAdam on the host)": (
            (optimizer != ADAM) & (np.asarray(columns.offload) != OFFLOAD_NONE)
        ),
        "optimizer adafactor is not modelled for LoRA/QLoRA adapters (its factored estimate assumes matrices "
        "at least the hidden size wide)": (optimizer == ADAFACTOR) & (trainable_fraction < 1.0),
    }


def state_bytes_per_parameter(model, columns) -> np.ndarray:
    """Memory term: master copy + states per trainable parameter (ZeRO's K: Adam 12, fp32 8)."""
    return optimizer_bytes_per_parameter(model.hidden_size, optimizer_column(columns), columns.precision != FP32)


def optimizer_step_seconds(model, gpu, columns, trainable_shard_params, gradient_bytes, weight_bytes) -> np.ndarray:
    """Time term: the optimizer step's HBM time beyond Adam's, on the GPU's shard; 0 under
    offload (the host runs the step, and offload needs Adam)."""
    optimizer = np.asarray(optimizer_column(columns))
    if not np.any(optimizer != ADAM):  # the common case: Adam everywhere adds exactly 0
        return np.zeros(np.shape(trainable_shard_params))
    on_gpu = np.asarray(columns.offload) == OFFLOAD_NONE
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * coefficient("hbm_bandwidth_efficiency")
    seconds = step_seconds_beyond_adam(
        model.hidden_size, optimizer_column(columns), trainable_shard_params, gradient_bytes, weight_bytes,
        columns.precision != FP32, bandwidth,
    )
    return np.where(on_gpu, seconds, 0.0)
