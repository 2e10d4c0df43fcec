"""ZeRO stage (Rajbhandari et al. 2020): 0 (DDP), 1 optimizer, 2 + gradients, 3 + weights."""

from __future__ import annotations

from vramopt.constraints.technique import Technique, parse_int

ZERO_STAGE = Technique(
    field="zero_stage",
    group="state",
    description="ZeRO stage: shard optimizer states (1), gradients (2), weights (3) over data parallel",
    parse=parse_int("zero_stage", 0),
    default_values=lambda context: (0, 1, 2, 3),
    columns=lambda value: {"zero_stage": value},
    decode=lambda codes: int(codes["zero_stage"]),
)

TECHNIQUES = (ZERO_STAGE,)
