"""KV cache for serving: its dtype, paged (PagedAttention) or contiguous allocation, and
the concurrent slots it is sized for.

Slots are a decision on a geometric grid (ratio 2^(1/8), 1 to 2,048): the best plan
usually holds as many sequences as memory and the latency bound allow, and a ~9% grid
keeps the table small while losing at most ~9% of the slots memory allows.
``--allow slots=...`` sets exact values.
"""

from __future__ import annotations

from vramopt.constraints.technique import Technique, parse_bool, parse_choice, parse_int
from vramopt.costs.inference import KV_CACHE_DTYPES

SLOT_GRID = tuple(sorted({round(2 ** (step / 8)) for step in range(0, 89)}))

KV_CACHE_DTYPE = Technique(
    field="kv_cache_dtype",
    group="state",
    description="KV cache element type (fp8 halves it; needs fp8 support)",
    parse=parse_choice("kv_cache_dtype", KV_CACHE_DTYPES),
    default_values=lambda context: tuple(name for name in KV_CACHE_DTYPES if name == "bf16" or name in context.supported_precisions),
    columns=lambda value: {"kv_cache_dtype": value},
    decode=lambda codes: codes["kv_cache_dtype"],
    workloads=("infer",),
)

PAGED_KV = Technique(
    field="paged_kv",
    group="state",
    description="PagedAttention: store only the tokens in use (in blocks) instead of the full context per slot",
    parse=parse_bool("paged_kv"),
    default_values=lambda context: (True, False),
    columns=lambda value: {"paged_kv": value},
    decode=lambda codes: codes["paged_kv"],
    workloads=("infer",),
)

SLOTS = Technique(
    field="slots",
    group="state",
    description="concurrent sequences per replica (vLLM max-num-seqs)",
    parse=parse_int("slots", 1),
    default_values=lambda context: SLOT_GRID,
    columns=lambda value: {"slots": value},
    decode=lambda codes: codes["slots"],
    workloads=("infer",),
)

TECHNIQUES = (KV_CACHE_DTYPE, PAGED_KV, SLOTS)
