"""Flash attention (Dao et al. 2022): never materializes the s^2 attention scores.

Its memory term is the 5 a s^2 b score share of ``costs/activations.layer_bytes``; its time
term the attention core per implementation, ``costs/operators.attention_core_seconds``.
"""

from __future__ import annotations

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft, no_rules
from vramopt.constraints.technique import PlanField, Technique, parse_bool
from vramopt.costs.activations import layer_bytes
from vramopt.costs.operators import attention_core_seconds


def _deepspeed(draft: ExportDraft) -> list[str]:
    if draft.plan["flash_attention"]:
        return ["FlashAttention: chosen in the model code (Hugging Face attn_implementation='flash_attention_2' or 'sdpa', "
                "Megatron-DeepSpeed --use-flash-attn), not in the DeepSpeed config"]
    return ["no FlashAttention: the plan stores the attention scores (s^2 per head); use the model's eager attention "
            "(FlashAttention or SDPA would only use less memory than the plan counts)"]


def _megatron(draft: ExportDraft) -> list[str]:
    draft.argument("--attention-backend", "flash" if draft.plan.get("flash_attention", True) else "unfused")
    return []


FLASH_ATTENTION = Technique(
    field="flash_attention",
    runner_up_rank=11,
    group="activation",
    description="flash attention (drops the 5*a*s^2*b score activations; faster attention core)",
    parse=parse_bool("flash_attention"),
    default_values=lambda context: (True, False),
    columns=lambda value: {"flash_attention": int(value)},
    decode=lambda codes: bool(codes["flash_attention"]),
    neutral=True,
    plan_field=PlanField(
        python_type=bool, default=True, flags=("--flash-attention/--no-flash-attention",),
        help="FlashAttention: no s^2 attention-score activations.",
    ),
    aliases=("flash",),
    contribution=Contribution(
        validity=no_rules,  # cp > 1 needs it: context parallelism's rule
        memory=layer_bytes,
        time=attention_core_seconds,
        contract=ContractField(name="flash_attention", json_type="boolean",
                               description="FlashAttention: no s^2 attention-score activations"),
        display=lambda plan: f"flash attention {'on' if plan['flash_attention'] else 'off'}",
        display_line="memory",
        exports={"torchtitan": Export(not_exported="torchtitan runs attention through SDPA or FlexAttention, never storing the scores; its rule requires flash_attention on"),
                 "megatron": Export(apply=_megatron), "deepspeed": Export(apply=_deepspeed),
                 "vllm": Export(not_exported="vLLM picks its attention backend itself; a training plan has no vLLM export")},
        sources=("Dao et al. 2022, FlashAttention", "Dao 2023, FlashAttention-2",
                 "Korthikanti et al. 2022 (5 a s^2 b bytes of attention scores per layer)"),
    ),
)

TECHNIQUES = (FLASH_ATTENTION,)
