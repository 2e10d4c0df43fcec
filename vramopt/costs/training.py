"""Training plans evaluated end to end: memory per GPU, step time, tokens/s, MFU.

``evaluate_training`` is the single implementation behind ``estimate``, the solver's
coefficient tables and the exhaustive enumerator. It takes many plans at once
(``PlanColumns``) and returns one numpy array per quantity.

Step time (DESIGN.md section 3), for m micro-batches per step, p stages, v virtual stages:
``(compute + tensor-parallel comm per micro-batch) * (m + (p-1)/v)`` (1F1B, and the
interleaved schedule's bubble (p-1)/(v*m), Narayanan et al. 2021 section 2.2)
``+ (1 - overlap) * data-parallel comm + offload transfers``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vramopt.costs.activations import activation_shape
from vramopt.costs.coefficients import coefficient
from vramopt.costs.columns import CHECKPOINT_EVERY, PlanColumns
from vramopt.costs.communication import data_parallel_seconds_per_step, tensor_parallel_seconds_per_micro_batch
from vramopt.costs.context_parallel import context_parallel_invalid_reasons, ring_seconds_per_micro_batch
from vramopt.costs.compute import (
    hardware_flops_per_token,
    micro_batch_compute_seconds,
    model_flops_per_token,
    peak_flops_per_s,
)
from vramopt.costs.memory import (
    activation_bytes,
    logits_bytes,
    model_state_bytes,
    offloaded_bytes_per_gpu,
    parameters_per_gpu,
)
from vramopt.costs.offload import offload_invalid_reasons, offload_seconds_per_step
from vramopt.costs.optimizer_states import optimizer_invalid_reasons, optimizer_step_seconds
from vramopt.costs.precision import PRECISION_BYTES
from vramopt.parallel_layout import ParallelLayout
from vramopt.types import GpuSpec, ModelSpec

MEMORY_TERMS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "logits_bytes", "reserve_bytes")


@dataclass(frozen=True, slots=True)
class TrainingCase:
    """What is fixed while plans vary: the model, the GPU type and the workload."""

    model: ModelSpec
    gpu: GpuSpec
    seq_len: int
    global_batch: int
    """Sequences per optimizer step."""
    headroom_fraction: float = 0.10
    """Fraction of each GPU's memory that must stay free (the seed's 10%)."""
    trainable_fraction: float = 1.0
    """Fraction of the parameters that train: 1 for pretraining and full fine-tuning, the
    adapters' share for LoRA/QLoRA (costs/lora.py)."""
    frozen_bytes_per_param: float | None = None
    """Bytes per frozen base parameter (LoRA bf16, QLoRA NF4); None when nothing is frozen."""
    compute_overhead_fraction: float = 0.0
    """Extra time on the linear layers (QLoRA's NF4 dequantization)."""
    framework: str = "generic"
    """Whose model-state accounting applies (vramopt/frameworks/memory.py): 'generic',
    'deepspeed', 'megatron' or 'torchtitan'."""


def micro_batches_per_step(case: TrainingCase, columns: PlanColumns) -> np.ndarray:
    return ParallelLayout.from_columns(columns).micro_batches(case.global_batch, columns.micro_batch)


def gpus_on_busiest_node(case: TrainingCase, columns: PlanColumns) -> np.ndarray:
    return np.minimum(columns.gpus, case.gpu.node.gpus_per_node)


def invalid_reasons(case: TrainingCase, columns: PlanColumns) -> dict[str, np.ndarray]:
    """Masks of plans that are not well formed, keyed by a readable reason."""
    model = case.model
    t, p, v = columns.tensor_parallel, columns.pipeline_parallel, columns.virtual_stages
    layout = ParallelLayout.from_columns(columns)
    micro_batches = layout.micro_batches(case.global_batch, columns.micro_batch)
    return {
        # heads, layers, gpus = tp x cp x pp x dp, global batch, expert groups (parallel_layout.py)
        **layout.invalid_reasons(gpus=columns.gpus, heads=model.heads, kv_heads=model.kv_heads, layers=model.layers,
                                 global_batch=case.global_batch, micro_batch=columns.micro_batch),
        "virtual_stages > 1 needs pipeline_parallel > 1, layers per stage divisible by it, and micro-batches divisible by pipeline_parallel": (v > 1)
        & ((p == 1) | ((model.layers // p) % v != 0) | (np.round(micro_batches) % p != 0)),
        "sequence_parallel needs tensor_parallel > 1": (columns.sequence_parallel == 1) & (t == 1),
        "checkpointing every k needs 1 <= k <= layers per stage": (columns.checkpoint_kind == CHECKPOINT_EVERY)
        & ((columns.checkpoint_every < 1) | (columns.checkpoint_every > model.layers // p)),
        **offload_invalid_reasons(columns.offload, columns.zero_stage),
        "the GPU does not support this precision": peak_flops_per_s(case.gpu, columns.precision) <= 0,
        **context_parallel_invalid_reasons(case.seq_len, columns),
        **optimizer_invalid_reasons(case.trainable_fraction, columns),
    }


def evaluate_training(case: TrainingCase, columns: PlanColumns) -> dict[str, np.ndarray]:
    model, gpu, seq_len = case.model, case.gpu, case.seq_len
    micro_batches = micro_batches_per_step(case, columns)
    memory = model_state_bytes(model, columns, case.trainable_fraction, case.frozen_bytes_per_param)
    if case.framework != "generic":
        from vramopt.frameworks.memory import framework_model_state_bytes

        memory = framework_model_state_bytes(case.framework, model, columns, parameters_per_gpu(model, columns), memory,
                                             case.trainable_fraction, case.frozen_bytes_per_param)
    # Context parallelism: each rank keeps s/cp tokens of every activation and of the logits
    # (linear in s: cp > 1 needs flash attention, so no s^2 score term is kept).
    rank_tokens = seq_len / columns.context_parallel
    memory["activations_bytes"] = activation_bytes(model, activation_shape(model), columns, rank_tokens, micro_batches)
    memory["logits_bytes"] = logits_bytes(model, columns, rank_tokens)
    memory["reserve_bytes"] = np.full(len(columns), float(gpu.node.framework_reserve_bytes))
    total = sum(memory[name] for name in MEMORY_TERMS)
    capacity = float(gpu.memory_bytes)

    offloaded = offloaded_bytes_per_gpu(model, columns, case.trainable_fraction, case.frozen_bytes_per_param)
    gpus_on_node = gpus_on_busiest_node(case, columns)
    host_per_node = offloaded["host_bytes_per_gpu"] * gpus_on_node
    nvme_per_node = offloaded["nvme_bytes_per_gpu"] * gpus_on_node
    fits_gpu = total <= capacity * (1.0 - case.headroom_fraction)
    fits_host = host_per_node <= gpu.node.host_ram_bytes * coefficient("host_ram_usable_fraction")
    fits_nvme = nvme_per_node <= gpu.node.nvme_capacity_bytes * coefficient("nvme_usable_fraction")

    params_gpu = parameters_per_gpu(model, columns)
    # GEMMs and (load-balanced) attention split over the cp ranks, as do the tp collectives'
    # s*b*h messages; the ring's exposed KV transfers come on top (costs/context_parallel.py).
    compute_per_micro_batch = micro_batch_compute_seconds(
        model, gpu, columns, seq_len, case.trainable_fraction, case.compute_overhead_fraction
    ) / columns.context_parallel
    tensor_parallel_per_micro_batch = tensor_parallel_seconds_per_micro_batch(model, gpu, columns, seq_len) / columns.context_parallel
    ring = ring_seconds_per_micro_batch(model, gpu, columns, seq_len)
    slots = micro_batches + (columns.pipeline_parallel - 1.0) / columns.virtual_stages
    pipeline_seconds = (compute_per_micro_batch + tensor_parallel_per_micro_batch + ring["ring_exposed_s"]) * slots
    data_parallel_seconds = (1.0 - coefficient("data_parallel_overlap_fraction")) * data_parallel_seconds_per_step(
        params_gpu, gpu, columns, micro_batches, case.trainable_fraction, case.frozen_bytes_per_param
    )
    offload_seconds = offload_seconds_per_step(
        params_gpu, gpu, columns, micro_batches, case.trainable_fraction, case.frozen_bytes_per_param
    )
    # The optimizer-state format's step time beyond Adam's, on this GPU's ZeRO shard.
    optimizer_shard = params_gpu * case.trainable_fraction / ParallelLayout.from_columns(columns).optimizer_zero_shards(
        columns.zero_stage
    )
    optimizer_step_seconds_value = optimizer_step_seconds(
        model, gpu, columns, optimizer_shard, PRECISION_BYTES[columns.precision], PRECISION_BYTES[columns.precision]
    )
    step_time = pipeline_seconds + data_parallel_seconds + offload_seconds + optimizer_step_seconds_value

    tokens_per_step = float(case.global_batch * seq_len)
    peak = peak_flops_per_s(gpu, columns.precision)
    with np.errstate(divide="ignore", invalid="ignore"):
        tokens_per_s = tokens_per_step / step_time
        mfu = model_flops_per_token(model, seq_len, case.trainable_fraction) * tokens_per_s / (columns.gpus * peak)
        achieved = (
            hardware_flops_per_token(model, seq_len, columns.checkpoint_kind, columns.flash_attention, case.trainable_fraction)
            * tokens_per_s
            / columns.gpus
        )

    result = dict(memory)
    result.update(
        total_bytes=total,
        capacity_bytes=np.full(len(columns), capacity),
        headroom_fraction=1.0 - total / capacity,
        fits_gpu=fits_gpu,
        host_bytes_per_node=host_per_node,
        nvme_bytes_per_node=nvme_per_node,
        fits_host=fits_host,
        fits_nvme=fits_nvme,
        fits=fits_gpu & fits_host & fits_nvme,
        micro_batches=micro_batches,
        compute_s=compute_per_micro_batch * slots,
        bubble_fraction=(columns.pipeline_parallel - 1.0) / columns.virtual_stages / slots,
        tensor_parallel_s=tensor_parallel_per_micro_batch * slots,
        context_parallel_s=ring["ring_exposed_s"] * slots,
        context_parallel_transfer_s=ring["ring_transfer_s"] * slots,
        data_parallel_s=data_parallel_seconds,
        offload_s=offload_seconds,
        optimizer_step_s=optimizer_step_seconds_value,
        step_time_s=step_time,
        tokens_per_s=tokens_per_s,
        mfu=mfu,
        achieved_flops_per_s_per_gpu=achieved,
    )
    return result
