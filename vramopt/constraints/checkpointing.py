"""Activation checkpointing: none, selective (attention core recomputed, Korthikanti et al.
2022), or full recomputation with a checkpoint every k layers for each k dividing the
layers of a pipeline stage (filtered per layout)."""

from __future__ import annotations

from vramopt.constraints.parallelism import divisors
from vramopt.constraints.technique import Technique
from vramopt.costs.columns import CHECKPOINT_EVERY
from vramopt.errors import InputError
from vramopt.plan import checkpointing_name, parse_checkpointing


def _parse(text: str) -> str:
    kind, every = parse_checkpointing(text)
    return checkpointing_name(kind, every)


def _default_values(context) -> tuple[str, ...]:
    return ("none", "selective") + tuple(f"every:{k}" for k in divisors(context.layers))


def _columns(value: str) -> dict[str, int]:
    kind, every = parse_checkpointing(value)
    return {"checkpoint_kind": kind, "checkpoint_every": every}


CHECKPOINTING = Technique(
    field="checkpointing",
    group="activation",
    description="activation checkpointing: none, selective, every:K (full recomputation)",
    parse=_parse,
    default_values=_default_values,
    columns=_columns,
    decode=lambda codes: checkpointing_name(int(codes["checkpoint_kind"]), int(codes["checkpoint_every"])),
)


def segment_fits_stage(value: str, layers_per_stage: int) -> bool:
    kind, every = parse_checkpointing(value)
    return kind != CHECKPOINT_EVERY or layers_per_stage % every == 0


TECHNIQUES = (CHECKPOINTING,)
__all__ = ["CHECKPOINTING", "InputError", "segment_fits_stage"]
