"""What each pipeline stage of a plan holds and takes, for per-stage checkpointing (issue 18
item 1): the stage terms the uniform model folds into its heaviest stage.

Activations: stage s of a 1F1B pipeline keeps the activations of min(p - s, m) micro-batches
(Narayanan et al. 2021 section 2.2.1), the first stage the most; the interleaved schedule
multiplies stage 0's count by 1 + (p - 1) / (p v) (Korthikanti et al. 2022 section 4.2.3) and
the other stages' counts scale with it, as ``costs/pipeline_stages.stage_activation_loads``
scales the first middle and the last stage. So the same checkpointing on every stage spends
on the late stages memory that only the early ones need (Mist, Zhu et al. EuroSys'25; AdaPipe,
Sun et al. ASPLOS'24). Stage s's activations are ``memory.activation_bytes``' stored term for
its own layers and in-flight count, plus the recomputed segment; the heaviest stage gives
back exactly the uniform model's figure.

Time: per micro-batch slot, stage s runs its layers (the first and middle stages no head; the
last stage the head and the loss) at the per-layer time of the operator model
(``costs/operators.py``, the 'inner' and 'last' stages); the schedule's pace is its slowest
stage. The communication per slot (tensor-parallel, the KV ring, the expert all-to-all) is the
uniform model's, priced at the stage with the most layers, for every stage; the pipeline's
point-to-point term is the uniform plan's with that stage's checkpointing. With every stage
checkpointed alike the slowest stage's time is the uniform model's exactly.
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.activations import activation_shape, checkpoint_bytes, layer_bytes
from vramopt.costs.columns import CHECKPOINT_EVERY, CHECKPOINT_NONE, PlanColumns
from vramopt.costs.compute import non_embedding_active_parameters
from vramopt.costs.memory import in_flight_micro_batches
from vramopt.costs.operators import micro_batch_operator_seconds
from vramopt.costs.pipeline_stages import stage_layers, timed_stage_layers
from vramopt.costs.precision import PRECISION_ACTIVATION_SCALE


def layers_of_each_stage(layers: int, pipeline_parallel: int, first_stage_layers: int = 0, last_stage_layers: int = 0) -> tuple[int, ...]:
    """The layer count of every stage, first to last (Megatron-Core's assignment, costs/pipeline_stages.py)."""
    if pipeline_parallel == 1:
        return (layers,)
    first, middle, last, _ = (int(value) for value in stage_layers(layers, pipeline_parallel, first_stage_layers, last_stage_layers))
    return (first,) + (middle,) * (pipeline_parallel - 2) + (last,)


def stage_in_flight(columns: PlanColumns, micro_batches: np.ndarray) -> np.ndarray:
    """Micro-batches in flight on every stage, shape (rows, pp): stage 0's the uniform model's,
    stage s's min(p - s, m) / min(p, m) of it."""
    stage_zero = in_flight_micro_batches(columns, micro_batches)
    p = int(np.asarray(columns.pipeline_parallel).reshape(-1)[0])
    m = np.asarray(micro_batches, dtype=float)
    base = np.maximum(np.minimum(float(p), m), 1.0)
    return np.stack([stage_zero * np.minimum(float(p - stage), m) / base for stage in range(p)], axis=1)


def stage_activation_bytes(model, columns: PlanColumns, seq_len: int, micro_batches: np.ndarray, recomputed_layers: int = 0) -> np.ndarray:
    """Activation bytes of every stage, shape (rows, pp), for rows of one layout (the same pp
    and stage split; each row its own checkpointing): ``memory.activation_bytes`` per stage.
    ``seq_len`` is the tokens one rank holds (seq_len / cp), as the uniform model passes.

    ``recomputed_layers`` N > 0 (rows without checkpointing): Megatron-Core's block method
    (``recompute_method='block'``, transformer_block.py ``_checkpointed_forward``): the first N
    layers of a stage keep only their input (Korthikanti et al. 2022 Table 2's 2sbh), the others
    everything, and one layer is rebuilt at a time; a stage with at most N layers recomputes all."""
    shape = activation_shape(model)
    keep_scores = (columns.flash_attention == 0) & (columns.checkpoint_kind == CHECKPOINT_NONE)
    full_layer = layer_bytes(shape, seq_len, columns.micro_batch, columns.tensor_parallel, columns.sequence_parallel, keep_scores)
    working_layer = layer_bytes(shape, seq_len, columns.micro_batch, columns.tensor_parallel, columns.sequence_parallel,
                                columns.flash_attention == 0)
    counts = layers_of_each_stage(model.layers, int(columns.pipeline_parallel[0]), int(columns.first_stage_layers[0]),
                                  int(columns.last_stage_layers[0]))
    in_flight = stage_in_flight(columns, micro_batches)
    every = np.maximum(columns.checkpoint_every, 1)
    per_stage = []
    kept = checkpoint_bytes(shape, seq_len, columns.micro_batch)
    for stage, layers in enumerate(counts):
        block = min(recomputed_layers, layers)
        stored = np.where(columns.checkpoint_kind == CHECKPOINT_EVERY, np.ceil(layers / every) * kept,
                          (layers - block) * full_layer + block * kept)
        per_stage.append(in_flight[:, stage] * stored)
    rebuilt = np.where(columns.checkpoint_kind == CHECKPOINT_EVERY, columns.checkpoint_every, 1 if recomputed_layers else 0)
    segment = rebuilt * working_layer
    scale = PRECISION_ACTIVATION_SCALE[columns.precision]
    return (np.stack(per_stage, axis=1) + segment[:, None]) * scale[:, None]


def stage_compute_shares(model, gpu, columns: PlanColumns, seq_len: int, trainable_fraction: float = 1.0,
                         compute_overhead_fraction: float = 0.0) -> np.ndarray:
    """Each stage's compute per micro-batch over the slowest stage's, shape (rows, pp): its
    layers at the per-layer time of the operator model, plus the head and the loss on the last."""
    linear_parameters = non_embedding_active_parameters(model) + model.vocab_size * model.hidden_size
    arguments = (model, gpu, columns, seq_len, trainable_fraction, compute_overhead_fraction, linear_parameters)
    last = np.asarray(micro_batch_operator_seconds(*arguments, stage="last")["compute_s"], dtype=float)
    inner = np.asarray(micro_batch_operator_seconds(*arguments, stage="inner")["compute_s"], dtype=float)
    per_layer = inner / np.asarray(timed_stage_layers(model, columns, "inner"), dtype=float)
    head = last - per_layer * np.asarray(timed_stage_layers(model, columns, "last"), dtype=float)
    counts = layers_of_each_stage(model.layers, int(columns.pipeline_parallel[0]), int(columns.first_stage_layers[0]),
                                  int(columns.last_stage_layers[0]))
    raw = np.stack([per_layer * layers + (head if stage == len(counts) - 1 else 0.0) for stage, layers in enumerate(counts)], axis=1)
    return raw / raw.max(axis=1, keepdims=True)
