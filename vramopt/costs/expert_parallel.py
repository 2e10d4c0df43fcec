"""Expert parallelism (training): routed experts split over ep ranks, tokens dispatched to
their experts and combined back by all-to-all.

Group algebra (Megatron-Core MoE parallel folding, megatron/core/parallel_state.py
``initialize_model_parallel`` with ``expert_tensor_parallel_size`` and
``expert_model_parallel_size``; Liu et al. 2025, MoE Parallel Folding): the expert layers
refold the ``tp x cp x dp`` ranks of a pipeline stage as ``etp x ep x edp``, so ``ep x etp``
must divide ``tp x cp x dp`` and the expert data-parallel group is
``edp = tp x cp x dp / (ep x etp)``. etp defaults to tp (Megatron-Core's default when
``--expert-tensor-parallel-size`` is not given); the searched alternative is etp = 1, the
setting of Megatron-Core's published MoE recipes (Megatron-MoE-ModelZoo's Qwen3 and
DeepSeek-V3 runs), where each expert is whole on its rank and the ep group is ep
consecutive GPUs.

Memory: each GPU holds 1/(ep x etp) of the routed experts of its stage (1/tp of them without
expert parallelism and etp = tp, as before; etp = 1 with ep = 1 replicates them over tp).
ZeRO / the distributed optimizer shards expert states over edp instead of ``dp x cp``, so a
sharded state costs the same bytes whatever ep and etp; what they change is the unsharded
ones (weights below ZeRO-3, gradients below ZeRO-2, optimizer states at ZeRO-0). Shared
experts, the router and attention are dense.

Compute: each GPU runs the same FLOPs of its stage's experts whatever ep and etp, but in
other shapes: E/ep experts of width f/etp, each seeing ``T k ep etp / (E tp)`` tokens
(``costs/operators.py``), so a wider ep makes the grouped GEMMs fatter and more efficient.
With etp < tp the MoE layers' MLP collectives run over the etp group instead of tp
(``moe_tensor_parallel_adjustment_s``).

Time: per MoE layer and micro-batch, a dispatch and a combine all-to-all in the forward pass
and again in the backward pass (4; a full recomputation replays the forward's 2), each GPU
sending the (ep - 1)/ep share of its ``tokens x top-k x hidden`` bf16 activations that go
to other ranks, over the link the ep group crosses (ranks ``etp`` apart, spanning ``etp x
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
from vramopt.costs.communication import (
    RECOMPUTE_EXTRA_ALL_REDUCES_PER_LAYER,
    TENSOR_PARALLEL_ALL_REDUCES_PER_LAYER,
    group_bandwidth,
)
from vramopt.costs.precision import PRECISION_COMMUNICATION_BYTES
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
    """Routed-expert parameters a GPU of the heaviest stage would hold split like the dense
    layers (over tp) minus what it holds split over ep x etp: what ep and etp take off it
    (negative when etp = 1 without ep replicates the experts over tp)."""
    if model.moe is None:
        return np.zeros(len(columns.tensor_parallel))
    layout = ParallelLayout.from_columns(columns)
    stage_experts = routed_expert_parameters(model) / layout.pipeline_parallel
    if np.any(uneven(columns)):  # the heaviest stage's share (costs/pipeline_stages.py)
        layers, _ = heaviest_weight_stage(model, columns)
        stage_experts = np.where(uneven(columns), routed_expert_parameters(model) * layers / model.layers, stage_experts)
    return stage_experts * (1.0 / layout.tensor_parallel - 1.0 / layout.expert_weight_shards)


def expert_tensor_parallel_invalid_reasons(model: ModelSpec, columns: PlanColumns) -> dict[str, np.ndarray]:
    """The rules of etp itself; that ep x etp divides tp x cp x dp is the layout's rule."""
    etp = np.asarray(getattr(columns, "expert_tensor_parallel", 0))
    differs = (etp != 0) & (etp != np.asarray(columns.tensor_parallel))
    return {"expert_tensor_parallel other than tensor_parallel needs a mixture-of-experts model": differs & (model.moe is None)}


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
    bandwidth = group_bandwidth(gpu, ep, layout.group_span("expert_parallel"))
    return np.where(ep > 1, moe_layers_per_stage * passes * bytes_out / bandwidth, 0.0)


def moe_tensor_parallel_adjustment_s(model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, seq_len) -> np.ndarray:
    """Change of one micro-batch's tensor-parallel collectives when the MoE layers' MLP runs
    over etp instead of tp: half of a layer's f/g collectives belong to its MLP (Shoeybi et
    al. 2019 section 3); in a MoE layer they move the same activations among etp ranks
    (none at etp = 1). 0 for dense models and where etp = tp."""
    layout = ParallelLayout.from_columns(columns)
    tp = np.asarray(layout.tensor_parallel, dtype=float)
    etp = np.asarray(layout.expert_tensor_parallel, dtype=float)
    if model.moe is None or bool(np.all(etp == tp)):
        return np.zeros(len(columns.tensor_parallel))
    moe_layers_per_stage = moe_layer_count(model.layers, model.moe) / layout.pipeline_parallel
    if np.any(uneven(columns)):  # the collectives of the stage with the most layers (costs/pipeline_stages.py)
        moe_layers_per_stage = np.where(uneven(columns), moe_layer_count(model.layers, model.moe) / model.layers
                                        * most_layers_on_a_stage(model, columns), moe_layers_per_stage)
    message = seq_len * columns.micro_batch * model.hidden_size * PRECISION_COMMUNICATION_BYTES[columns.precision]
    count = (TENSOR_PARALLEL_ALL_REDUCES_PER_LAYER
             + np.where(columns.checkpoint_kind == CHECKPOINT_EVERY, RECOMPUTE_EXTRA_ALL_REDUCES_PER_LAYER, 0)) / 2.0

    def all_reduce_s(degree):
        return 2.0 * (degree - 1.0) / degree * message / group_bandwidth(gpu, degree, degree)

    return moe_layers_per_stage * count * (all_reduce_s(etp) - all_reduce_s(tp))
