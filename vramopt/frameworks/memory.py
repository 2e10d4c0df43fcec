"""Model-state bytes where a framework keeps other bytes than the generic accounting.

The generic accounting (costs/memory.model_state_bytes) keeps, per trainable parameter,
weights and gradients in the training precision and the optimizer's master copy and states
(Adam: 12 B), sharded by the ZeRO stage. Frameworks differ:

- DeepSpeed 0.19.8 (runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs,
  runtime/zero/stage3.py estimate_zero3_model_states_mem_needs): ZeRO-1/2 keep an fp32
  gradient partition (4 B / dp) beside the 16-bit gradients: 2 + 18/dp per parameter at
  ZeRO-2; ZeRO-3 keeps 18/dp (16-bit parameter, fp32 gradient, fp32 master, Adam moments)
  plus 4 B for each parameter of the largest module, gathered with its gradient; ZeRO-Offload
  moves the gradient partitions to the host (ZeRO-2 + cpu: 2 B per parameter on the GPU;
  ZeRO-3 + cpu: 2/dp + the live module); ZeRO-Infinity (nvme) keeps only the live module.
  Applied to full training in bf16/fp16 with Adam, what the estimators model.
- Megatron-LM core_v0.16.1 (docs/user-guide/features/dist_optimizer.md, bytes per parameter
  '18 | 6 + 12/d' for bf16 parameters with fp32 main gradients, '20 | 4 + 16/d' for fp16,
  '16 | 8 + 8/d' for fp32; arguments.py: bf16 accumulates and reduces gradients in fp32
  unless --grad-reduce-in-bf16): fp32 main gradients (4 B, not sharded by the distributed
  optimizer), and bf16 parameters under fp8/fp4 (Transformer Engine keeps the bf16 weights;
  params_dtype is bfloat16 with --bf16); fp16 adds an fp32 main-gradient copy to the sharded
  optimizer state (16/d instead of 12/d).
- torchtitan 0.3.0: FSDP2 with mixed_precision_reduce 'float32' reduce-scatters fp32
  gradients (4 B / shard, config/configs.py TrainingConfig); its fp32 sharded parameter is
  the master copy (training.dtype float32), so the same 16 B per parameter are laid out as
  fp32 weights 4 + fp32 gradients 4 + Adam moments 8; ZeRO-2 (fsdp_reshard_after_forward
  'never') keeps the unsharded bf16 parameters as well; ZeRO-3 keeps two blocks and the
  output head unsharded, and under pipeline parallelism the whole stage in bf16 with its
  unsharded fp32 gradients (see ``_torchtitan``). Float8 (components/quantization/float8.py:
  torchao Float8Linear subclasses nn.Linear, casting to fp8 inside each matmul) keeps these
  same states: nothing here depends on the training precision.
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.columns import OFFLOAD_CPU, OFFLOAD_NONE, OFFLOAD_NVME, PlanColumns, sharding_group
from vramopt.costs.optimizer_states import uses_adam
from vramopt.types import PRECISIONS, ModelSpec

FP32_BYTES = 4.0
HALF_BYTES = 2.0
ADAM_MOMENTS_BYTES = 8.0
"""Adam's momentum and variance in fp32 (4 + 4 B per parameter)."""
DEEPSPEED_LIVE_BYTES_PER_PARAMETER = 4.0
"""'largest_layer_memory = 4*largest_layer_params': 16-bit parameters gathered and 16-bit
gradients computed (DeepSpeed docs/code-docs/source/memory.rst, stage3.py estimator)."""

_BF16, _FP16, _FP32 = (PRECISIONS.index(name) for name in ("bf16", "fp16", "fp32"))
_LOW = np.array([PRECISIONS.index(name) for name in ("fp8", "fp4") if name in PRECISIONS])


def largest_module_parameters(model: ModelSpec) -> float:
    """Parameters of the largest single module (DeepSpeed's ``largest_layer_params``: the
    parameters a module holds itself, ``recurse=False``): the embedding table or the largest
    linear layer (an MLP matrix, an expert's matrix, or the attention output projection)."""
    hidden = model.hidden_size
    linears = [hidden * model.ffn_hidden_size, hidden * model.heads * model.head_dim, hidden * model.kv_heads * model.head_dim]
    if model.moe is not None:
        linears.append(hidden * model.moe.expert_ffn_hidden_size)
    return float(max([model.vocab_size * hidden] + linears))


def framework_model_state_bytes(framework: str, model: ModelSpec, columns: PlanColumns, parameters_per_gpu: np.ndarray,
                                generic: dict[str, np.ndarray], trainable_fraction: float, frozen_bytes_per_param) -> dict[str, np.ndarray]:
    """The weights, gradients and optimizer bytes per GPU under ``framework`` (the generic
    terms where the framework's accounting is not known to differ)."""
    full_training = trainable_fraction == 1.0 and frozen_bytes_per_param is None
    if framework == "generic" or not full_training:
        return generic
    if framework == "deepspeed":
        return _deepspeed(model, columns, parameters_per_gpu, generic)
    if framework == "megatron":
        return _megatron(columns, parameters_per_gpu, generic)
    if framework == "torchtitan":
        return _torchtitan(model, columns, parameters_per_gpu, generic)
    return generic


def deepspeed_model_state_terms(params, shards, largest_module_params, zero, offload) -> dict[str, np.ndarray]:
    """Weights, gradients and optimizer bytes per GPU as DeepSpeed's estimators count them
    (16-bit training with Adam; ``params`` per GPU before ZeRO, ``shards`` the ZeRO group)."""
    params, shards = np.asarray(params, dtype=float), np.asarray(shards, dtype=float)
    zero, offload = np.asarray(zero), np.asarray(offload)
    live = DEEPSPEED_LIVE_BYTES_PER_PARAMETER * np.asarray(largest_module_params, dtype=float)
    weights = np.where(zero >= 3, HALF_BYTES * params / shards + live, HALF_BYTES * params)
    weights = np.where(offload == OFFLOAD_NVME, live, weights)  # ZeRO-Infinity: only the live module
    none = offload == OFFLOAD_NONE
    gradients = np.select(
        [(zero == 3) & none, (zero == 2) & none, (zero == 1) & none],
        [FP32_BYTES * params / shards, (HALF_BYTES + FP32_BYTES) * params / shards, HALF_BYTES * params + FP32_BYTES * params / shards],
        0.0,  # ZeRO-Offload/Infinity: the gradient partitions go to the host
    )
    optimizer = np.where(none, (FP32_BYTES + ADAM_MOMENTS_BYTES) * params / shards, 0.0)
    return {"weights_bytes": weights, "gradients_bytes": gradients, "optimizer_bytes": optimizer}


def _deepspeed(model, columns, params, generic):
    terms = deepspeed_model_state_terms(params, sharding_group(columns), largest_module_parameters(model) / columns.tensor_parallel,
                                        columns.zero_stage, columns.offload)
    zero, offload = columns.zero_stage, columns.offload
    # ZeRO-0, ZeRO-1 with offload (no estimator covers them), other precisions and optimizers: generic.
    applies = (np.isin(columns.precision, (_BF16, _FP16)) & uses_adam(columns) & (zero >= 1)
               & ~((zero == 1) & (offload == OFFLOAD_CPU)))
    return {name: np.where(applies, terms[name], generic[name]) for name in terms}


def _megatron(columns, params, generic):
    shards = sharding_group(columns).astype(float)
    low = np.isin(columns.precision, _LOW) if _LOW.size else np.zeros(len(columns), dtype=bool)
    fp32_main_gradients = (columns.grad_comm_precision == _FP32) | ((columns.precision == _FP32))
    gradients = np.where(fp32_main_gradients, FP32_BYTES * params, HALF_BYTES * params)
    weights = np.where(low, HALF_BYTES * params, generic["weights_bytes"])  # bf16 parameters beside TE's fp8 casts
    extra_fp16 = np.where((columns.precision == _FP16) & (columns.offload == OFFLOAD_NONE),
                          FP32_BYTES * params / np.where(columns.zero_stage >= 1, shards, 1.0), 0.0)
    return {"weights_bytes": weights, "gradients_bytes": gradients, "optimizer_bytes": generic["optimizer_bytes"] + extra_fp16}


def _torchtitan(model, columns, params, generic):
    shards = sharding_group(columns).astype(float)
    zero = columns.zero_stage
    sharded = zero >= 2
    # FSDP2's unsharded bf16 parameters of the layer in compute and the one prefetched, and
    # the [norm, lm_head] group, which is not resharded after the forward (fsdp.py
    # apply_fsdp_to_decoder: reshard_after_forward only with the policy 'always').
    t = columns.tensor_parallel
    prefetch = 2.0 * HALF_BYTES * model.parameters.largest_layer / t + HALF_BYTES * model.vocab_size * model.hidden_size / t
    # Under pipeline parallelism FSDP2 keeps the stage unsharded from the forward to the last
    # backward (fsdp.py get_fsdp_reshard_after_forward_policy 'default': not pp_enabled; torch
    # distributed/pipelining/stage.py: set_reshard_after_backward(False) and
    # set_requires_gradient_sync(False) for all micro-batches but the last) and accumulates
    # unsharded gradients in the fp32 reduce dtype (fsdp/_fully_shard/_fsdp_param.py
    # to_accumulated_grad_if_needed).
    pipelined = (columns.pipeline_parallel > 1) & (zero == 3) & (shards > 1)
    fsdp3 = FP32_BYTES * params / shards + np.where(pipelined, HALF_BYTES * params, np.where(shards > 1, prefetch, 0.0))
    weights = np.select([zero == 3, zero == 2], [fsdp3, HALF_BYTES * params + FP32_BYTES * params / shards], FP32_BYTES * params)
    gradients = np.where(pipelined, FP32_BYTES * params, FP32_BYTES * params / np.where(sharded, shards, 1.0))
    optimizer = ADAM_MOMENTS_BYTES * params / np.where(sharded, shards, 1.0)
    applies = uses_adam(columns) & (columns.offload == OFFLOAD_NONE)
    return {name: np.where(applies, value, generic[name])
            for name, value in (("weights_bytes", weights), ("gradients_bytes", gradients), ("optimizer_bytes", optimizer))}
