"""Speculative decoding (Leviathan et al. 2023): a small draft model proposes tokens the
target verifies in one pass; costs the draft's weights and KV cache, gains tokens per step
from the acceptance rate (costs/inference.py)."""

from __future__ import annotations

from vramopt.constraints.technique import Technique, parse_bool

SPECULATIVE_DECODING = Technique(
    field="speculative_decoding",
    group="state",
    description="speculative decoding with a draft model",
    parse=parse_bool("speculative_decoding"),
    default_values=lambda context: (False, True),
    columns=lambda value: {"speculative_decoding": value},
    decode=lambda codes: codes["speculative_decoding"],
    workloads=("infer",),
)

TECHNIQUES = (SPECULATIVE_DECODING,)
