"""Per-GPU training memory terms, in bytes (DESIGN.md section 3).

Model states follow Rajbhandari et al. 2020 (ZeRO) section 5: weights and gradients at
``bytes`` per parameter, optimizer states at K per parameter (Adam 12; the optimizer-state
format decides, costs/optimizer_states.py), divided by the data-parallel
degree from stage 1 (optimizer), 2 (gradients) and 3 (weights). ZeRO-3 also holds the two
largest layers' full parameters gathered for compute (the prefetch buffer). Offload moves
optimizer states to host RAM (cpu) or every state to NVMe (nvme, ZeRO-Infinity,
Rajbhandari et al. 2021); the GPU then keeps the working layers only.
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.activations import ActivationShape, checkpoint_bytes, layer_bytes
from vramopt.costs.columns import (
    CHECKPOINT_EVERY,
    CHECKPOINT_NONE,
    OFFLOAD_CPU,
    OFFLOAD_NVME,
    PlanColumns,
    sharding_group,
)
from vramopt.costs.expert_parallel import unsplit_expert_parameters_per_gpu
from vramopt.costs.optimizer_states import state_bytes_per_parameter
from vramopt.costs.pipeline_stages import heaviest_weight_stage, stage_activation_loads, uneven
from vramopt.costs.precision import PRECISION_ACTIVATION_SCALE, PRECISION_BYTES
from vramopt.types import ModelSpec

PREFETCH_LAYERS = 2
"""DESIGN.md section 3: ZeRO-3 keeps the two largest layers' full parameters in flight."""


def parameters_per_gpu(model: ModelSpec, columns: PlanColumns) -> np.ndarray:
    """Parameters a GPU holds before ZeRO sharding, on the heaviest pipeline stage.

    Layers split evenly over stages, or as the plan's first/last stage layers say
    (costs/pipeline_stages.py: the stage with the most parameters); the input embedding
    lives on the first stage and the output head on the last (with tied embeddings both hold
    a copy), all split by tp.
    """
    layer_params = model.parameters.total - model.parameters.embedding
    pipeline = columns.pipeline_parallel.astype(float)
    layers, stage_embedding = heaviest_weight_stage(model, columns)  # embedding: all at pp 1 or tied, else half
    stage_params = np.where(uneven(columns), layer_params * layers / model.layers, layer_params / pipeline)
    # Expert parallelism keeps 1/ep of the stage's routed experts (costs/expert_parallel.py).
    return (stage_params + stage_embedding) / columns.tensor_parallel - unsplit_expert_parameters_per_gpu(model, columns)


def sharded_parameters_per_gpu(model: ModelSpec, columns: PlanColumns) -> np.ndarray:
    """The parameters whose ZeRO shard a GPU holds, before dividing by the sharding group:
    expert states shard over the expert data-parallel group (dp x cp / ep), so ep cancels
    and a sharded state costs what it costs without expert parallelism."""
    return parameters_per_gpu(model, columns) + unsplit_expert_parameters_per_gpu(model, columns)


def weight_bytes_per_parameter(columns: PlanColumns, trainable_fraction: float = 1.0, frozen_bytes_per_param: float | None = None):
    """Average stored bytes per parameter: trainable ones in the training precision, frozen
    ones (LoRA/QLoRA base) in their own format."""
    bytes_per_weight = PRECISION_BYTES[columns.precision]
    frozen = bytes_per_weight if frozen_bytes_per_param is None else frozen_bytes_per_param
    return trainable_fraction * bytes_per_weight + (1.0 - trainable_fraction) * frozen


def model_state_bytes(
    model: ModelSpec, columns: PlanColumns, trainable_fraction: float = 1.0, frozen_bytes_per_param: float | None = None
) -> dict[str, np.ndarray]:
    """Weights, gradients and optimizer states per GPU (bytes).

    Only the trainable fraction of the parameters has gradients and optimizer states (all of
    them except under LoRA/QLoRA, where the frozen base has neither).
    """
    params = parameters_per_gpu(model, columns)
    trainable = params * trainable_fraction
    sharded = sharded_parameters_per_gpu(model, columns)  # what a ZeRO shard is cut from
    dp = sharding_group(columns).astype(float)  # context-parallel ranks shard with dp
    zero = columns.zero_stage
    offload = columns.offload
    bytes_per_weight = PRECISION_BYTES[columns.precision]
    stored_bytes = weight_bytes_per_parameter(columns, trainable_fraction, frozen_bytes_per_param)
    optimizer_bytes_per_param = state_bytes_per_parameter(model, columns)  # the optimizer format's K
    working_layers = PREFETCH_LAYERS * model.parameters.largest_layer / columns.tensor_parallel

    weights = np.where(zero >= 3, sharded, params) * stored_bytes / np.where(zero >= 3, dp, 1.0)
    # The gathered layers exist only when there is something to gather (dp > 1).
    weights = weights + np.where((zero >= 3) & (dp > 1), working_layers * stored_bytes, 0.0)
    gradients = np.where(zero >= 2, sharded * trainable_fraction, trainable) * bytes_per_weight / np.where(zero >= 2, dp, 1.0)
    optimizer = np.where(zero >= 1, sharded * trainable_fraction, trainable) * optimizer_bytes_per_param / np.where(zero >= 1, dp, 1.0)

    on_nvme = offload == OFFLOAD_NVME
    weights = np.where(on_nvme, working_layers * stored_bytes, weights)
    gradients = np.where(on_nvme, working_layers * trainable_fraction * bytes_per_weight, gradients)
    optimizer = np.where((offload == OFFLOAD_CPU) | on_nvme, 0.0, optimizer)
    return {"weights_bytes": weights, "gradients_bytes": gradients, "optimizer_bytes": optimizer}


def offloaded_bytes_per_gpu(
    model: ModelSpec, columns: PlanColumns, trainable_fraction: float = 1.0, frozen_bytes_per_param: float | None = None
) -> dict[str, np.ndarray]:
    """Bytes each GPU parks in host RAM (cpu offload) and on NVMe (nvme offload)."""
    shard = sharded_parameters_per_gpu(model, columns) / sharding_group(columns)
    bytes_per_weight = PRECISION_BYTES[columns.precision]
    stored_bytes = weight_bytes_per_parameter(columns, trainable_fraction, frozen_bytes_per_param)
    optimizer_bytes_per_param = state_bytes_per_parameter(model, columns)
    host = np.where(columns.offload == OFFLOAD_CPU, shard * trainable_fraction * optimizer_bytes_per_param, 0.0)
    nvme_per_param = stored_bytes + trainable_fraction * (bytes_per_weight + optimizer_bytes_per_param)
    nvme = np.where(columns.offload == OFFLOAD_NVME, shard * nvme_per_param, 0.0)
    return {"host_bytes_per_gpu": host, "nvme_bytes_per_gpu": nvme}


def in_flight_micro_batches(columns: PlanColumns, micro_batches: np.ndarray) -> np.ndarray:
    """Micro-batches whose activations pipeline stage 0 holds at once.

    1F1B (Narayanan et al. 2021 section 2.2.1): min(p, m). The interleaved schedule holds
    (1 + (p-1)/(p*v)) times as much (Korthikanti et al. 2022 section 4.2.3).
    """
    p = columns.pipeline_parallel.astype(float)
    v = columns.virtual_stages.astype(float)
    base = np.minimum(p, micro_batches)
    interleave_factor = np.where(v > 1, 1.0 + (p - 1.0) / (p * v), 1.0)
    return base * interleave_factor


def activation_bytes(
    model: ModelSpec, shape: ActivationShape, columns: PlanColumns, seq_len: int, micro_batches: np.ndarray
) -> np.ndarray:
    """Saved activations on the pipeline stage that holds the most: stage 0 for even stages;
    with uneven stages the most of the first, the first middle and the last stage
    (costs/pipeline_stages.py)."""
    keep_scores = (columns.flash_attention == 0) & (columns.checkpoint_kind == CHECKPOINT_NONE)
    full_layer = layer_bytes(
        shape, seq_len, columns.micro_batch, columns.tensor_parallel, columns.sequence_parallel, keep_scores
    )
    working_layer = layer_bytes(
        shape, seq_len, columns.micro_batch, columns.tensor_parallel, columns.sequence_parallel,
        columns.flash_attention == 0,
    )
    in_flight = in_flight_micro_batches(columns, micro_batches)
    stored_most = 0.0
    for layers_per_stage, stage_in_flight in stage_activation_loads(model, columns, in_flight, micro_batches):
        stored = np.where(
            columns.checkpoint_kind == CHECKPOINT_EVERY,
            np.ceil(layers_per_stage / np.maximum(columns.checkpoint_every, 1)) * checkpoint_bytes(shape, seq_len, columns.micro_batch, columns.tensor_parallel, columns.sequence_parallel),
            layers_per_stage * full_layer,
        )
        stored_most = np.maximum(stored_most, stage_in_flight * stored)
    # Under full recomputation one segment of k layers is rebuilt at a time for one
    # micro-batch, on top of every micro-batch's stored checkpoints.
    segment = np.where(columns.checkpoint_kind == CHECKPOINT_EVERY, columns.checkpoint_every * working_layer, 0.0)
    scale = PRECISION_ACTIVATION_SCALE[columns.precision]
    return (stored_most + segment) * scale


def logits_bytes(model: ModelSpec, columns: PlanColumns, seq_len: int) -> np.ndarray:
    """fp32 cross-entropy input on the last stage: 4*s*b*V/t (DESIGN.md section 3)."""
    return 4.0 * seq_len * columns.micro_batch * model.vocab_size / columns.tensor_parallel

