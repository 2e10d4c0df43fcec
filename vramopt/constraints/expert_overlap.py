"""Expert-parallel all-to-all overlap (Megatron-Core's combined 1F1B): the
``expert_comm_overlap`` plan field; its terms are in costs/expert_overlap.py.

An activation technique, like the interleaved schedule it needs under pipeline
parallelism: it changes what one micro-batch's pass exposes and how many micro-batches are
held, not the model states. Searched on mixtures of experts (on, off); dense models have
nothing to overlap. Megatron-LM runs it (``--overlap-moe-expert-parallel-comm``); DeepSpeed's
MoE layer and torchtitan's schedules do not pair micro-batches, so those frameworks refuse
it (declared here, with their sources).
"""

from __future__ import annotations

from typing import Any, Mapping

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft
from vramopt.constraints.technique import DomainContext, PlanField, Technique, parse_bool
from vramopt.costs.expert_overlap import exposed_all_to_all_seconds, extra_activation_bytes, overlap_column, overlap_invalid_reasons
from vramopt.frameworks.deepspeed import VERSION as DEEPSPEED_VERSION
from vramopt.frameworks.rule import Rule
from vramopt.frameworks.torchtitan import VERSION as TORCHTITAN_VERSION

MEGATRON_SOURCE = ("Megatron-Core core_v0.16.1 model_parallel_config.py overlap_moe_expert_parallel_comm, "
                   "pipeline_parallel/combined_1f1b.py and schedules.py (one extra warm-up forward), "
                   "transformer/transformer_config.py __post_init__ (its asserts)")


def default_values(context: DomainContext) -> tuple[bool, ...]:
    return (False, True) if context.experts > 0 else (False,)


def display(plan: Mapping[str, Any]) -> str:
    """Shown only when on: the memory line names the schedule that holds one more micro-batch."""
    return "expert all-to-all overlapped (combined 1F1B)" if plan.get("expert_comm_overlap") else ""


def _megatron(draft: ExportDraft) -> list[str]:
    if draft.plan.get("expert_comm_overlap"):
        draft.argument("--overlap-moe-expert-parallel-comm")
    return []


def _deepspeed(draft: ExportDraft) -> list[str]:
    if not draft.plan.get("expert_comm_overlap"):
        return []
    return ["expert_comm_overlap: DeepSpeed's MoE layer runs its all-to-alls in its own micro-batch's pass "
            "(deepspeed/moe/sharded_moe.py MOELayer.forward); the plan's overlapped all-to-all is Megatron-LM's "
            "--overlap-moe-expert-parallel-comm"]


def _refuses(columns) -> Any:
    return overlap_column(columns) == 1


FRAMEWORK_RULES = {
    "deepspeed": (Rule(
        message="DeepSpeed: the MoE layer's all-to-alls run inside their own micro-batch's pass (no combined 1F1B), "
                "so expert_comm_overlap must be off",
        group="activation", refuses=_refuses,
        source=f"deepspeed {DEEPSPEED_VERSION} moe/sharded_moe.py MOELayer.forward (_AllToAll before and after the experts)",
    ),),
    "torchtitan": (Rule(
        message="torchtitan: its pipeline schedules and expert-parallel backends pair no micro-batches "
                "(minimal_async_ep: 'does not provide microbatch communication overlap'), so expert_comm_overlap must be off",
        group="activation", refuses=_refuses,
        source=f"torchtitan {TORCHTITAN_VERSION} distributed/minimal_async_ep/api.py and distributed/pipeline_parallel.py",
    ),),
}

EXPERT_COMM_OVERLAP = Technique(
    field="expert_comm_overlap",
    group="activation",
    description="expert all-to-all overlapped with another micro-batch's compute (Megatron-Core combined 1F1B)",
    parse=parse_bool("expert_comm_overlap"),
    default_values=default_values,
    columns=lambda value: {"expert_comm_overlap": int(value)},
    decode=lambda codes: bool(codes["expert_comm_overlap"]),
    neutral=False,
    plan_field=PlanField(
        python_type=bool, default=False, flags=("--expert-comm-overlap/--no-expert-comm-overlap",),
        help="Overlap the experts' all-to-all with another micro-batch's compute (Megatron-Core combined 1F1B; "
             "needs ep > 1, virtual stages under pipeline parallelism, no full recomputation).",
    ),
    # Megatron-Core refuses full recomputation with the overlap whatever the layout: those
    # activation items are never tabled (a 2t search at 16,384 GPUs would hold 10.6M rows).
    excludes=lambda item: ("expert_comm_overlap needs checkpointing none or selective (Megatron-Core: disable full recomputation)"
                           if item.get("expert_comm_overlap") and str(item.get("checkpointing", "none")).startswith("every") else ""),
    aliases=("a2a_overlap",),
    contribution=Contribution(
        validity=lambda case, columns: overlap_invalid_reasons(columns),
        memory=extra_activation_bytes,
        time=exposed_all_to_all_seconds,
        contract=ContractField(
            name="expert_comm_overlap", json_type="boolean",
            description="expert-parallel all-to-all overlapped with another micro-batch's compute (Megatron-Core "
                        "combined 1F1B, --overlap-moe-expert-parallel-comm); false for dense models",
        ),
        display=display,
        display_line="memory",
        exports={
            "megatron": Export(apply=_megatron),
            "deepspeed": Export(apply=_deepspeed),
            "torchtitan": Export(not_exported="torchtitan pairs no micro-batches; its rule refuses the overlap"),
            "vllm": Export(not_exported="a training plan has no vLLM export"),
        },
        framework_rules=FRAMEWORK_RULES,
        sources=(
            MEGATRON_SOURCE,
            "Megatron-Core docs, 'Combined 1F1B: Expert-Parallel All-to-All Overlap' (user-guide/features/moe_a2a_overlap)",
            "yanring/Megatron-MoE-ModelZoo best_practice/Qwen3/readme.md: Qwen3-235B EP32 PP8, 245 -> 276 TFLOP/s per GPU "
            "with the all-to-all overlapped with 1F1B",
        ),
    ),
)

TECHNIQUES = (EXPERT_COMM_OVERLAP,)
