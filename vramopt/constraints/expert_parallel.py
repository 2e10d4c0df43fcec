"""Expert parallelism: the ``expert_parallel`` and ``expert_tensor_parallel`` plan fields
(issue 14; cost terms in costs/expert_parallel.py, where the group algebra and its sources are).

Key fields like tp and cp: they change which ranks hold which experts and the all-to-all
group. Default domain: 1 for dense models; for a mixture of experts every power of two that
divides the routed experts, up to 64 (Megatron-Core's published MoE runs use ep 8 to 64;
DeepSeek-V3 trained with ep 64, report section 3.1) and up to the GPUs searched. Whether it
divides the plan's cp x dp is checked per layout.
"""

from __future__ import annotations

from typing import Any, Mapping

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft, Gain
from vramopt.constraints.technique import DomainContext, PlanField, Technique, parse_int
from vramopt.constraints.key_domain import KeyDomain, KeyRule
from vramopt.costs.expert_parallel import (
    all_to_all_seconds_per_micro_batch,
    expert_parallel_invalid_reasons,
    expert_tensor_parallel_invalid_reasons,
    moe_tensor_parallel_adjustment_s,
    unsplit_expert_parameters_per_gpu,
)
from vramopt.constraints.serving_layout import serving_default_degrees, serving_expert_invalid_reasons, vllm_expert_parallel
from vramopt.parallel_layout import STAGE_GROUP_COLUMNS, ParallelLayout, resolved_expert_tensor_parallel
from vramopt.types import WORKLOADS

LARGEST_DEFAULT_DEGREE = 64
"""DeepSeek-V3 technical report section 3.1: 64-way expert parallelism over 8 nodes."""


def default_degrees(context: DomainContext) -> tuple[int, ...]:
    degrees, degree = [1], 2
    while context.experts and degree <= min(context.experts, LARGEST_DEFAULT_DEGREE, context.max_gpus):
        if context.experts % degree == 0:
            degrees.append(degree)
        degree *= 2
    return tuple(degrees)


def _expert_parallel_candidates(request) -> tuple[int, ...]:
    """Degrees that divide the routed experts (1 only for a dense model)."""
    model = request.model
    experts = model.moe.experts if model.moe is not None else 1
    return tuple(ep for ep in request.resolve("expert_parallel") if experts % ep == 0 and (ep == 1 or model.moe))


def display(plan: Mapping[str, Any]) -> str:
    """'ep=8' on the parallel line when the plan splits experts (dense plans show nothing)."""
    degree = plan.get("expert_parallel", 1)
    return f"ep={degree}" if degree > 1 else ""


def _deepspeed(draft: ExportDraft) -> list[str]:
    degree = draft.plan.get("expert_parallel", 1)
    if degree == 1:
        return []
    return [f"expert parallel {degree}: not in this config; DeepSpeed-MoE takes it in the model code "
            f"(deepspeed.moe.layer.MoE(..., ep_size={degree})), Megatron-Core as --expert-model-parallel-size {degree}"]


def _megatron_experts(draft: ExportDraft) -> list[str]:
    """Megatron-Core's expert-parallel size, and the all-to-all dispatcher vramopt prices
    (costs/expert_parallel.py), not the allgather default; nothing for a dense model."""
    if draft.model.get("experts"):
        draft.argument("--expert-model-parallel-size", draft.plan.get("expert_parallel", 1))
        draft.argument("--moe-token-dispatcher-type", "alltoall")
    return []


def _megatron_expert_tensor(draft: ExportDraft) -> list[str]:
    if draft.model.get("experts"):
        draft.argument("--expert-tensor-parallel-size", draft.plan.get("expert_tensor_parallel", draft.plan["tensor_parallel"]))
    return []


def _torchtitan_experts(draft: ExportDraft) -> list[str]:
    if draft.plan.get("expert_parallel", 1) > 1:
        draft.argument("--parallelism.expert_parallel_degree", draft.plan["expert_parallel"])
    return []


EXPERT_PARALLEL = Technique(
    field="expert_parallel",
    group="key",
    description="expert parallel degree: the routed experts split over ep ranks of cp x dp, tokens exchanged by all-to-all",
    parse=parse_int("expert_parallel", 1),
    # Serving (constraints/serving_experts.py) spreads experts wider than training's 64.
    default_values=lambda context: serving_default_degrees(context) if context.kind == "infer" else default_degrees(context),
    columns=lambda value: {"expert_parallel": value},
    decode=lambda codes: int(codes["expert_parallel"]),
    workloads=WORKLOADS,
    serving_columns=lambda value, gpu: {"expert_parallel": int(value)},
    plan_field=PlanField(
        python_type=int, default=1, minimum=1, flags=("--ep", "--expert-parallel"),
        doc="Ranks that split the routed experts of a mixture of experts (costs/expert_parallel.py).",
        help="Expert-parallel degree (mixture of experts): routed experts split over ep ranks (training: ep ranks of tp x cp x dp; serving: a replica of ep GPUs, ep a multiple of tp).",
    ),
    aliases=("ep",),
    contribution=Contribution(
        brief=lambda plan: f"ep={plan['expert_parallel']}" if plan.get("expert_parallel", 1) > 1 else "",
        validity=lambda case, columns: expert_parallel_invalid_reasons(case.model, columns),
        memory=unsplit_expert_parameters_per_gpu,
        time=all_to_all_seconds_per_micro_batch,
        contract=ContractField(
            name="expert_parallel", json_type="integer",
            description="expert-parallel degree: routed experts split over ep ranks carved out of tp x cp x dp "
                        "with expert_tensor_parallel; 1 for dense models",
        ),
        display=display,
        display_line="parallel",
        display_separator=" ",
        exports={
            "torchtitan": Export(apply=_torchtitan_experts),
            "megatron": Export(apply=_megatron_experts),
            "deepspeed": Export(apply=_deepspeed),
            "vllm": Export(apply=vllm_expert_parallel),
        },
        serving_validity=serving_expert_invalid_reasons,
        sources=(
            "Megatron-Core parallel_state.initialize_model_parallel (expert groups etp x ep x edp over tp x cp x dp)",
            "Liu et al. 2025, MoE Parallel Folding: Heterogeneous Parallelism Mappings for Efficient Large-Scale MoE "
            "Model Training with Megatron Core",
            "Lepikhin et al. 2021, GShard (dispatch and combine all-to-all per MoE layer)",
            "DeepSeek-AI 2024, DeepSeek-V3 Technical Report, section 3.1 (64-way expert parallelism)",
            "vLLM vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make (serving: ep = tp x dp)",
            "DeepSeek-AI 2024, DeepSeek-V3 Technical Report, section 3.4 (serving: prefill EP32, decode EP320, DP attention)",
        ),
        gain=Gain(key="expert_gain", measure=lambda workload, estimate, framework: expert_gain(workload, estimate, framework),
                  sentence=lambda plan, gain, gb: why_line(plan, gain, gb)),
    ),
    key_domain=KeyDomain(values=_expert_parallel_candidates),
)

def expert_gain(workload, estimate, framework: str = "generic") -> dict[str, Any] | None:
    """What the plan's expert split buys: the same plan with the experts split like the dense
    layers (ep 1, etp = tp), its memory, whether it fits, and the speed-up of the chosen plan
    over it. None for a plan that does not split experts otherwise."""
    from dataclasses import replace

    from vramopt.errors import InputError
    from vramopt.estimate import estimate_training

    plan = estimate.plan
    if plan.expert_parallel == 1 and plan.expert_tensor_parallel == plan.tensor_parallel:
        return None
    try:
        dense_like = estimate_training(workload, replace(plan, expert_parallel=1, expert_tensor_parallel=plan.tensor_parallel),
                                       framework)
    except InputError:  # the framework cannot run the experts split like the dense layers
        return None
    return {
        "expert_parallel": plan.expert_parallel,
        "expert_tensor_parallel": plan.expert_tensor_parallel,
        "dense_split_total_bytes": dense_like.total_bytes,
        "dense_split_fits": bool(dense_like.fits),
        "limit_bytes": estimate.values["capacity_bytes"] * (1.0 - workload.headroom_fraction),
        "speedup_factor": estimate.tokens_per_s / dense_like.tokens_per_s,
        "all_to_all_fraction_of_step": estimate.values["expert_parallel_s"] / estimate.values["step_time_s"],
    }


def why_line(plan: Mapping[str, Any], gain: Mapping[str, Any], gb) -> str:
    """The why line's expert-split sentence (``gb`` formats bytes as the display does)."""
    split = f"expert parallel {gain['expert_parallel']}" + (
        " with whole experts (etp 1)" if gain["expert_tensor_parallel"] == 1 and plan["tensor_parallel"] > 1
        else f" with etp {gain['expert_tensor_parallel']}" if gain["expert_tensor_parallel"] != plan["tensor_parallel"] else "")
    dense = f"experts split like the dense layers (ep 1, etp {plan['tensor_parallel']})"
    if not gain["dense_split_fits"]:
        return (f"{split} is what makes it fit: with the {dense} it would need {gb(gain['dense_split_total_bytes'])} GB per GPU, "
                f"over the {gb(gain['limit_bytes'])} GB limit")
    return (f"{split}: {gain['speedup_factor']:,.2f}x the tokens/s of the same plan with the {dense}; "
            f"its all-to-all is {gain['all_to_all_fraction_of_step'] * 100:,.1f}% of the step")


SAME_AS_TENSOR_PARALLEL = 0
"""The expert_tensor_parallel code for 'the plan's tp' (Megatron-Core's default)."""


def default_expert_tensor_degrees(context: DomainContext) -> tuple[int, ...]:
    """tp (the code 0) for every model; for a mixture of experts also 1, whole experts per
    rank, as Megatron-Core's published MoE recipes run (Megatron-MoE-ModelZoo: Qwen3-235B and
    DeepSeek-V3 with --expert-tensor-parallel-size 1) and as torchtitan 0.3.0 runs every
    expert-parallel plan. Unless the user names the field, the key enumeration
    (optimizer/problem.py) searches etp 1 with ep > 1 only (at ep 1 it would replicate every
    expert over tp). Neither value dominates: etp 1 holds tp times the expert weights and
    saves the MLP collectives and the all-to-all's span (2t on B200: etp = tp wins at 16,384
    GPUs, etp 1 at 16). Searching both costs 1.7x the 2t keys (31,678 at 16,384 GPUs, 5.3M
    table rows, within tables.MAX_TABLE_ROWS)."""
    return (SAME_AS_TENSOR_PARALLEL, 1) if context.experts else (SAME_AS_TENSOR_PARALLEL,)


def parse_expert_tensor_degree(text: str) -> int:
    """'tp' or 0 for the plan's tensor-parallel degree, else a positive degree."""
    if str(text).strip().lower() in ("tp", "0"):
        return SAME_AS_TENSOR_PARALLEL
    return parse_int("expert_tensor_parallel", 1)(text)


def display_expert_tensor(plan: Mapping[str, Any]) -> str:
    """'etp=1' on the parallel line when the experts are split otherwise than the dense layers."""
    degree = plan.get("expert_tensor_parallel", plan.get("tensor_parallel", 1))
    return f"etp={degree}" if degree != plan.get("tensor_parallel", 1) else ""


def _resolved(rows):
    return resolved_expert_tensor_parallel(rows.expert_tensor_parallel, rows.tensor_parallel)


def _whole_experts_searched(request, rows):
    """Experts split otherwise than the dense layers: MoE only, and unless the user names
    etp only with expert parallelism (at ep 1 etp 1 replicates every expert over tp)."""
    other = _resolved(rows) != rows.tensor_parallel
    named = request.named("expert_tensor_parallel")
    return ~other | (bool(request.model.moe) & (named | (rows.expert_parallel != 1)))


def _expert_groups_fit(request, rows):
    """ep x etp divides the stage's tp x cp x dp ranks (the expert layers refold them)."""
    layout = ParallelLayout.of_stage(rows)
    return layout.stage_gpus % layout.expert_weight_shards == 0


EXPERT_TENSOR_KEY = KeyDomain(
    values=lambda request: request.resolve("expert_tensor_parallel"),
    rules=(
        KeyRule(reads=("tensor_parallel", "expert_parallel", "expert_tensor_parallel"), admits=_whole_experts_searched),
        KeyRule(reads=STAGE_GROUP_COLUMNS, admits=_expert_groups_fit),
    ),
    same_as=_resolved,  # code 0 and code tp are one layout: the first in the domain's order kept
)


def _deepspeed_note_expert_tensor(draft: ExportDraft) -> list[str]:
    degree = draft.plan.get("expert_tensor_parallel", draft.plan.get("tensor_parallel", 1))
    if degree == draft.plan.get("tensor_parallel", 1):
        return []
    return [f"expert tensor parallel {degree}: not in this config; Megatron-Core takes it as "
            f"--expert-tensor-parallel-size {degree}; DeepSpeed-MoE keeps each expert whole unless the model code "
            "enables expert tensor parallelism (deepspeed.moe.layer.MoE(enable_expert_tensor_parallelism=True))"]



def _resolved_expert_tensor_parallel(plan) -> int:
    """0 stands for the tensor-parallel degree (Megatron-Core's default for ETP)."""
    value = plan.expert_tensor_parallel
    return plan.tensor_parallel if value == 0 and not isinstance(value, bool) else value

EXPERT_TENSOR_PARALLEL = Technique(
    field="expert_tensor_parallel",
    group="key",
    description="experts' tensor-parallel degree (Megatron-Core ETP): 'tp' splits each expert like the dense layers, "
                "1 keeps experts whole; ep x etp must divide tp x cp x dp",
    parse=parse_expert_tensor_degree,
    default_values=default_expert_tensor_degrees,
    columns=lambda value: {"expert_tensor_parallel": value},
    decode=lambda codes: int(codes["expert_tensor_parallel"]) or int(codes["tensor_parallel"]),
    plan_field=PlanField(
        python_type=int, default=0, minimum=1, minimum_note="(or 0 for tensor_parallel)",
        flags=("--etp", "--expert-tensor-parallel"), show_default=False,
        doc="Ranks that split each routed expert's matrices (Megatron-Core ETP); 0 (the default) stands for the "
            "tensor-parallel degree, Megatron-Core's default, and is resolved to it on construction, so a plan "
            "always carries the degree it runs (costs/expert_parallel.py).",
        help="Experts' tensor-parallel degree (Megatron-Core ETP; 1 = whole experts per rank). [default: 0 = the --tp degree]",
        resolve=_resolved_expert_tensor_parallel,
    ),
    aliases=("etp",),
    contribution=Contribution(
        brief=lambda plan: (f"etp={plan['expert_tensor_parallel']}" if plan.get("expert_tensor_parallel", plan["tensor_parallel"]) != plan["tensor_parallel"] else ""),
        validity=lambda case, columns: expert_tensor_parallel_invalid_reasons(case.model, columns),
        memory=unsplit_expert_parameters_per_gpu,
        time=moe_tensor_parallel_adjustment_s,
        contract=ContractField(
            name="expert_tensor_parallel", json_type="integer",
            description="ranks that split each routed expert's matrices (Megatron-Core ETP); equals tensor_parallel "
                        "unless the experts are split otherwise (dense models: tensor_parallel)",
        ),
        display=display_expert_tensor,
        display_line="parallel",
        display_separator=" ",
        exports={
            "torchtitan": Export(not_exported="torchtitan has no expert tensor-parallel setting: its rule keeps the experts whole under expert parallelism and split by tp without it"),
            "megatron": Export(apply=_megatron_expert_tensor),
            "deepspeed": Export(apply=_deepspeed_note_expert_tensor),
            "vllm": Export(not_exported="a training plan has no vLLM export"),
        },
        sources=(
            "Megatron-Core parallel_state.initialize_model_parallel (expert_tensor_parallel_size; etp x ep x edp = tp x cp x dp)",
            "Liu et al. 2025, MoE Parallel Folding (attention and MoE layers with their own tp)",
            "yanring/Megatron-MoE-ModelZoo best_practice/Qwen3/readme.md (etp 1 in every published layout)",
        ),
    ),
    key_domain=EXPERT_TENSOR_KEY,
)

TECHNIQUES = (EXPERT_PARALLEL, EXPERT_TENSOR_PARALLEL)
