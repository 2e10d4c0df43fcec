"""Activation checkpointing: none, selective (attention core recomputed, Korthikanti et al.
2022), or full recomputation with a checkpoint every k layers for each k dividing the
layers of a pipeline stage (filtered per layout).

Its memory term is the checkpoint and recomputation-buffer share of
``costs/memory.activation_bytes`` (the one place the activation coupling of tp, sp, cp,
checkpointing, flash attention and the pipeline schedule is written); its time term the
recomputed FLOPs of ``costs/compute.recompute_flops_per_token``.
"""

from __future__ import annotations

import math

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft
from vramopt.constraints.parallelism import divisors
from vramopt.constraints.technique import PlanField, Technique
from vramopt.costs.pipeline_stages import fewest_layers_on_a_stage, stage_counts
from vramopt.costs.columns import CHECKPOINT_EVERY, CHECKPOINT_NONE, CHECKPOINT_SELECTIVE
from vramopt.costs.compute import recompute_flops_per_token
from vramopt.costs.memory import activation_bytes
from vramopt.errors import InputError
from vramopt.types import MAX_COUNT


def parse_checkpointing(text: str) -> tuple[int, int]:
    """'none' -> (0, 0); 'selective' -> (1, 0); 'every:K' / 'full' -> (2, K)."""
    value = str(text).strip().lower()
    if value == "none":
        return CHECKPOINT_NONE, 0
    if value == "selective":
        return CHECKPOINT_SELECTIVE, 0
    if value == "full":
        return CHECKPOINT_EVERY, 1
    if value.startswith("every:"):
        try:
            every = int(value.split(":", 1)[1])
        except ValueError:
            every = 0
        if 1 <= every <= MAX_COUNT:
            return CHECKPOINT_EVERY, every
    raise InputError(f"checkpointing '{text}' is not one of none, selective, full, every:K (K a positive integer)")


def checkpointing_name(kind: int, every: int) -> str:
    if kind == CHECKPOINT_NONE:
        return "none"
    if kind == CHECKPOINT_SELECTIVE:
        return "selective"
    return f"every:{every}"


def _parse(text: str) -> str:
    kind, every = parse_checkpointing(text)
    return checkpointing_name(kind, every)


def _default_values(context) -> tuple[str, ...]:
    return ("none", "selective") + tuple(f"every:{k}" for k in divisors(context.layers))


def _columns(value: str) -> dict[str, int]:
    kind, every = parse_checkpointing(value)
    return {"checkpoint_kind": kind, "checkpoint_every": every}


def checkpointing_invalid_reasons(case, columns) -> dict:
    return {
        "checkpointing every k needs 1 <= k <= layers per stage": (columns.checkpoint_kind == CHECKPOINT_EVERY)
        & ((columns.checkpoint_every < 1) | (columns.checkpoint_every > fewest_layers_on_a_stage(case.model, columns))),
    }


def _deepspeed(draft: ExportDraft) -> list[str]:
    kind, every = parse_checkpointing(draft.plan["checkpointing"])
    if kind == CHECKPOINT_NONE:
        return []
    if kind == CHECKPOINT_SELECTIVE:
        return ["checkpointing selective (recompute the attention core only) is a Megatron-LM notion "
                "(--recompute-granularity selective) with no DeepSpeed config key; use Megatron-DeepSpeed, "
                "or FlashAttention, whose backward already recomputes the attention scores"]
    layers_per_stage = max(stage_counts(draft.model["layers"], draft.plan["pipeline_parallel"],
                                        draft.plan.get("first_stage_layers", 0), draft.plan.get("last_stage_layers", 0)))
    draft.content["activation_checkpointing"] = {
        # Shard the checkpointed inputs over the tensor-parallel group: what sequence
        # parallelism does to them in the plan's activation model (Korthikanti et al. 2022).
        "partition_activations": bool(draft.plan["sequence_parallel"]),
        "cpu_checkpointing": False,
        "contiguous_memory_optimization": False,
        # Checkpoints one GPU holds: its pipeline stage's layers, one per block of K.
        "number_checkpoints": math.ceil(layers_per_stage / every),
        "synchronize_checkpoint_boundary": False,
        "profile": False,
    }
    return [f"checkpointing every:{every}: DeepSpeed recomputes only where the model calls "
            f"deepspeed.checkpointing.checkpoint; wrap each block of {every} layer{'s' if every > 1 else ''} in one call "
            f"(PipelineModule(activation_checkpoint_interval={every}) with pipeline parallelism, "
            "Megatron-DeepSpeed --checkpoint-activations; a Hugging Face model's gradient_checkpointing_enable() is every:1)"]


def _megatron(draft: ExportDraft) -> list[str]:
    kind, every = parse_checkpointing(draft.plan["checkpointing"])
    if kind == CHECKPOINT_SELECTIVE:
        draft.argument("--recompute-granularity", "selective")
    elif kind == CHECKPOINT_EVERY:
        # 'uniform': each stage's layers in chunks of K, the input of each chunk kept (every:K).
        draft.argument("--recompute-granularity", "full")
        draft.argument("--recompute-method", "uniform")
        draft.argument("--recompute-num-layers", every)
    return []


def _torchtitan(draft: ExportDraft) -> list[str]:
    kind, _ = parse_checkpointing(draft.plan["checkpointing"])
    draft.argument({CHECKPOINT_EVERY: "activation-checkpoint:full", CHECKPOINT_SELECTIVE: "activation-checkpoint:selective"}
                   .get(kind, "activation-checkpoint:none"))
    if kind != CHECKPOINT_SELECTIVE:
        return []
    if draft.model.get("module") != "llama3":  # DeepSeek-V3: experts and latent attention
        return ["checkpointing selective: torchtitan's SelectiveAC (per-op, every second matmul recomputed) is counted "
                "for dense blocks only; this model's memory is vramopt's attention-core recomputation"]
    return ["checkpointing selective: torchtitan's per-op SelectiveAC, counted as it keeps the outputs "
            "(wqkv, w1, w2, attention; wo and w3 recomputed: vramopt/frameworks/torchtitan_activations.py)"]


CHECKPOINTING = Technique(
    field="checkpointing",
    runner_up_rank=4,
    group="activation",
    description="activation checkpointing: none, selective, every:K (full recomputation)",
    parse=_parse,
    default_values=_default_values,
    columns=_columns,
    decode=lambda codes: checkpointing_name(int(codes["checkpoint_kind"]), int(codes["checkpoint_every"])),
    neutral="none",
    plan_field=PlanField(
        python_type=str, default="none", flags=("--checkpoint",), cli_type="parse", metavar="none|selective|full|every:K",
        doc="'none', 'selective' (attention core only), or 'every:K' (full recomputation, a checkpoint every "
            "K layers; 'full' means every:1).",
        help="Activation checkpointing: none, selective, full (= every:1) or every:K layers.",
    ),
    aliases=("ckpt", "checkpoint"),
    contribution=Contribution(
        validity=checkpointing_invalid_reasons,
        memory=activation_bytes,
        time=recompute_flops_per_token,
        contract=ContractField(name="checkpointing", json_type="string",
                               description="activation checkpointing: none, selective, or every:K (full recomputation, "
                                           "a checkpoint every K layers)"),
        display=lambda plan: f"checkpointing {plan['checkpointing']}",
        display_line="memory",
        exports={"torchtitan": Export(apply=_torchtitan), "megatron": Export(apply=_megatron), "deepspeed": Export(apply=_deepspeed),
                 "vllm": Export(not_exported="serving keeps no activations for a backward pass; a training plan has no vLLM export")},
        sources=("Chen et al. 2016, Training Deep Nets with Sublinear Memory Cost",
                 "Korthikanti et al. 2022 (selective activation recomputation) and Table 2",
                 "DeepSpeed config-json: activation_checkpointing"),
    ),
)


def segment_fits_stage(value: str, layers_per_stage: int) -> bool:
    kind, every = parse_checkpointing(value)
    return kind != CHECKPOINT_EVERY or layers_per_stage % every == 0


TECHNIQUES = (CHECKPOINTING,)
__all__ = ["CHECKPOINTING", "InputError", "checkpointing_name", "parse_checkpointing", "segment_fits_stage"]
