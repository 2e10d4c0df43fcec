"""FLOPs and compute time of training.

Model FLOPs per token (PaLM, Chowdhery et al. 2022, appendix B): ``6*N + 12*L*H*s`` with N
the non-embedding active parameters and H = heads*head_dim; vramopt adds the output
head's ``6*V*h`` (a real GEMM). Hardware FLOPs add what recomputation repeats: one more
forward of the layers under full recomputation (``2*N + 4*L*H*s``, which reproduces
Narayanan et al. 2021 eq. 3, ``96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h))``, exactly for a GPT
layer), the attention core (``4*L*H*s``) under selective recomputation.
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.coefficients import coefficient
from vramopt.costs.columns import CHECKPOINT_EVERY, CHECKPOINT_SELECTIVE, PlanColumns
from vramopt.parallel_layout import ParallelLayout
from vramopt.types import PRECISIONS, GpuSpec, ModelSpec

ATTENTION_SLOWDOWN_WITHOUT_FLASH = 2.0
"""Dao et al. 2022 (FlashAttention) section 4: the attention core runs 2-4x faster than
PyTorch's standard attention; vramopt charges the non-flash attention core 2x (the low end)."""


def non_embedding_active_parameters(model: ModelSpec) -> float:
    return float(model.parameters.active - model.parameters.embedding)


def attention_width(model: ModelSpec) -> int:
    return model.heads * model.head_dim


def linear_flops_per_parameter(trainable_fraction: float = 1.0) -> float:
    """2 forward + 2 activation-gradient + 2 weight-gradient FLOPs per parameter and token;
    frozen parameters (LoRA/QLoRA base) skip the weight gradient (Hu et al. 2021)."""
    return 4.0 + 2.0 * trainable_fraction


def model_flops_per_token(model: ModelSpec, seq_len: int, trainable_fraction: float = 1.0) -> float:
    """FLOPs of forward + backward per token, without recomputation (the MFU numerator)."""
    per_parameter = linear_flops_per_parameter(trainable_fraction)
    linear = per_parameter * (non_embedding_active_parameters(model) + model.vocab_size * model.hidden_size)
    attention = 12.0 * model.layers * attention_width(model) * seq_len
    return linear + attention


def recompute_flops_per_token(
    model: ModelSpec, seq_len: int, checkpoint_kind: np.ndarray, flash_attention=0
) -> tuple[np.ndarray, np.ndarray]:
    """Extra (linear, attention-core) FLOPs per token that recomputation repeats.

    Selective recomputation re-runs the attention core only when its score activations
    would otherwise be stored; under flash attention nothing of it is stored, so selective
    recomputes nothing (Megatron's selective recompute is the core attention, which flash
    attention already recomputes inside its own backward).
    """
    attention_forward = 4.0 * model.layers * attention_width(model) * seq_len
    checkpoint_kind = np.asarray(checkpoint_kind)
    linear = np.where(checkpoint_kind == CHECKPOINT_EVERY, 2.0 * non_embedding_active_parameters(model), 0.0)
    selective = (checkpoint_kind == CHECKPOINT_SELECTIVE) & (np.asarray(flash_attention) == 0)
    attention = np.where((checkpoint_kind == CHECKPOINT_EVERY) | selective, attention_forward, 0.0)
    return linear, attention


def hardware_flops_per_token(
    model: ModelSpec, seq_len: int, checkpoint_kind, flash_attention=0, trainable_fraction: float = 1.0
) -> np.ndarray:
    """Model FLOPs plus recomputation: what Narayanan et al. 2021 count as achieved FLOPs."""
    linear, attention = recompute_flops_per_token(model, seq_len, np.asarray(checkpoint_kind), flash_attention)
    return model_flops_per_token(model, seq_len, trainable_fraction) + linear + attention


def narayanan_flops_per_iteration(batch: int, seq_len: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021 eq. 3 (with activation recomputation), for the golden test."""
    return 96.0 * batch * seq_len * layers * hidden**2 * (1 + seq_len / (6 * hidden) + vocab / (16 * layers * hidden))


def effective_flops_per_s(gpu: GpuSpec, precision: np.ndarray) -> np.ndarray:
    """Peak dense FLOP/s of each precision times its calibrated utilization (0 if unsupported)."""
    base = coefficient("base_utilization")
    ratios = {
        "fp32": coefficient("fp32_utilization_ratio"),
        "bf16": 1.0,
        "fp16": 1.0,
        "fp8": coefficient("fp8_utilization_ratio"),
        "fp4": coefficient("fp4_utilization_ratio"),
    }
    table = np.array([gpu.peak_flops_per_s.get(name, 0.0) * base * ratios[name] for name in PRECISIONS])
    return table[precision]


def peak_flops_per_s(gpu: GpuSpec, precision: np.ndarray) -> np.ndarray:
    return np.array([gpu.peak_flops_per_s.get(name, 0.0) for name in PRECISIONS])[precision]


def micro_batch_compute_seconds(
    model: ModelSpec,
    gpu: GpuSpec,
    columns: PlanColumns,
    seq_len: int,
    trainable_fraction: float = 1.0,
    compute_overhead_fraction: float = 0.0,
) -> np.ndarray:
    """Forward + backward (+ recomputation) of one micro-batch on one GPU of one stage."""
    # Per GPU of a tp x pp replica; costs/training.py divides by cp (each cp rank runs s/cp tokens).
    tokens_per_gpu = seq_len * columns.micro_batch / ParallelLayout.from_columns(columns).model_parallel
    recompute_linear, recompute_attention = recompute_flops_per_token(
        model, seq_len, columns.checkpoint_kind, columns.flash_attention
    )
    per_parameter = linear_flops_per_parameter(trainable_fraction)
    linear = per_parameter * (non_embedding_active_parameters(model) + model.vocab_size * model.hidden_size) + recompute_linear
    linear = linear * (1.0 + compute_overhead_fraction)
    attention = 12.0 * model.layers * attention_width(model) * seq_len + recompute_attention
    attention = attention * np.where(columns.flash_attention == 1, 1.0, ATTENTION_SLOWDOWN_WITHOUT_FLASH)
    rate = effective_flops_per_s(gpu, columns.precision)
    with np.errstate(divide="ignore"):
        return np.where(rate > 0, tokens_per_gpu * (linear + attention) / np.where(rate > 0, rate, 1.0), np.inf)
