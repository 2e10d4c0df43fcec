"""The parallelism techniques' exports (gpu, gpus, tp, pp, dp, sequence parallelism, virtual
stages): DeepSpeed notes, Megatron-LM arguments and torchtitan overrides, each the apply
function its ``Contribution.exports`` names in ``constraints/parallelism.py``."""

from __future__ import annotations

from typing import Any

from vramopt.constraints.contribution import ExportDraft
from vramopt.parallel_layout import ParallelLayout


def _tensor_parallel_notes(draft: ExportDraft) -> list[str]:
    degree = draft.plan["tensor_parallel"]
    if degree == 1:
        return []
    return [f"tensor parallel {degree}: not in this config; use Megatron-DeepSpeed "
            f"(--tensor-model-parallel-size {degree}) and pass its mpu to deepspeed.initialize, or, in "
            f"DeepSpeed releases with AutoTP training, add \"tensor_parallel\": {{\"autotp_size\": {degree}}}"]


def _pipeline_parallel_notes(draft: ExportDraft) -> list[str]:
    stages, zero_stage = draft.plan["pipeline_parallel"], draft.plan["zero_stage"]
    if stages == 1:
        return []
    notes = [f"pipeline parallel {stages}: not in this config; build the model as "
             f"deepspeed.pipe.PipelineModule(layers=..., num_stages={stages}) and train with engine.train_batch()"]
    if zero_stage >= 2:
        notes.append(
            f"zero_stage {zero_stage} with pipeline parallelism: DeepSpeed's PipelineEngine refuses ZeRO-2 and ZeRO-3 "
            "('ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism'); run this plan with ZeRO-1 "
            "(unsharded gradients: more memory than the plan counts) or with Megatron-LM's pipeline and distributed optimizer"
        )
    return notes


def _data_parallel_notes(draft: ExportDraft) -> list[str]:
    plan = draft.plan
    layout = ParallelLayout(tensor_parallel=plan["tensor_parallel"], pipeline_parallel=plan["pipeline_parallel"],
                            data_parallel=plan["data_parallel"])
    if layout.model_parallel == 1:
        return []
    return [f"data parallel {plan['data_parallel']}: DeepSpeed takes the data-parallel world size from the model-parallel "
            f"groups (the mpu or PipelineModule); without them it counts all {layout.world_size} GPUs "
            "and train_batch_size no longer matches"]


def _virtual_stages_notes(draft: ExportDraft) -> list[str]:
    chunks = draft.plan["virtual_stages"]
    if chunks == 1:
        return []
    return [f"interleaved pipeline ({chunks} virtual stages per GPU): DeepSpeed's pipeline schedule is plain 1F1B; "
            f"use Megatron-LM --num-layers-per-virtual-pipeline-stage, or expect a larger bubble than the plan's"]


def _sequence_parallel_notes(draft: ExportDraft) -> list[str]:
    if not draft.plan["sequence_parallel"]:
        return []
    return ["sequence parallel: Megatron-style (norm and dropout activations sharded over the tensor-parallel group, "
            "Megatron-DeepSpeed --sequence-parallel); DeepSpeed's own sequence parallelism (Ulysses) is a different scheme"]


def _launch_notes(draft: ExportDraft) -> list[str]:
    plan = draft.plan
    gpu, gpus, nodes = plan["gpu"], plan["gpus"], plan.get("nodes")
    if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes >= 1 and gpus % nodes == 0:
        placement = f" on {nodes} node{'s' if nodes > 1 else ''}"
        command = f"deepspeed --num_nodes {nodes} --num_gpus {gpus // nodes} train.py --deepspeed_config ds_config.json"
    else:
        placement, command = "", "deepspeed --num_nodes M --num_gpus G train.py --deepspeed_config ds_config.json"
    return [f"launch: {gpus} x {gpu}{placement}; the world size comes from the launcher, not the config ({command})"]


def _on_off(value: Any) -> str:
    return "on" if value else "off"


def _megatron_tensor_parallel(draft: ExportDraft) -> list[str]:
    draft.argument("--tensor-model-parallel-size", draft.plan["tensor_parallel"])
    return []


def _megatron_pipeline_parallel(draft: ExportDraft) -> list[str]:
    draft.argument("--pipeline-model-parallel-size", draft.plan["pipeline_parallel"])
    return []


def _torchtitan_tensor_parallel(draft: ExportDraft) -> list[str]:
    draft.argument("--parallelism.tensor_parallel_degree", draft.plan["tensor_parallel"])
    return []


def _torchtitan_pipeline_parallel(draft: ExportDraft) -> list[str]:
    from vramopt.constraints.pipeline_stages import torchtitan_stage_split

    stages = draft.plan["pipeline_parallel"]
    draft.argument("--parallelism.pipeline_parallel_degree", stages)
    if stages > 1:
        draft.argument("--parallelism.pipeline_parallel_layers_per_stage", torchtitan_stage_split(draft.model["layers"], draft.plan)[0])
        # ConfigManager refuses pipeline parallelism with CUDA graphs ("CUDA graphs do not
        # support pipeline parallelism yet"), torchtitan 0.3.0 trainer.py.
        draft.argument("--training.disable_cuda_graphs")
    return []


def _torchtitan_sequence_parallel(draft: ExportDraft) -> list[str]:
    if draft.plan["tensor_parallel"] > 1:
        draft.argument("--parallelism.enable_sequence_parallel" if draft.plan.get("sequence_parallel")
                       else "--parallelism.no-enable-sequence-parallel")
    return []


def _torchtitan_virtual_stages(draft: ExportDraft) -> list[str]:
    if draft.plan["pipeline_parallel"] > 1:
        draft.argument("--parallelism.pipeline_parallel_schedule", "Interleaved1F1B" if draft.plan["virtual_stages"] > 1 else "1F1B")
    return []


def _megatron_sequence_parallel(draft: ExportDraft) -> list[str]:
    if draft.plan.get("sequence_parallel"):
        draft.argument("--sequence-parallel")
    return []


def _megatron_virtual_stages(draft: ExportDraft) -> list[str]:
    if draft.plan["virtual_stages"] > 1:
        draft.argument("--num-virtual-stages-per-pipeline-rank", draft.plan["virtual_stages"])
    return []
