"""Expert parallelism: the ``expert_parallel`` plan field (issue 14; cost terms in
costs/expert_parallel.py, where the group algebra and its sources are).

A key field like tp and cp: it changes which ranks hold which experts and the all-to-all
group. Default domain: 1 for dense models; for a mixture of experts every power of two that
divides the routed experts, up to 64 (Megatron-Core's published MoE runs use ep 8 to 64;
DeepSeek-V3 trained with ep 64, report section 3.1) and up to the GPUs searched. Whether it
divides the plan's cp x dp is checked per layout.
"""

from __future__ import annotations

from typing import Any, Mapping

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft
from vramopt.constraints.technique import DomainContext, Technique, parse_int
from vramopt.costs.expert_parallel import (
    all_to_all_seconds_per_micro_batch,
    expert_parallel_invalid_reasons,
    unsplit_expert_parameters_per_gpu,
)

LARGEST_DEFAULT_DEGREE = 64
"""DeepSeek-V3 technical report section 3.1: 64-way expert parallelism over 8 nodes."""


def default_degrees(context: DomainContext) -> tuple[int, ...]:
    degrees, degree = [1], 2
    while context.experts and degree <= min(context.experts, LARGEST_DEFAULT_DEGREE, context.max_gpus):
        if context.experts % degree == 0:
            degrees.append(degree)
        degree *= 2
    return tuple(degrees)


def display(plan: Mapping[str, Any]) -> str:
    """'ep=8' on the parallel line when the plan splits experts (dense plans show nothing)."""
    degree = plan.get("expert_parallel", 1)
    return f"ep={degree}" if degree > 1 else ""


def _deepspeed(draft: ExportDraft) -> list[str]:
    degree = draft.plan.get("expert_parallel", 1)
    if degree == 1:
        return []
    return [f"expert parallel {degree}: not in this config; DeepSpeed-MoE takes it in the model code "
            f"(deepspeed.moe.layer.MoE(..., ep_size={degree})), Megatron-Core as --expert-model-parallel-size {degree}; "
            "the plan assumes the experts' tensor-parallel degree equals tp (Megatron-Core's default)"]


EXPERT_PARALLEL = Technique(
    field="expert_parallel",
    group="key",
    description="expert parallel degree: the routed experts split over ep ranks of cp x dp, tokens exchanged by all-to-all",
    parse=parse_int("expert_parallel", 1),
    default_values=default_degrees,
    columns=lambda value: {"expert_parallel": value},
    decode=lambda codes: int(codes["expert_parallel"]),
    contribution=Contribution(
        validity=lambda case, columns: expert_parallel_invalid_reasons(case.model, columns),
        memory=unsplit_expert_parameters_per_gpu,
        time=all_to_all_seconds_per_micro_batch,
        contract=ContractField(
            name="expert_parallel", json_type="integer",
            description="expert-parallel degree: routed experts split over ep ranks carved out of cp x dp "
                        "(expert tensor parallelism = tp); 1 for dense models",
        ),
        display=display,
        display_line="parallel",
        display_separator=" ",
        exports={
            "deepspeed": Export(apply=_deepspeed),
            "vllm": Export(not_exported="a training plan has no vLLM export (expert-parallel serving is not searched yet)"),
        },
        sources=(
            "Megatron-Core parallel_state.initialize_model_parallel (expert groups etp x ep x edp over tp x cp x dp)",
            "Liu et al. 2025, MoE Parallel Folding: Heterogeneous Parallelism Mappings for Efficient Large-Scale MoE "
            "Model Training with Megatron Core",
            "Lepikhin et al. 2021, GShard (dispatch and combine all-to-all per MoE layer)",
            "DeepSeek-AI 2024, DeepSeek-V3 Technical Report, section 3.1 (64-way expert parallelism)",
        ),
    ),
)

TECHNIQUES = (EXPERT_PARALLEL,)
