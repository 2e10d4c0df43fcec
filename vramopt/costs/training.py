"""Training plans evaluated end to end: memory per GPU, step time, tokens/s, MFU.

``evaluate_training`` is the single implementation behind ``estimate``, the solver's
coefficient tables and the exhaustive enumerator. It takes many plans at once
(``PlanColumns``) and returns one numpy array per quantity.

Step time (DESIGN.md section 3), for m micro-batches per step, p stages, v virtual stages:
``(compute + exposed tensor-parallel comm per micro-batch) * (m + (p-1)/v)`` (1F1B, and the
interleaved schedule's bubble (p-1)/(v*m), Narayanan et al. 2021 section 2.2)
``+ pipeline point-to-point + exposed data-parallel comm + offload transfers + optimizer step``.
Compute is operator-level (costs/operators.py: GEMMs by shape, attention core, memory-bound
kernels, recomputation) for the slowest (last) stage; exposed communication in
costs/overlap.py; the activations sent between pipeline stages in costs/pipeline_p2p.py; the
optimizer step in costs/optimizer_step.py. Not modelled: the data loader.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vramopt.costs.activations import activation_shape
from vramopt.costs.coefficients import coefficient
from vramopt.costs.columns import CHECKPOINT_EVERY, PlanColumns
from vramopt.costs.communication import (
    data_parallel_seconds_per_step,
    group_bandwidth,
    tensor_parallel_seconds_per_micro_batch,
)
from vramopt.costs.context_parallel import ring_seconds_per_micro_batch
from vramopt.costs.expert_parallel import all_to_all_seconds_per_micro_batch, moe_tensor_parallel_adjustment_s
from vramopt.costs.compute import (
    hardware_flops_per_token,
    micro_batch_operator_times,
    model_flops_per_token,
    peak_flops_per_s,
)
from vramopt.costs.memory import (
    activation_bytes,
    in_flight_micro_batches,
    logits_bytes,
    model_state_bytes,
    offloaded_bytes_per_gpu,
    parameters_per_gpu,
    sharded_parameters_per_gpu,
)
from vramopt.costs.offload import offload_seconds_per_step
from vramopt.costs.expert_overlap import exposed_all_to_all_seconds, extra_activation_bytes
from vramopt.costs.hybrid_shard import replica_all_reduce_seconds
from vramopt.costs.optimizer_step import local_ddp_scale_seconds, optimizer_step_seconds, unfused_accumulation_seconds
from vramopt.costs.operators import eager_elementwise_extra_seconds, sdpa_attention_extra_seconds
from vramopt.costs.overlap import exposed_data_parallel_seconds, exposed_tensor_parallel_seconds
from vramopt.costs.pipeline_p2p import pipeline_p2p_seconds
from vramopt.costs.recompute_regather import recompute_regather_transfer_seconds
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
    data_parallel_overlap: bool = True
    """The framework reduces gradients in buckets during the backward (PyTorch DDP/FSDP,
    DeepSpeed ``overlap_comm``, Megatron-Core ``overlap_grad_reduce``); False for a framework
    that reduces after the backward (Megatron-LM's 2021-2022 local DDP). costs/overlap.py."""
    tensor_parallel_overlap: bool = False
    """The framework overlaps tensor-parallel collectives with the GEMMs they feed
    (Megatron-Core ``--tp-comm-overlap``, torchtitan async TP). costs/overlap.py."""
    framework: str = "generic"
    """Whose model-state accounting applies (vramopt/frameworks/memory.py): 'generic',
    'deepspeed', 'megatron' or 'torchtitan'."""
    tensor_parallel_backward_overlap: bool = False
    """Megatron-LM's asynchronous input-gradient all-reduce / reduce-scatter of the column-parallel
    linears beside their weight-gradient GEMMs (``--async-tensor-model-parallel-allreduce``, on by
    default since September 2021). costs/overlap.py."""
    fp32_gradient_buffer: bool = False
    """Gradients accumulate in an fp32 buffer that the step reads, zeroes and follows with a
    separate master-to-model copy (Megatron-LM with bf16). costs/optimizer_step.py."""
    unfused_gradient_accumulation: bool = False
    """Gradients of micro-batches after the first are added to the accumulated ones in a separate
    elementwise pass (PyTorch autograd; Megatron-LM 2021 in fp16) instead of inside the
    weight-gradient GEMM; its time is counted with the optimizer step. costs/optimizer_step.py."""
    parameter_gather_overlap: bool = False
    """ZeRO 1-2's parameter all-gather runs beside the next step's first forward (Megatron-Core
    distributed optimizer ``--overlap-param-gather``). costs/overlap.py."""
    pipeline_p2p_overlap: bool = False
    """The framework overlaps the pipeline's point-to-point transfers with compute (Megatron-Core
    ``--overlap-p2p-communication``, interleaved schedule only). costs/pipeline_p2p.py."""
    eager_kernels: bool = False
    """The norms, activation, rotary and loss run as separate eager PyTorch kernels (torchtitan
    without torch.compile) rather than fused ones (costs/operators.py eager_elementwise_extra_seconds)."""
    recompute_regathers_parameters: bool = False
    """ZeRO-3 gathers the parameters again for the recomputed forward (DeepSpeed; always under
    framework 'deepspeed'): costs/recompute_regather.py."""
    compiled_loss: bool = False
    """The cross-entropy is compiled (torchtitan ``compile.components`` with "loss"): it keeps the
    bf16 logits and their gradient instead of the eager fp32 buffers (frameworks/torchtitan_activations.py)."""
    loss_chunks: int = 1
    """The output projection and loss run over this many sequence chunks, each chunk's backward
    inside the forward (torchtitan 0.3.0 ``ChunkedLossWrapper``, 8 in its Llama 3 and DeepSeek-V3
    configs; 1 for the runs before it, whose loss saw the whole micro-batch's logits at once)."""


def micro_batches_per_step(case: TrainingCase, columns: PlanColumns) -> np.ndarray:
    return ParallelLayout.from_columns(columns).micro_batches(case.global_batch, columns.micro_batch)


def gpus_on_busiest_node(case: TrainingCase, columns: PlanColumns) -> np.ndarray:
    return np.minimum(columns.gpus, case.gpu.node.gpus_per_node)


def evaluate_training(case: TrainingCase, columns: PlanColumns) -> dict[str, np.ndarray]:
    model, gpu, seq_len = case.model, case.gpu, case.seq_len
    layout = ParallelLayout.from_columns(columns)
    micro_batches = layout.micro_batches(case.global_batch, columns.micro_batch)
    memory = model_state_bytes(model, columns, case.trainable_fraction, case.frozen_bytes_per_param)
    if case.framework != "generic":
        from vramopt.frameworks.memory import framework_model_state_bytes

        memory = framework_model_state_bytes(case.framework, model, columns, parameters_per_gpu(model, columns), memory,
                                             case.trainable_fraction, case.frozen_bytes_per_param)
    # Context parallelism: each rank keeps s/cp tokens of every activation and of the logits
    # (linear in s: cp > 1 needs flash attention, so no s^2 score term is kept).
    rank_tokens = layout.tokens_per_rank(seq_len)
    memory["activations_bytes"] = activation_bytes(model, activation_shape(model), columns, rank_tokens, micro_batches)
    memory["activations_bytes"] = memory["activations_bytes"] + extra_activation_bytes(memory["activations_bytes"], columns, micro_batches)
    memory["logits_bytes"] = logits_bytes(model, columns, rank_tokens)
    if case.framework == "torchtitan":  # its per-op selective AC and loss buffers (frameworks/torchtitan_activations.py)
        from vramopt.frameworks.torchtitan_activations import torchtitan_activation_terms

        memory.update(torchtitan_activation_terms(model, columns, rank_tokens, in_flight_micro_batches(columns, micro_batches),
                                                  micro_batches, memory, compiled_loss=case.compiled_loss,
                                                  loss_chunks=case.loss_chunks))
        if case.loss_chunks > 1:
            from vramopt.frameworks.torchtitan_activations import chunked_loss_head_gradient_bytes

            memory["gradients_bytes"] = memory["gradients_bytes"] + chunked_loss_head_gradient_bytes(model, columns)
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
    # Operator-level time of one micro-batch on one GPU of the last stage and one cp rank
    # (costs/operators.py); the tp collectives move each cp rank's s/cp tokens.
    operators = micro_batch_operator_times(
        model, gpu, columns, seq_len, case.trainable_fraction, case.compute_overhead_fraction
    )
    compute_per_micro_batch = np.where(peak_flops_per_s(gpu, columns.precision) > 0, operators["compute_s"], np.inf)
    if case.eager_kernels:
        compute_per_micro_batch = compute_per_micro_batch + eager_elementwise_extra_seconds(model, gpu, columns, seq_len)
    if case.framework == "torchtitan":
        from vramopt.frameworks.torchtitan_activations import selective_recompute_seconds

        compute_per_micro_batch = compute_per_micro_batch + selective_recompute_seconds(model, gpu, columns, seq_len)
        # torchtitan's attention is torch SDPA / FlexAttention: FlashAttention-2-class kernels.
        compute_per_micro_batch = compute_per_micro_batch + sdpa_attention_extra_seconds(model, gpu, columns, seq_len)
    tensor_parallel_total = (tensor_parallel_seconds_per_micro_batch(model, gpu, columns, seq_len)
                             + moe_tensor_parallel_adjustment_s(model, gpu, columns, seq_len)) / layout.activation_token_shards()
    tensor_parallel_per_micro_batch = exposed_tensor_parallel_seconds(
        tensor_parallel_total, operators["linear_s"], case.tensor_parallel_overlap, case.tensor_parallel_backward_overlap,
        columns.sequence_parallel, columns.checkpoint_kind == CHECKPOINT_EVERY, operators["column_weight_gradient_s"],
    )
    ring = ring_seconds_per_micro_batch(model, gpu, columns, seq_len)
    slots = layout.pipeline_slots(micro_batches, columns.virtual_stages)
    expert = all_to_all_seconds_per_micro_batch(model, gpu, columns, seq_len)  # 0 without expert parallelism
    expert = exposed_all_to_all_seconds(expert, compute_per_micro_batch, columns, micro_batches)  # combined 1F1B
    pipeline_seconds = (compute_per_micro_batch + tensor_parallel_per_micro_batch + ring["ring_exposed_s"] + expert) * slots
    # Activations and their gradients between stages (0 at pp = 1): on the schedule's
    # critical path unless the framework overlaps them (costs/pipeline_p2p.py).
    p2p = pipeline_p2p_seconds(model, gpu, columns, seq_len, micro_batches, compute_per_micro_batch, case.pipeline_p2p_overlap)
    data_parallel_total = data_parallel_seconds_per_step(
        params_gpu, gpu, columns, micro_batches, case.trainable_fraction, case.frozen_bytes_per_param
    ) + replica_all_reduce_seconds(params_gpu, gpu, columns, micro_batches, case.trainable_fraction)  # hybrid sharding
    data_parallel_bandwidth = group_bandwidth(gpu, layout.sharding_group, layout.group_span("sharding"))
    # The collectives hide behind the GEMMs of the backward (ZeRO 0-2) or of each micro-batch
    # (ZeRO-3). GEMM time depends only on the key (gpu, layout, precision, micro-batch), not on
    # checkpointing or flash attention, so the step time stays a state part plus an activation
    # part, the split the solver's tables add (tests/unit/test_separability.py).
    data_parallel_seconds = exposed_data_parallel_seconds(
        data_parallel_total, data_parallel_bandwidth, operators["linear_backward_s"], operators["linear_s"],
        micro_batches, columns.zero_stage, case.data_parallel_overlap, case.parameter_gather_overlap,
    )
    # ZeRO-3 under DeepSpeed gathers again for a full recomputation (costs/recompute_regather.py):
    # exposed as the step's data-parallel traffic is, with the same window. The term couples the
    # ZeRO stage (state) with checkpointing (activation), so it is computed for every row as if
    # the plan recomputed (``recompute_regather_if_full_s``, a key x state quantity) and the
    # solver adds it to the plans whose activation item recomputes (optimizer/interaction.py).
    regather_if_full = np.zeros(len(columns))
    if case.recompute_regathers_parameters or case.framework == "deepspeed":
        regather_transfer = recompute_regather_transfer_seconds(
            model, gpu, columns, micro_batches, layout.sharding_group, data_parallel_bandwidth,
            case.trainable_fraction, case.frozen_bytes_per_param)
        regather_if_full = exposed_data_parallel_seconds(
            data_parallel_total + regather_transfer, data_parallel_bandwidth, operators["linear_backward_s"], operators["linear_s"],
            micro_batches, columns.zero_stage, case.data_parallel_overlap, case.parameter_gather_overlap,
        ) - data_parallel_seconds
    recompute_regather = np.where(columns.checkpoint_kind == CHECKPOINT_EVERY, regather_if_full, 0.0)
    # ZeRO shards (and what offload moves) are cut from the parameters without expert
    # parallelism: expert states shard over dp x cp / ep (costs/expert_parallel.py).
    sharded_gpu = sharded_parameters_per_gpu(model, columns)
    offload_seconds = offload_seconds_per_step(
        sharded_gpu, gpu, columns, micro_batches, case.trainable_fraction, case.frozen_bytes_per_param
    )
    # The optimizer step and the gradient-norm pass on this GPU's ZeRO shard (costs/optimizer_step.py).
    optimizer_shard = sharded_gpu * case.trainable_fraction / layout.optimizer_zero_shards(columns.zero_stage)
    optimizer_step_seconds_value = optimizer_step_seconds(
        model, gpu, columns, optimizer_shard, PRECISION_BYTES[columns.precision], PRECISION_BYTES[columns.precision],
        case.fp32_gradient_buffer,
    )
    if case.unfused_gradient_accumulation:
        optimizer_step_seconds_value = optimizer_step_seconds_value + unfused_accumulation_seconds(
            gpu, params_gpu * case.trainable_fraction, PRECISION_BYTES[columns.precision], micro_batches)
    if not case.data_parallel_overlap:  # Megatron-LM's local DDP scales its gradient buffer in place
        gradient_bytes = np.maximum(PRECISION_BYTES[columns.precision], 4.0) if case.fp32_gradient_buffer else PRECISION_BYTES[columns.precision]
        optimizer_step_seconds_value = optimizer_step_seconds_value + local_ddp_scale_seconds(
            gpu, params_gpu * case.trainable_fraction, gradient_bytes)
    step_time = (pipeline_seconds + p2p["exposed_s"] + data_parallel_seconds + offload_seconds + optimizer_step_seconds_value
                 + recompute_regather)

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
        expert_parallel_s=expert * slots,
        pipeline_parallel_s=p2p["exposed_s"],
        pipeline_parallel_transfer_s=p2p["transfer_s"],
        data_parallel_s=data_parallel_seconds,
        data_parallel_transfer_s=data_parallel_total,
        recompute_regather_s=recompute_regather,
        recompute_regather_if_full_s=regather_if_full,
        tensor_parallel_transfer_s=tensor_parallel_total * slots,
        offload_s=offload_seconds,
        optimizer_step_s=optimizer_step_seconds_value,
        step_time_s=step_time,
        tokens_per_s=tokens_per_s,
        mfu=mfu,
        achieved_flops_per_s_per_gpu=achieved,
    )
    return result
