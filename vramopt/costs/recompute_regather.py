"""DeepSpeed ZeRO-3 gathers a layer's parameters again for its recomputed forward.

ZeRO-3 gathers each submodule's parameters in its forward pre-hook and releases them in its
post-forward hook (deepspeed 0.19.8 ``runtime/zero/parameter_offload.py``
``pre_sub_module_forward_function`` / ``post_sub_module_forward_function``). Under full
activation checkpointing the backward first re-runs the layer's forward, which fires the same
hooks (DeepSpeed issue #4784 shows them firing in the recomputation), so the recomputation
gathers the whole layer again. Whether the backward that follows needs yet another gather
is decided by the release rule (``partitioned_param_coordinator.py __params_to_release``): a
parameter stays gathered only if it is used again before ``stage3_max_reuse_distance``
elements of other parameters (default 1e9, ``runtime/zero/config.py``) have been traversed
in the recorded module order. Between module i's recomputed forward and its backward lie
the recomputed forwards of the modules after it and their backwards, 2 x their parameters:
module i stays gathered iff that is under the distance. Without recomputation the backward
gathers every module once; with it the recomputation gathers all and the backward the
released ones again, so the extra volume is one gather of the released modules.

Per layer the modules are Megatron-DeepSpeed's fused ones (QKV, attention output, MLP up
with its gate, MLP down; routed experts as one up and one down module per local expert),
each tp-local, as ``ds_numel`` counts them. GPT-3 175B (h 12,288) and the 530B model
release QKV, the output projection and MLP up: two thirds of each layer. Llama 3.1 8B
releases nothing, 70B its QKV and output projection (18%).

PyTorch FSDP2 does not gather again: its forward pre-hook returns early while the module is
in its pre-backward state, whose unshard the recomputation uses (torch 2.13
``distributed/fsdp/_fully_shard/_fsdp_state.py FSDPState._pre_forward``), so the term applies
to DeepSpeed only (``TrainingCase`` framework 'deepspeed', or a case that sets
``recompute_regathers_parameters``).

Not modelled: a checkpoint of k > 1 layers puts more parameters between a module's two uses
and releases more (counted as for one layer); the persistent small parameters
(``stage3_param_persistence_threshold``, 1e5 elements) only where a whole module is smaller.
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.columns import PlanColumns
from vramopt.costs.memory import weight_bytes_per_parameter
from vramopt.models.parameters import moe_layer_count
from vramopt.costs.pipeline_stages import most_layers_on_a_stage
from vramopt.types import GpuSpec, ModelSpec

MAX_REUSE_DISTANCE_NUMEL = 1e9
"""DeepSpeed ``stage3_max_reuse_distance`` default (deepspeed 0.19.8 runtime/zero/config.py;
the same 1e9 since ZeRO-3's release in DeepSpeed 0.3.13, March 2021)."""
PERSISTENCE_THRESHOLD_NUMEL = 1e5
"""DeepSpeed ``stage3_param_persistence_threshold`` default: smaller parameters are never released."""


def released_numel(module_numels: list[float], distance: float = MAX_REUSE_DISTANCE_NUMEL) -> float:
    """Elements of one checkpointed layer that the release rule frees between the module's
    recomputed forward and its backward (module sizes in forward order)."""
    released = 0.0
    for index, numel in enumerate(module_numels):
        between = 2.0 * sum(module_numels[index + 1:])
        if between >= distance and numel >= PERSISTENCE_THRESHOLD_NUMEL:
            released += numel
    return released


def _gated(model: ModelSpec) -> float:
    return 2.0 if model.gated_mlp else 1.0


def layer_modules(model: ModelSpec, tensor_parallel: int, expert_parallel: int, expert_tensor_parallel: int, moe_layer: bool) -> list[float]:
    """tp-local elements of each parameterized module of one layer, in forward order."""
    h, d = float(model.hidden_size), float(model.head_dim)
    t = float(tensor_parallel)
    modules = [(model.heads + 2 * model.kv_heads) * d * h / t, model.heads * d * h / t]
    if not moe_layer:
        width = float(model.ffn_hidden_size)
        return modules + [_gated(model) * width * h / t, width * h / t]
    moe = model.moe
    if moe.shared_experts:
        width = float(moe.shared_experts * moe.shared_expert_ffn_hidden_size)
        modules += [_gated(model) * width * h / t, width * h / t]
    expert = float(moe.expert_ffn_hidden_size) / float(expert_tensor_parallel)
    for _ in range(max(1, moe.experts // int(expert_parallel))):
        modules += [_gated(model) * expert * h, expert * h]
    return modules


def regathered_parameters_per_layer(model: ModelSpec, tensor_parallel, expert_parallel, expert_tensor_parallel) -> np.ndarray:
    """Per plan: the average tp-local parameters per layer gathered once more because of the
    recomputation (the released ones, see the module docstring)."""
    tp = np.asarray(tensor_parallel, dtype=np.int64)
    ep = np.broadcast_to(np.asarray(expert_parallel, dtype=np.int64), tp.shape)
    etp = np.broadcast_to(np.asarray(expert_tensor_parallel, dtype=np.int64), tp.shape)
    share = 0.0 if model.moe is None else moe_layer_count(model.layers, model.moe) / model.layers
    out = np.zeros(tp.shape, dtype=float)
    combos = np.stack([tp.reshape(-1), ep.reshape(-1), etp.reshape(-1)], axis=1)
    unique, inverse = np.unique(combos, axis=0, return_inverse=True)
    values = []
    for t, e, et in unique.tolist():
        dense = released_numel(layer_modules(model, t, e, et, False)) if share < 1.0 else 0.0
        routed = released_numel(layer_modules(model, t, e, et, True)) if share > 0.0 else 0.0
        values.append((1.0 - share) * dense + share * routed)
    out.reshape(-1)[:] = np.asarray(values, dtype=float)[inverse.reshape(-1)]
    return out


def recompute_regather_transfer_seconds(model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, micro_batches, sharding_group,
                                        bandwidth_bytes_per_s, trainable_fraction: float = 1.0,
                                        frozen_bytes_per_param: float | None = None) -> np.ndarray:
    """Per step: the extra all-gather time of a ZeRO-3 plan under full recomputation (0 below
    ZeRO-3 or with one rank), before any overlap: every micro-batch gathers the released
    parameters of each of its stage's layers once more, moving (n-1)/n of them."""
    from vramopt.parallel_layout import ParallelLayout

    layout = ParallelLayout.from_columns(columns)
    group = np.asarray(sharding_group, dtype=float)
    parameters = regathered_parameters_per_layer(model, columns.tensor_parallel, layout.expert_parallel,
                                                 layout.expert_tensor_parallel) * most_layers_on_a_stage(model, columns)
    volume = micro_batches * (group - 1.0) / group * parameters * weight_bytes_per_parameter(columns, trainable_fraction, frozen_bytes_per_param)
    return np.where(columns.zero_stage >= 3, volume / bandwidth_bytes_per_s, 0.0)
