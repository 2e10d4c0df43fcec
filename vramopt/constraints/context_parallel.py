"""Context parallelism: the ``context_parallel`` plan field (ring attention, cost terms in
costs/context_parallel.py).

A key field: it changes the layout (gpus = tp x cp x pp x dp), the tokens each rank holds
and the group that reduces and shards gradients (dp x cp), so it is fixed per candidate
row like tp and pp.

Default domain: cp = 1 for sequences up to 8,192 tokens, where the activations of one
sequence are small next to the model states and the ring would only add transfers
(Llama 3, Dubey et al. 2024, section 3.3.2, pretrains at 8K without context parallelism and
uses it for the long-context stage; torchtitan's published sweep starts CP at 32K). Longer
sequences search cp in powers of two up to 16 (Llama 3 Table 4: cp = 16 at 131,072 tokens)
and up to the GPUs searched, keeping those that split the sequence into 2 x cp chunks of
whole attention tiles. Pin or allow any other value.
"""

from __future__ import annotations

from typing import Any, Mapping

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft
from vramopt.constraints.technique import DomainContext, PlanField, Technique, parse_int
from vramopt.constraints.key_domain import KeyDomain
from vramopt.frameworks.deepspeed import VERSION as DEEPSPEED_VERSION
from vramopt.frameworks.rule import Rule
from vramopt.costs.context_parallel import (
    ATTENTION_TILE_TOKENS,
    context_parallel_invalid_reasons,
    ring_seconds_per_micro_batch,
    tokens_per_rank,
    whole_tile_chunks,
)

LONG_SEQUENCE_TOKENS = 8192
"""Above this many tokens per sequence context parallelism is searched by default (Llama 3
section 3.3.2: 8K pretraining sequences without CP)."""

LARGEST_DEFAULT_DEGREE = 16
"""Llama 3 (Dubey et al. 2024) Table 4: the 131,072-token stage of 405B ran cp = 16."""


def default_degrees(context: DomainContext) -> tuple[int, ...]:
    if context.seq_len <= LONG_SEQUENCE_TOKENS:
        return (1,)
    degrees, degree = [], 1
    while degree <= min(LARGEST_DEFAULT_DEGREE, context.max_gpus):
        if bool(whole_tile_chunks(context.seq_len, degree)):
            degrees.append(degree)
        degree *= 2
    return tuple(degrees)


KEY = KeyDomain(values=lambda request: tuple(
    cp for cp in request.resolve("context_parallel") if whole_tile_chunks(request.workload.seq_len, cp)))
"""The key enumeration's degrees: those that split the sequence into 2 x cp whole tiles."""


FRAMEWORK_RULES = {
    "deepspeed": (Rule(
        message="DeepSpeed: no ring-attention context parallelism (DeepSpeed-Ulysses is an all-to-all over heads, a "
                "different scheme), so context_parallel must be 1",
        group="key",
        refuses=lambda columns: columns.context_parallel > 1,
        source=f"deepspeed {DEEPSPEED_VERSION} sequence/layer.py DistributedAttention (Ulysses all-to-all; no KV ring)",
    ),),
}
"""The frameworks that cannot run cp > 1 (Framework.all_rules joins them to the framework's own rules)."""

EXPORT_NOTES = {
    "deepspeed": (
        "context parallel {cp}: not supported by this DeepSpeed config (DeepSpeed-Ulysses is a different "
        "scheme: an all-to-all over attention heads, not a KV ring); run ring attention with Megatron-Core "
        "(--context-parallel-size {cp}) or torchtitan (parallelism.context_parallel_degree = {cp})"
    ),
}
"""What each exporter says about a plan with cp > 1 (no exporter writes a CP setting)."""


def _deepspeed(draft: ExportDraft) -> list[str]:
    degree = draft.plan.get("context_parallel", 1)
    return [EXPORT_NOTES["deepspeed"].format(cp=degree)] if degree > 1 else []


def explain_values(*, seq_len: int, most: int):
    """Why a degree is not searched (an emptied domain's explanation), and the degrees it could take."""
    from vramopt.constraints.parallelism import powers_of_two_up_to

    def reason(degree: int) -> str | None:
        if not whole_tile_chunks(seq_len, degree):
            return (f"not a split of seq_len {seq_len:,} into 2 x context_parallel chunks of whole "
                    f"{ATTENTION_TILE_TOKENS}-token attention tiles")
        if degree > most:
            return f"more than the {most} GPUs a plan may use"
        return None

    def universe() -> list[int]:
        return [degree for degree in powers_of_two_up_to(most) if whole_tile_chunks(seq_len, degree)]

    return reason, universe


def _megatron(draft: ExportDraft) -> list[str]:
    draft.argument("--context-parallel-size", draft.plan.get("context_parallel", 1))
    return []


def _torchtitan(draft: ExportDraft) -> list[str]:
    draft.argument("--parallelism.context_parallel_degree", draft.plan.get("context_parallel", 1))
    return []


def display(plan: Mapping[str, Any]) -> str:
    """The phrase in the display's parallel line."""
    return f"cp={plan.get('context_parallel', 1)}"


SOURCES = (
    "Liu et al. 2023, Ring Attention with Blockwise Transformers for Near-Infinite Context, section 3",
    "Megatron-Core docs/source/api-guide/context_parallel.rst and get_batch_on_this_cp_rank (2 x cp chunks, r and 2cp-1-r)",
    "Transformer Engine AttnFuncWithCPAndKVP2P (KV ring forward, KV + dKV backward)",
    "torchtitan docs/context_parallel.md; FSDP mesh dp_shard_cp; round-robin (head-tail) load balancer",
    "Dubey et al. 2024, The Llama 3 Herd of Models, section 3.3.2 and Table 4 (cp = 16 at 131,072 tokens)",
    "Dao 2023, FlashAttention-2, section 3.3 (128-row blocks: the 128-token tile rule, an assumption)",
)

def _invalid_detail(case, plan, reason: str) -> str | None:
    """The tile rule's message with the chunk size this plan's cp makes of the sequence."""
    if not reason.startswith("context_parallel must split"):
        return None
    from vramopt.plan import describe

    return (f"{reason}: seq_len {case.seq_len} / (2 x {plan.context_parallel}) = "
            f"{case.seq_len / (2 * plan.context_parallel):g} tokens per chunk (plan: {describe(plan)})")


def _layout_hint(workload) -> str:
    return f"cp split seq_len {workload.seq_len} into 2 x cp chunks of whole {ATTENTION_TILE_TOKENS}-token tiles"


CONTEXT_PARALLEL = Technique(
    field="context_parallel",
    runner_up_rank=7,
    group="key",
    description="context parallel degree: ring attention over cp GPUs that split each sequence",
    parse=parse_int("context_parallel", 1),
    default_values=default_degrees,
    columns=lambda value: {"context_parallel": value},
    decode=lambda codes: int(codes["context_parallel"]),
    plan_field=PlanField(
        python_type=int, default=1, minimum=1, flags=("--cp", "--context-parallel"),
        doc="Ranks that split each sequence with ring attention (Liu et al. 2023; Megatron-Core and "
            "torchtitan context parallelism); 1 = none. gpus = tp x cp x pp x dp.",
        help="Context-parallel degree: ring attention over cp GPUs that split each sequence.",
    ),
    explain_values=explain_values,
    aliases=("cp",),
    contribution=Contribution(
        brief=lambda plan: f"cp={plan['context_parallel']}" if plan.get("context_parallel", 1) > 1 else "",
        validity=lambda case, columns: context_parallel_invalid_reasons(case.seq_len, columns),
        memory=tokens_per_rank,
        time=ring_seconds_per_micro_batch,
        contract=ContractField(
            name="context_parallel", json_type="integer",
            description="context-parallel degree: ring attention over cp GPUs that split each sequence; "
                        "gpus = tp x cp x pp x dp; gradients and ZeRO shard over dp x cp",
        ),
        display=display,
        display_line="parallel",
        display_separator=" ",
        exports={
            "torchtitan": Export(apply=_torchtitan),
            "megatron": Export(apply=_megatron),
            "deepspeed": Export(apply=_deepspeed),
            "vllm": Export(not_exported="serving plans have no context parallelism; a training plan has no vLLM export"),
        },
        framework_rules=FRAMEWORK_RULES,
        invalid_detail=_invalid_detail,
        layout_hint=_layout_hint,
        sources=SOURCES,
    ),
    key_domain=KEY,
)

TECHNIQUES = (CONTEXT_PARALLEL,)
