"""FLOPs and compute time of training.

Model FLOPs per token (PaLM, Chowdhery et al. 2022, appendix B): ``6*N + 12*L*H*s`` with N
the non-embedding active parameters and H = heads*head_dim; vramopt adds the output
head's ``6*V*h`` (a real GEMM). Hardware FLOPs add what recomputation repeats: one more
forward of the layers under full recomputation (``2*N + 4*L*H*s``, which reproduces
Narayanan et al. 2021 eq. 3, ``96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h))``, exactly for a GPT
layer), the attention core (``4*L*H*s``) under selective recomputation.

Time is not FLOPs over one utilization: ``costs/operators.py`` times every GEMM from its
shape (``costs/gemm.py``), the attention core per implementation, and the memory-bound
kernels from their bytes.
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.columns import CHECKPOINT_EVERY, CHECKPOINT_SELECTIVE, PlanColumns
from vramopt.costs.operators import micro_batch_operator_seconds
from vramopt.costs.pipeline_stages import uneven
from vramopt.parallel_layout import LAYOUT_COLUMNS
from vramopt.types import PRECISIONS, GpuSpec, ModelSpec

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


def peak_flops_per_s(gpu: GpuSpec, precision: np.ndarray) -> np.ndarray:
    return np.array([gpu.peak_flops_per_s.get(name, 0.0) for name in PRECISIONS])[precision]


OPERATOR_COLUMNS = LAYOUT_COLUMNS + (
    "micro_batch", "precision", "flash_attention", "sequence_parallel", "checkpoint_kind",
    "first_stage_layers", "last_stage_layers",
)
"""The plan columns ``costs/operators.py`` reads."""


def micro_batch_operator_times(
    model: ModelSpec,
    gpu: GpuSpec,
    columns: PlanColumns,
    seq_len: int,
    trainable_fraction: float = 1.0,
    compute_overhead_fraction: float = 0.0,
) -> dict[str, np.ndarray]:
    """Forward + backward (+ recomputation) of one micro-batch on one GPU of one stage and one
    context-parallel rank, by operator class (``costs/operators.py``)."""
    linear_parameters = non_embedding_active_parameters(model) + model.vocab_size * model.hidden_size
    # The solver's tables hold many rows per distinct operator shape: time each distinct
    # combination of the columns the operators read once and spread the result back.
    size = len(columns)
    key = np.zeros(size, dtype=np.int64)
    values_by_column = {}
    for name in OPERATOR_COLUMNS:
        column = np.broadcast_to(np.asarray(getattr(columns, name)), (size,))
        low, high = (int(column.min()), int(column.max())) if size and column.dtype.kind in "iub" else (0, -1)
        if 0 <= high - low < 4096:
            # Small integer codes (every operator column): offsets from the minimum are the
            # digits, without np.unique's sort of the whole column.
            values, codes = np.arange(low, high + 1), column - low
        else:
            values, codes = np.unique(column, return_inverse=True)
        values_by_column[name] = values
        key = key * len(values) + codes.reshape(-1)  # mixed radix over the distinct values
    combinations = int(np.prod([len(values) for values in values_by_column.values()], dtype=float))
    if combinations >= 2**62:  # too many distinct values to pack: time every row
        return slowest_stage_operator_seconds(
            model, gpu, columns, seq_len, trainable_fraction, compute_overhead_fraction, linear_parameters
        )
    unique_keys, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    defaults = {name: np.zeros(1, dtype=np.int64) for name in columns.column_names() if name not in OPERATOR_COLUMNS}
    reduced = PlanColumns(**defaults, **{
        name: np.broadcast_to(np.asarray(getattr(columns, name)), (size,))[first] for name in OPERATOR_COLUMNS
    })
    times = slowest_stage_operator_seconds(
        model, gpu, reduced, seq_len, trainable_fraction, compute_overhead_fraction, linear_parameters
    )
    inverse = np.asarray(inverse).reshape(-1)
    return {name: np.broadcast_to(np.asarray(value, dtype=float), (len(unique_keys),))[inverse] for name, value in times.items()}


def slowest_stage_operator_seconds(
    model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, seq_len: int, trainable_fraction: float,
    compute_overhead_fraction: float, linear_parameters: float,
) -> dict[str, np.ndarray]:
    """The operator times of the slowest pipeline stage: the last (its layers, the head and
    the loss) unless, with uneven stages, the heaviest other stage's layers take longer
    (costs/pipeline_stages.py); every part comes from the same stage."""
    last = micro_batch_operator_seconds(model, gpu, columns, seq_len, trainable_fraction, compute_overhead_fraction,
                                        linear_parameters)
    if not np.any(uneven(columns)):
        return last
    inner = micro_batch_operator_seconds(model, gpu, columns, seq_len, trainable_fraction, compute_overhead_fraction,
                                         linear_parameters, stage="inner")
    slower = uneven(columns) & (np.asarray(inner["compute_s"]) > np.asarray(last["compute_s"]))
    return {name: np.where(slower, inner[name], value) for name, value in last.items()}


def micro_batch_compute_seconds(
    model: ModelSpec,
    gpu: GpuSpec,
    columns: PlanColumns,
    seq_len: int,
    trainable_fraction: float = 1.0,
    compute_overhead_fraction: float = 0.0,
) -> np.ndarray:
    """Compute time of one micro-batch on one GPU (one stage, one context-parallel rank)."""
    seconds = micro_batch_operator_times(model, gpu, columns, seq_len, trainable_fraction, compute_overhead_fraction)["compute_s"]
    unsupported = peak_flops_per_s(gpu, columns.precision) <= 0
    return np.where(unsupported, np.inf, seconds)
