"""Expert parallelism (training): routed experts split over ep ranks, tokens dispatched to
their experts and combined back by all-to-all.

Group algebra (Megatron-Core MoE parallel folding, megatron/core/parallel_state.py
``initialize_model_parallel`` with ``expert_tensor_parallel_size`` and
``expert_model_parallel_size``; Liu et al. 2025, MoE Parallel Folding): the expert layers
refold the ``tp x cp x dp`` ranks of a pipeline stage as ``etp x ep x edp``. vramopt fixes
etp = tp (Megatron-Core's default when ``--expert-tensor-parallel-size`` is not given), so
ep must divide ``cp x dp`` and the expert data-parallel group is ``edp = cp x dp / ep``.

Memory: each GPU holds 1/ep of the routed experts of its stage (and 1/tp of each, as
before). ZeRO / the distributed optimizer shards expert states over edp instead of
``dp x cp``, so a sharded state costs the same bytes with or without ep; what ep saves is
the unsharded ones (weights below ZeRO-3, gradients below ZeRO-2, optimizer states at
ZeRO-0). Shared experts, the router and attention are dense.

Time: per MoE layer and micro-batch, a dispatch and a combine all-to-all in the forward pass
and again in the backward pass (4; a full recomputation replays the forward's 2), each GPU
sending the (ep - 1)/ep share of its ``tokens x top-k x hidden`` bf16 activations that go
to other ranks, over the link the ep group crosses (ranks ``tp`` apart, spanning ``tp x
ep`` GPUs: NVLink inside a node, the network beyond). Exposed (assumption: overlapping the
all-to-all with computation is an opt-in of the frameworks, and vramopt prices the plain
schedule). Each rank dispatches s / (cp x tp) tokens (assumption: with tp > 1 the MoE layers
run with sequence parallelism, as Megatron-Core's MoE recipes do, so the tp ranks hold
disjoint token slices).

Not modelled: load imbalance between experts (a dropless router with an auxiliary loss is
assumed balanced), the grouped-GEMM efficiency of small experts, and DeepSeek-V3's
node-limited routing (report section 2.1.2).
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.columns import CHECKPOINT_EVERY, PlanColumns
from vramopt.costs.communication import group_bandwidth
from vramopt.costs.pipeline_stages import heaviest_weight_stage, most_layers_on_a_stage, uneven
from vramopt.models.parameters import mlp_parameters, moe_layer_count
from vramopt.parallel_layout import ParallelLayout
from vramopt.types import GpuSpec, ModelSpec

DISPATCH_BYTES_PER_ELEMENT = 2.0
"""Tokens travel in bf16 (Megatron-Core's alltoall token dispatcher; DeepSeek-V3's own
framework dispatches in fp8, report section 3, which vramopt does not model)."""

ALL_TO_ALLS_PER_LAYER = 4
"""Dispatch and combine, forward and backward."""


def routed_expert_parameters(model: ModelSpec) -> float:
    """Parameters of every routed expert of every MoE layer (0 for a dense model)."""
    moe = model.moe
    if moe is None:
        return 0.0
    expert = mlp_parameters(model.hidden_size, moe.expert_ffn_hidden_size, gated=model.gated_mlp, bias=model.mlp_bias)
    return float(moe_layer_count(model.layers, moe) * moe.experts * expert)


def unsplit_expert_parameters_per_gpu(model: ModelSpec, columns: PlanColumns) -> np.ndarray:
    """Routed-expert parameters a GPU of the heaviest stage would hold without ep (its stage's
    experts, split by tp) minus what it holds with ep: the parameters ep takes off it."""
    layout = ParallelLayout.from_columns(columns)
    held_without = routed_expert_parameters(model) / layout.dense_weight_shards  # tp x pp, as dense layers
    if model.moe is not None and np.any(uneven(columns)):  # the heaviest stage's share (costs/pipeline_stages.py)
        layers, _ = heaviest_weight_stage(model, columns)
        held_without = np.where(uneven(columns), routed_expert_parameters(model) * layers / model.layers / layout.tensor_parallel,
                                held_without)
    return held_without * (1.0 - 1.0 / np.asarray(columns.expert_parallel))


def expert_parallel_invalid_reasons(model: ModelSpec, columns: PlanColumns) -> dict[str, np.ndarray]:
    """The rules of ep itself; that ep x etp divides tp x cp x dp is the layout's rule."""
    ep = np.asarray(columns.expert_parallel)
    experts = model.moe.experts if model.moe is not None else 1
    return {
        "expert_parallel > 1 needs a mixture-of-experts model": (ep > 1) & (model.moe is None),
        "expert_parallel must divide the routed experts": (experts % ep) != 0,
    }


def all_to_all_seconds_per_micro_batch(model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, seq_len) -> np.ndarray:
    """Exposed dispatch/combine time of one micro-batch on one GPU of the heaviest stage."""
    ep = np.asarray(columns.expert_parallel).astype(float)
    if model.moe is None:
        return np.zeros_like(ep)
    layout = ParallelLayout.from_columns(columns)
    moe_layers_per_stage = moe_layer_count(model.layers, model.moe) / layout.pipeline_parallel
    if np.any(uneven(columns)):  # the stage with the most layers (costs/pipeline_stages.py)
        moe_layers_per_stage = np.where(uneven(columns), moe_layer_count(model.layers, model.moe) / model.layers
                                        * most_layers_on_a_stage(model, columns), moe_layers_per_stage)
    tokens = seq_len * columns.micro_batch / layout.token_shards
    bytes_out = tokens * model.moe.experts_per_token * model.hidden_size * DISPATCH_BYTES_PER_ELEMENT * (ep - 1.0) / ep
    passes = ALL_TO_ALLS_PER_LAYER + np.where(columns.checkpoint_kind == CHECKPOINT_EVERY, 2, 0)
    bandwidth = group_bandwidth(gpu, ep, layout.tensor_parallel * ep)
    return np.where(ep > 1, moe_layers_per_stage * passes * bytes_out / bandwidth, 0.0)
