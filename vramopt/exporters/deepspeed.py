"""A DeepSpeed configuration JSON from a training plan.

``deepspeed_config(response)`` reads a "vramopt/v1" training response (from ``estimate`` or
``solve``) and writes the ``ds_config.json`` that ``deepspeed.initialize(config=...)``
reads, using only the keys of DeepSpeed's configuration documentation
(https://www.deepspeed.ai/docs/config-json/, docs/_pages/config-json.md in
deepspeedai/DeepSpeed; the keys are listed in tests/fixtures/exporters/deepspeed_documented_keys.json).

What the JSON cannot say goes to the notes: tensor, pipeline and sequence parallelism and
the interleaved schedule (model code: Megatron-DeepSpeed, AutoTP, ``PipelineModule``),
FlashAttention, FP8/FP4 compute and FP8 gradients on the wire, selective recomputation,
where the model calls the checkpointing API, the launch (GPU count and nodes), LoRA, and the
placeholder NVMe path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vramopt.constraints.context_parallel import CONTEXT_PARALLEL
from vramopt.constraints.optimizer_format import OPTIMIZER
from vramopt.costs.columns import CHECKPOINT_NONE, CHECKPOINT_SELECTIVE, OFFLOAD_NAMES
from vramopt.costs.offload import OFFLOAD_RULES
from vramopt.costs.optimizer_states import OPTIMIZER_NAMES
from vramopt.errors import InputError
from vramopt.frameworks import check_runs, plan_columns
from vramopt.exporters.result import TRAINING_WORKLOADS, ExportResult, fit_notes, one_of, positive_integer, required, response_parts
from vramopt.parallel_layout import ParallelLayout
from vramopt.plan import parse_checkpointing
from vramopt.types import PRECISIONS

_DOCS = "DeepSpeed config-json documentation"

SETTINGS: dict[str, tuple[Any, str]] = {
    "gradient_clipping": (1.0, "assumption: clip the global gradient norm at 1.0, as Llama 2 pretraining did (Touvron et al. 2023, section 2.2)"),
    "steps_per_print": (10, f"{_DOCS}: steps_per_print default"),
    "overlap_comm": (True, "assumption: the cost model overlaps the data-parallel reduction with backward (costs.coefficients), which is what overlap_comm does; documented default false"),
    "contiguous_gradients": (True, f"{_DOCS}: zero_optimization.contiguous_gradients default"),
    "reduce_scatter": (True, f"{_DOCS}: zero_optimization.reduce_scatter default"),
    "allgather_partitions": (True, f"{_DOCS}: zero_optimization.allgather_partitions default"),
    "reduce_bucket_size": (500_000_000, f"{_DOCS}: zero_optimization.reduce_bucket_size default 5e8 elements"),
    "allgather_bucket_size": (500_000_000, f"{_DOCS}: zero_optimization.allgather_bucket_size default 5e8 elements"),
    "stage3_prefetch_bucket_size": (500_000_000, f"{_DOCS}: stage3_prefetch_bucket_size default 5e8"),
    "stage3_param_persistence_threshold": (100_000, f"{_DOCS}: stage3_param_persistence_threshold default 1e5"),
    "stage3_max_live_parameters": (1_000_000_000, f"{_DOCS}: stage3_max_live_parameters default 1e9"),
    "stage3_max_reuse_distance": (1_000_000_000, f"{_DOCS}: stage3_max_reuse_distance default 1e9"),
    "sub_group_size": (1_000_000_000, f"{_DOCS}: sub_group_size default 1e9"),
    "stage3_gather_16bit_weights_on_model_save": (True, "assumption: lets engine.save_16bit_model() write a whole checkpoint from ZeRO-3 shards"),
    "loss_scale": (0, f"{_DOCS}: fp16.loss_scale default 0 = dynamic loss scaling"),
    "initial_scale_power": (16, f"{_DOCS}: fp16.initial_scale_power default"),
    "loss_scale_window": (1000, f"{_DOCS}: fp16.loss_scale_window default"),
    "hysteresis": (2, f"{_DOCS}: fp16.hysteresis default"),
    "min_loss_scale": (1, f"{_DOCS}: fp16.min_loss_scale default"),
    "pin_memory": (True, f"{_DOCS}: offload_optimizer/offload_param.pin_memory default (pinned host memory for full-bandwidth DMA)"),
    "optimizer_buffer_count": (4, f"{_DOCS}: offload_optimizer.buffer_count default (Adam: parameter, gradient, momentum, variance)"),
    "param_buffer_count": (5, f"{_DOCS}: offload_param.buffer_count default"),
    "param_buffer_size": (100_000_000, f"{_DOCS}: offload_param.buffer_size default 1e8"),
    "max_in_cpu": (1_000_000_000, f"{_DOCS}: offload_param.max_in_cpu default 1e9"),
    "aio_block_size": (1_048_576, f"{_DOCS}: aio.block_size default (bytes)"),
    "aio_queue_depth": (8, f"{_DOCS}: aio.queue_depth default"),
    "aio_thread_count": (1, f"{_DOCS}: aio.thread_count default"),
}
"""Every number and switch the exporter writes that the plan does not decide, with its source."""

NVME_PATH_PLACEHOLDER = "/local_nvme"
"""DeepSpeed's documented default nvme_path; a placeholder the user must point at a local NVMe mount."""

COMMUNICATION_DATA_TYPES = ("fp16", "bf16", "fp32")
"""What communication_data_type accepts (deepspeed/runtime/config.py, get_communication_data_type)."""

OFFLOADS = ("none", "cpu", "nvme")


def _setting(name: str) -> Any:
    return SETTINGS[name][0]


def deepspeed_config(response: Mapping[str, Any]) -> ExportResult:
    """The DeepSpeed configuration of a training plan, and the notes on what it cannot say.

    Parameters
    ----------
    response
        A "vramopt/v1" training response: ``TrainingEstimate.to_dict()`` or the output of
        ``solve`` for a training workload (``train``, ``finetune``, ``lora``, ``qlora``).

    Returns
    -------
    ExportResult
        ``content`` is the DeepSpeed config; ``text()`` its JSON; ``notes`` one line per
        plan choice DeepSpeed's config cannot express.

    Raises
    ------
    InputError
        A serving response, a response without a plan, a missing key, or a value outside
        the contract (the message names the key).
    """
    workload, plan, model = response_parts(response, "deepspeed_config", TRAINING_WORKLOADS)
    gpus = positive_integer(plan, "gpus")
    tensor_parallel = positive_integer(plan, "tensor_parallel")
    # Responses written before context parallelism existed have no such key: cp = 1.
    context_parallel = positive_integer(plan, "context_parallel") if "context_parallel" in plan else 1
    pipeline_parallel = positive_integer(plan, "pipeline_parallel")
    data_parallel = positive_integer(plan, "data_parallel")
    virtual_stages = positive_integer(plan, "virtual_stages")
    micro_batch = positive_integer(plan, "micro_batch")
    accumulation = positive_integer(plan, "grad_accumulation")
    global_batch = positive_integer(plan, "global_batch")
    seq_len = positive_integer(plan, "seq_len")
    sequence_parallel = one_of(plan, "sequence_parallel", (True, False))
    flash_attention = one_of(plan, "flash_attention", (True, False))
    zero_stage = one_of(plan, "zero_stage", (0, 1, 2, 3))
    precision = one_of(plan, "precision", PRECISIONS)
    grad_comm_precision = one_of(plan, "grad_comm_precision", PRECISIONS)
    offload = one_of(plan, "offload", OFFLOADS)
    checkpointing = required(plan, "checkpointing", "plan")
    try:
        checkpoint_kind, checkpoint_every = parse_checkpointing(checkpointing)
    except InputError as error:
        raise InputError(f"plan.checkpointing: {error}") from None
    layers = required(model, "layers", "model")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise InputError(f"model.layers must be a positive integer, got {layers!r}")

    layout = ParallelLayout(tensor_parallel=tensor_parallel, context_parallel=context_parallel,
                            pipeline_parallel=pipeline_parallel, data_parallel=data_parallel)
    if not layout.matches(gpus):
        raise InputError(
            f"plan.gpus {gpus} is not tensor_parallel x context_parallel x pipeline_parallel x data_parallel = "
            f"{tensor_parallel} x {context_parallel} x {pipeline_parallel} x {data_parallel}"
            if context_parallel > 1
            else f"plan.gpus {gpus} is not tensor_parallel x pipeline_parallel x data_parallel = "
            f"{tensor_parallel} x {pipeline_parallel} x {data_parallel}"
        )
    if layout.sequences_per_micro_step(micro_batch) * accumulation != global_batch:
        raise InputError(
            f"plan.global_batch {global_batch} is not micro_batch x grad_accumulation x data_parallel = "
            f"{micro_batch} x {accumulation} x {data_parallel}, which DeepSpeed requires of train_batch_size"
        )
    for code, lowest, message in OFFLOAD_RULES:  # the rules' one home: costs/offload.py
        if offload == OFFLOAD_NAMES[code] and zero_stage < lowest:
            raise InputError(f"plan.{message}")
    # Never a config DeepSpeed refuses: the enforced rules of vramopt/frameworks/deepspeed.py.
    check_runs("deepspeed", plan_columns({**plan, "context_parallel": context_parallel}), "the plan", enforced_only=True)

    notes: list[str] = fit_notes(response)
    content: dict[str, Any] = {
        # DeepSpeed's rule: train_batch_size = micro x accumulation x data-parallel world size.
        "train_batch_size": global_batch,
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": accumulation,
        "gradient_clipping": _setting("gradient_clipping"),
        "steps_per_print": _setting("steps_per_print"),
        "wall_clock_breakdown": False,
    }
    content.update(_precision(precision, notes))
    communication = _communication(precision, grad_comm_precision, notes)
    if communication is not None:
        content["communication_data_type"] = communication
    content["zero_optimization"] = _zero(zero_stage, offload, notes)
    if offload == "nvme":
        content["aio"] = {
            "block_size": _setting("aio_block_size"),
            "queue_depth": _setting("aio_queue_depth"),
            "thread_count": _setting("aio_thread_count"),
            "single_submit": False,
            "overlap_events": True,
        }
    checkpoint_section = _activation_checkpointing(
        checkpoint_kind, checkpoint_every, layers, pipeline_parallel, sequence_parallel, notes
    )
    if checkpoint_section is not None:
        content["activation_checkpointing"] = checkpoint_section

    _parallelism_notes(tensor_parallel, pipeline_parallel, data_parallel, sequence_parallel, virtual_stages, zero_stage, notes)
    notes.extend(CONTEXT_PARALLEL.contribution.exports["deepspeed"].apply({**plan, "context_parallel": context_parallel}, content))
    notes.append(_flash_attention_note(flash_attention))
    notes.append(
        f"sequence length {seq_len} tokens: set in the data pipeline and the model, not in the DeepSpeed config"
    )
    notes.append(_launch_note(plan["gpu"], gpus, plan.get("nodes")))
    optimizer = one_of(plan, "optimizer", OPTIMIZER_NAMES) if "optimizer" in plan else "adam"  # older responses: adam
    notes.extend(OPTIMIZER.contribution.exports["deepspeed"].apply({**plan, "optimizer": optimizer}, content))
    if workload in ("lora", "qlora"):
        notes.append(_lora_note(workload, response.get("lora")))
    return ExportResult(content=content, notes=tuple(notes))


def _precision(precision: str, notes: list[str]) -> dict[str, Any]:
    if precision == "bf16":
        return {"bf16": {"enabled": True}}
    if precision == "fp16":
        return {
            "fp16": {
                "enabled": True,
                "loss_scale": _setting("loss_scale"),
                "initial_scale_power": _setting("initial_scale_power"),
                "loss_scale_window": _setting("loss_scale_window"),
                "hysteresis": _setting("hysteresis"),
                "min_loss_scale": _setting("min_loss_scale"),
            }
        }
    if precision == "fp32":
        return {}  # neither fp16 nor bf16 enabled: DeepSpeed trains in fp32
    # fp8 and fp4: the config has no switch; bf16 is the precision around the low-precision GEMMs.
    library = "Transformer Engine (te.fp8_autocast) or MS-AMP" if precision == "fp8" else "Transformer Engine's NVFP4 recipe"
    notes.append(
        f"precision {precision}: the DeepSpeed config has no {precision} switch; bf16 is enabled and the "
        f"{precision} matrix multiplications come from {library} in the model code"
    )
    return {"bf16": {"enabled": True}}


def _communication(precision: str, grad_comm_precision: str, notes: list[str]) -> str | None:
    """communication_data_type when the wire precision differs from DeepSpeed's default (the
    training dtype), or None."""
    regime = "bf16" if precision in ("fp8", "fp4") else precision
    if grad_comm_precision == regime:
        return None
    if grad_comm_precision in COMMUNICATION_DATA_TYPES:
        return grad_comm_precision
    notes.append(
        f"grad_comm_precision {grad_comm_precision}: DeepSpeed's communication_data_type takes only "
        f"{', '.join(COMMUNICATION_DATA_TYPES)}; gradients travel in {regime}, twice or more the bytes the plan "
        "assumed, so the data-parallel time is optimistic (ZeRO++ zero_quantized_gradients is a different, int4 scheme)"
    )
    return None


def _zero(zero_stage: int, offload: str, notes: list[str]) -> dict[str, Any]:
    section: dict[str, Any] = {"stage": zero_stage}
    if zero_stage == 0:
        return section
    for name in ("overlap_comm", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size",
                 "allgather_partitions", "allgather_bucket_size"):
        section[name] = _setting(name)
    if zero_stage == 3:
        for name in ("stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                     "stage3_max_live_parameters", "stage3_max_reuse_distance", "sub_group_size",
                     "stage3_gather_16bit_weights_on_model_save"):
            section[name] = _setting(name)
    if offload == "cpu":
        section["offload_optimizer"] = {"device": "cpu", "pin_memory": _setting("pin_memory")}
        notes.append(
            "offload cpu: optimizer states and the optimizer step move to host RAM (ZeRO-Offload), "
            "which runs DeepSpeedCPUAdam; use the Adam or AdamW optimizer type"
        )
    elif offload == "nvme":
        section["offload_optimizer"] = {
            "device": "nvme",
            "nvme_path": NVME_PATH_PLACEHOLDER,
            "pin_memory": _setting("pin_memory"),
            "buffer_count": _setting("optimizer_buffer_count"),
            "fast_init": False,
        }
        section["offload_param"] = {
            "device": "nvme",
            "nvme_path": NVME_PATH_PLACEHOLDER,
            "pin_memory": _setting("pin_memory"),
            "buffer_count": _setting("param_buffer_count"),
            "buffer_size": _setting("param_buffer_size"),
            "max_in_cpu": _setting("max_in_cpu"),
        }
        notes.append(
            f"offload nvme: set nvme_path (placeholder '{NVME_PATH_PLACEHOLDER}', in offload_optimizer and "
            "offload_param) to a local NVMe mount on every node, and tune the 'aio' section for it "
            "(ZeRO-Infinity; the optimizer step runs on the CPU with DeepSpeedCPUAdam)"
        )
    return section


def _activation_checkpointing(
    kind: int, every: int, layers: int, pipeline_parallel: int, sequence_parallel: bool, notes: list[str]
) -> dict[str, Any] | None:
    if kind == CHECKPOINT_NONE:
        return None
    if kind == CHECKPOINT_SELECTIVE:
        notes.append(
            "checkpointing selective (recompute the attention core only) is a Megatron-LM notion "
            "(--recompute-granularity selective) with no DeepSpeed config key; use Megatron-DeepSpeed, "
            "or FlashAttention, whose backward already recomputes the attention scores"
        )
        return None
    layers_per_stage = math.ceil(layers / pipeline_parallel)
    notes.append(
        f"checkpointing every:{every}: DeepSpeed recomputes only where the model calls "
        f"deepspeed.checkpointing.checkpoint; wrap each block of {every} layer{'s' if every > 1 else ''} in one call "
        f"(PipelineModule(activation_checkpoint_interval={every}) with pipeline parallelism, "
        "Megatron-DeepSpeed --checkpoint-activations; a Hugging Face model's gradient_checkpointing_enable() is every:1)"
    )
    return {
        # Shard the checkpointed inputs over the tensor-parallel group: what sequence
        # parallelism does to them in the plan's activation model (Korthikanti et al. 2022).
        "partition_activations": bool(sequence_parallel),
        "cpu_checkpointing": False,
        "contiguous_memory_optimization": False,
        # Checkpoints one GPU holds: its pipeline stage's layers, one per block of K.
        "number_checkpoints": math.ceil(layers_per_stage / every),
        "synchronize_checkpoint_boundary": False,
        "profile": False,
    }


def _parallelism_notes(
    tensor_parallel: int, pipeline_parallel: int, data_parallel: int, sequence_parallel: bool,
    virtual_stages: int, zero_stage: int, notes: list[str],
) -> None:
    layout = ParallelLayout(tensor_parallel=tensor_parallel, pipeline_parallel=pipeline_parallel, data_parallel=data_parallel)
    model_parallel = layout.model_parallel
    if tensor_parallel > 1:
        notes.append(
            f"tensor parallel {tensor_parallel}: not in this config; use Megatron-DeepSpeed "
            f"(--tensor-model-parallel-size {tensor_parallel}) and pass its mpu to deepspeed.initialize, or, in "
            f"DeepSpeed releases with AutoTP training, add \"tensor_parallel\": {{\"autotp_size\": {tensor_parallel}}}"
        )
    if pipeline_parallel > 1:
        notes.append(
            f"pipeline parallel {pipeline_parallel}: not in this config; build the model as "
            f"deepspeed.pipe.PipelineModule(layers=..., num_stages={pipeline_parallel}) and train with engine.train_batch()"
        )
        if zero_stage >= 2:
            notes.append(
                f"zero_stage {zero_stage} with pipeline parallelism: DeepSpeed's PipelineEngine refuses ZeRO-2 and ZeRO-3 "
                "('ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism'); run this plan with ZeRO-1 "
                "(unsharded gradients: more memory than the plan counts) or with Megatron-LM's pipeline and distributed optimizer"
            )
    if virtual_stages > 1:
        notes.append(
            f"interleaved pipeline ({virtual_stages} virtual stages per GPU): DeepSpeed's pipeline schedule is plain 1F1B; "
            f"use Megatron-LM --num-layers-per-virtual-pipeline-stage, or expect a larger bubble than the plan's"
        )
    if sequence_parallel:
        notes.append(
            "sequence parallel: Megatron-style (norm and dropout activations sharded over the tensor-parallel group, "
            "Megatron-DeepSpeed --sequence-parallel); DeepSpeed's own sequence parallelism (Ulysses) is a different scheme"
        )
    if model_parallel > 1:
        notes.append(
            f"data parallel {data_parallel}: DeepSpeed takes the data-parallel world size from the model-parallel "
            f"groups (the mpu or PipelineModule); without them it counts all {layout.world_size} GPUs "
            "and train_batch_size no longer matches"
        )


def _launch_note(gpu: str, gpus: int, nodes: Any) -> str:
    if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes >= 1 and gpus % nodes == 0:
        placement = f" on {nodes} node{'s' if nodes > 1 else ''}"
        command = f"deepspeed --num_nodes {nodes} --num_gpus {gpus // nodes} train.py --deepspeed_config ds_config.json"
    else:
        placement, command = "", "deepspeed --num_nodes M --num_gpus G train.py --deepspeed_config ds_config.json"
    return f"launch: {gpus} x {gpu}{placement}; the world size comes from the launcher, not the config ({command})"


def _flash_attention_note(flash_attention: bool) -> str:
    if flash_attention:
        return (
            "FlashAttention: chosen in the model code (Hugging Face attn_implementation='flash_attention_2' or 'sdpa', "
            "Megatron-DeepSpeed --use-flash-attn), not in the DeepSpeed config"
        )
    return (
        "no FlashAttention: the plan stores the attention scores (s^2 per head); use the model's eager attention "
        "(FlashAttention or SDPA would only use less memory than the plan counts)"
    )


def _lora_note(workload: str, lora: Any) -> str:
    detail = ""
    if isinstance(lora, Mapping) and "rank" in lora:
        targets = ",".join(str(target) for target in lora.get("targets", ()))
        detail = f" (rank {lora['rank']}, targets {targets})"
    base = "a 4-bit NF4 frozen base (bitsandbytes) and " if workload == "qlora" else "a frozen base and "
    return f"{workload}: {base}adapters{detail} are set up in code with PEFT; the DeepSpeed config has no LoRA key"
