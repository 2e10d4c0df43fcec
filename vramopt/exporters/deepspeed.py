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

from collections.abc import Mapping
from typing import Any

from vramopt.constraints.contribution import ExportDraft
from vramopt.costs.columns import OFFLOAD_NAMES
from vramopt.costs.offload import OFFLOAD_RULES
from vramopt.errors import InputError
from vramopt.frameworks import check_runs, plan_columns
from vramopt.exporters.result import TRAINING_WORKLOADS, ExportResult, checked_plan, fit_notes, required, response_parts, technique_export_notes
from vramopt.parallel_layout import ParallelLayout

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
    checked = checked_plan(plan)  # every technique's value by its declaration; newer keys defaulted
    gpus, data_parallel, micro_batch = checked["gpus"], checked["data_parallel"], checked["micro_batch"]
    accumulation, global_batch, seq_len = checked["grad_accumulation"], checked["global_batch"], checked["seq_len"]
    zero_stage, offload = checked["zero_stage"], checked["offload"]
    layers = required(model, "layers", "model")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise InputError(f"model.layers must be a positive integer, got {layers!r}")

    layout = ParallelLayout.from_mapping(checked)
    if not layout.matches(gpus):
        raise InputError(f"plan.gpus {gpus} is not {layout.product_text()}")
    if layout.sequences_per_micro_step(micro_batch) * accumulation != global_batch:
        raise InputError(
            f"plan.global_batch {global_batch} is not micro_batch x grad_accumulation x data_parallel = "
            f"{micro_batch} x {accumulation} x {data_parallel}, which DeepSpeed requires of train_batch_size"
        )
    for code, lowest, message in OFFLOAD_RULES:  # the rules' one home: costs/offload.py
        if offload == OFFLOAD_NAMES[code] and zero_stage < lowest:
            raise InputError(f"plan.{message}")
    # Never a config DeepSpeed refuses: the enforced rules of vramopt/frameworks/deepspeed.py.
    check_runs("deepspeed", plan_columns(checked), "the plan", enforced_only=True)

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
    # Each technique writes its own keys and notes (its Contribution's DeepSpeed export), in
    # the plan's field order: ZeRO's section exists before offload adds to it.
    draft = ExportDraft(plan=checked, model={**model, "layers": layers}, content=content, setting=_setting)
    notes.extend(technique_export_notes("deepspeed", draft))
    notes.append(f"sequence length {seq_len} tokens: set in the data pipeline and the model, not in the DeepSpeed config")
    if workload in ("lora", "qlora"):
        notes.append(_lora_note(workload, response.get("lora")))
    return ExportResult(content=content, notes=tuple(notes))


def _lora_note(workload: str, lora: Any) -> str:
    detail = ""
    if isinstance(lora, Mapping) and "rank" in lora:
        targets = ",".join(str(target) for target in lora.get("targets", ()))
        detail = f" (rank {lora['rank']}, targets {targets})"
    base = "a 4-bit NF4 frozen base (bitsandbytes) and " if workload == "qlora" else "a frozen base and "
    return f"{workload}: {base}adapters{detail} are set up in code with PEFT; the DeepSpeed config has no LoRA key"
