"""KV cache for serving: its dtype, paged (PagedAttention) or contiguous allocation, and
the concurrent slots it is sized for.

Slots are a decision on a geometric grid (ratio 2^(1/8), 1 to 2,048): the best plan
usually holds as many sequences as memory and the latency bound allow, and a ~9% grid
keeps the table small while losing at most ~9% of the slots memory allows.
``--allow slots=...`` sets exact values.

The memory terms are ``costs/kv_cache.py``'s (bytes per token of each dtype, tokens held
per paged or contiguous slot, the cache of a replica's slots); the time terms the KV read
of the decode roofline and the slots it batches. Slots, dtype, paging, tensor and pipeline
parallelism and speculative decoding's draft cache meet in one place,
``costs/inference.evaluate_serving``, which is why serving is one group of items.
"""

from __future__ import annotations

from typing import Any

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft, no_rules
from vramopt.constraints.technique import PlanField, Technique, parse_bool, parse_choice, parse_int
from vramopt.costs.inference import KV_CACHE_DTYPES, evaluate_serving
from vramopt.costs.kv_cache import kv_cache_bytes, kv_cache_bytes_per_token, kv_tokens_in_use

SLOT_GRID = tuple(sorted({round(2 ** (step / 8)) for step in range(0, 89)}))

KV_CACHE_DTYPE_NAMES = {"bf16": "auto", "fp8": "fp8"}
"""vLLM's --kv-cache-dtype: 'auto' stores the KV cache in the model dtype (bfloat16)."""

NOT_DEEPSPEED = "a serving KV cache choice; a serving plan has no DeepSpeed export"
VLLM_ARGS = "vLLM vllm/engine/arg_utils.py: "
KWON = "Kwon et al. 2023, Efficient Memory Management for Large Language Model Serving with PagedAttention"


def kv_cache_dtype_invalid_reasons(case, columns) -> dict[str, Any]:
    return {"fp8 KV cache needs fp8 support": (columns.kv_cache_dtype == 1) & (not case.gpu.supports("fp8"))}


def slots_invalid_reasons(case, columns) -> dict[str, Any]:
    return {"slots must be at least 1": columns.slots < 1}


def _vllm_kv_cache_dtype(draft: ExportDraft) -> list[str]:
    draft.content["kv_cache_dtype"] = KV_CACHE_DTYPE_NAMES[draft.plan["kv_cache_dtype"]]
    return []


def _vllm_paged_kv(draft: ExportDraft) -> list[str]:
    if draft.plan["paged_kv"]:
        draft.content["block_size"] = draft.setting("kv_block_tokens")
        return []
    return ["paged_kv false (a contiguous KV reservation of the full context per slot) is not expressible: "
            "vLLM always pages the KV cache (PagedAttention), which never needs more than that reservation"]


def _vllm_slots(draft: ExportDraft) -> list[str]:
    """max_num_seqs is per engine: an expert-parallel replica's slots are shared by its
    attention groups, each a data-parallel engine with its own scheduler."""
    import math

    from vramopt.costs.serving_experts import attention_groups

    groups = int(attention_groups(draft.plan["tensor_parallel"], draft.plan.get("expert_parallel", 1)))
    draft.content["max_num_seqs"] = math.ceil(draft.plan["slots"] / groups)
    if groups == 1:
        return []
    return [f"max_num_seqs {draft.content['max_num_seqs']}: the replica's {draft.plan['slots']} slots over its {groups} "
            "data-parallel engines (each schedules its own)"]


KV_CACHE_DTYPE = Technique(
    field="kv_cache_dtype",
    serving_columns=lambda value, gpu: {"kv_cache_dtype": KV_CACHE_DTYPES.index(value)},
    runner_up_rank=13,
    group="state",
    description="KV cache element type (fp8 halves it; needs fp8 support)",
    parse=parse_choice("kv_cache_dtype", KV_CACHE_DTYPES),
    default_values=lambda context: tuple(name for name in KV_CACHE_DTYPES if name == "bf16" or name in context.supported_precisions),
    columns=lambda value: {"kv_cache_dtype": value},
    decode=lambda codes: codes["kv_cache_dtype"],
    workloads=("infer",),
    plan_field=PlanField(python_type=str, default="bf16", choices=KV_CACHE_DTYPES, flags=("--kv-cache-dtype",),
                         doc="KV cache element type.", help="infer: KV cache element type."),
    aliases=("kv_dtype",),
    contribution=Contribution(
        validity=kv_cache_dtype_invalid_reasons,
        memory=kv_cache_bytes_per_token,
        time=evaluate_serving,  # the KV bytes each decode step reads
        contract=ContractField(name="kv_cache_dtype", json_type="string", enum=KV_CACHE_DTYPES, description="KV cache element type"),
        display=lambda plan: f"KV cache {plan['kv_cache_dtype']}",
        display_line="weights",
        display_separator="; ",
        exports={"torchtitan": Export(not_exported="a serving technique; serving plans export to vLLM (--export vllm)"),
                 "megatron": Export(not_exported="a serving technique; serving plans export to vLLM (--export vllm)"),
                 "deepspeed": Export(not_exported=NOT_DEEPSPEED), "vllm": Export(apply=_vllm_kv_cache_dtype)},
        sources=(f"{VLLM_ARGS}kv_cache_dtype (auto, fp8)", "costs/kv_cache.py: 2 x layers x kv_heads x head_dim elements per token"),
    ),
)

PAGED_KV = Technique(
    field="paged_kv",
    serving_columns=lambda value, gpu: {"paged_kv": int(value)},
    runner_up_rank=14,
    group="state",
    description="PagedAttention: store only the tokens in use (in blocks) instead of the full context per slot",
    parse=parse_bool("paged_kv"),
    default_values=lambda context: (True, False),
    columns=lambda value: {"paged_kv": value},
    decode=lambda codes: codes["paged_kv"],
    workloads=("infer",),
    plan_field=PlanField(
        python_type=bool, default=True, flags=("--paged-kv/--no-paged-kv",),
        doc="PagedAttention (vLLM) instead of reserving the full context per slot.",
        help="infer: PagedAttention (store tokens in use) or contiguous (full context per slot).",
    ),
    contribution=Contribution(
        validity=no_rules,  # paged or contiguous runs with any dtype, slots and layout
        memory=kv_tokens_in_use,
        time=evaluate_serving,  # attention reads the tokens in use either way
        contract=ContractField(name="paged_kv", json_type="boolean",
                               description="PagedAttention (tokens in use, 16-token blocks) instead of the full context per slot"),
        display=lambda plan: "paged" if plan["paged_kv"] else "contiguous",
        display_line="weights",
        exports={"torchtitan": Export(not_exported="a serving technique; serving plans export to vLLM (--export vllm)"),
                 "megatron": Export(not_exported="a serving technique; serving plans export to vLLM (--export vllm)"),
                 "deepspeed": Export(not_exported=NOT_DEEPSPEED), "vllm": Export(apply=_vllm_paged_kv)},
        sources=(f"{KWON} (blocks of 16 tokens, under 4% waste)", f"{VLLM_ARGS}block_size"),
    ),
)

SLOTS = Technique(
    field="slots",
    serving_columns=lambda value, gpu: {"slots": int(value)},
    runner_up_rank=16,
    group="state",
    description="concurrent sequences per replica (vLLM max-num-seqs)",
    parse=parse_int("slots", 1),
    default_values=lambda context: SLOT_GRID,
    columns=lambda value: {"slots": value},
    decode=lambda codes: codes["slots"],
    workloads=("infer",),
    plan_field=PlanField(python_type=int, default=16, minimum=1, flags=("--slots",),
                         doc="Concurrent sequences per replica (vLLM max-num-seqs).",
                         help="infer: concurrent sequences per replica."),
    contribution=Contribution(
        validity=slots_invalid_reasons,
        memory=kv_cache_bytes,
        time=evaluate_serving,  # the decode step batches every slot
        contract=ContractField(name="slots", json_type="integer", description="concurrent sequences per replica (vLLM max-num-seqs)"),
        display=lambda plan: f"{plan['slots']} slot{'' if plan['slots'] == 1 else 's'} each",
        display_line="replicas",
        exports={"torchtitan": Export(not_exported="a serving technique; serving plans export to vLLM (--export vllm)"),
                 "megatron": Export(not_exported="a serving technique; serving plans export to vLLM (--export vllm)"),
                 "deepspeed": Export(not_exported=NOT_DEEPSPEED), "vllm": Export(apply=_vllm_slots)},
        sources=(f"{VLLM_ARGS}max_num_seqs", "assumption: a 2^(1/8) grid loses at most ~9% of the slots memory allows"),
    ),
)

TECHNIQUES = (KV_CACHE_DTYPE, PAGED_KV, SLOTS)
