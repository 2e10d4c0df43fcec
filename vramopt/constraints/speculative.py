"""Speculative decoding (Leviathan et al. 2023): a small draft model proposes tokens the
target verifies in one pass; costs the draft's weights and KV cache, gains tokens per step
from the acceptance rate.

Its memory term (the draft's weights and KV cache) and its time term (gamma draft steps,
a verification of gamma + 1 tokens, (1 - alpha^(gamma+1)) / (1 - alpha) tokens per step)
are written in the serving evaluation's one coupled place, ``costs/inference.evaluate_serving``,
with the draft's size, acceptance rate and gamma from ``ServingCase``.
"""

from __future__ import annotations

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft, no_rules
from vramopt.constraints.technique import PlanField, Technique, parse_bool
from vramopt.costs.inference import evaluate_serving

DRAFT_MODEL_PLACEHOLDER = "<draft-model>"


def _vllm(draft: ExportDraft) -> list[str]:
    if not draft.plan["speculative_decoding"]:
        return []
    draft.content["speculative_config"] = {
        "model": DRAFT_MODEL_PLACEHOLDER,
        "num_speculative_tokens": draft.setting("speculative_tokens"),
    }
    return [f"speculative decoding: replace '{DRAFT_MODEL_PLACEHOLDER}' in speculative_config with a draft model that "
            f"shares the target's tokenizer; the plan budgets a draft of about {draft.setting('draft_params_fraction'):.0%} "
            "of the target's parameters (a 1B-class draft for a 70B target)"]


SPECULATIVE_DECODING = Technique(
    field="speculative_decoding",
    serving_columns=lambda value, gpu: {"speculative": int(value)},
    runner_up_rank=15,
    group="state",
    description="speculative decoding with a draft model",
    parse=parse_bool("speculative_decoding"),
    default_values=lambda context: (False, True),
    columns=lambda value: {"speculative_decoding": value},
    decode=lambda codes: codes["speculative_decoding"],
    workloads=("infer",),
    plan_field=PlanField(python_type=bool, default=False, flags=("--speculative/--no-speculative",),
                         doc="Speculative decoding with a draft model.", help="infer: speculative decoding with a draft model."),
    aliases=("speculative",),
    contribution=Contribution(
        validity=no_rules,  # a draft runs beside any layout, weight format and KV cache
        memory=evaluate_serving,
        time=evaluate_serving,
        contract=ContractField(name="speculative_decoding", json_type="boolean",
                               description="a draft model proposes tokens the target verifies (Leviathan et al. 2023)"),
        display=lambda plan: f"speculative decoding {'on' if plan['speculative_decoding'] else 'off'}",
        display_line="weights",
        display_separator="; ",
        exports={"torchtitan": Export(not_exported="a serving technique; serving plans export to vLLM (--export vllm)"),
                 "megatron": Export(not_exported="a serving technique; serving plans export to vLLM (--export vllm)"),
                 "deepspeed": Export(not_exported="a serving technique; a serving plan has no DeepSpeed export"),
                 "vllm": Export(apply=_vllm)},
        sources=("Leviathan et al. 2023, Fast Inference from Transformers via Speculative Decoding (acceptance 0.5-0.8)",
                 "vLLM vllm/engine/arg_utils.py: speculative_config (model, num_speculative_tokens)"),
    ),
)

TECHNIQUES = (SPECULATIVE_DECODING,)
