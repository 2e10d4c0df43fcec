"""Training precision and the precision of gradients on the wire.

Default domain: for pretraining bf16 and, where the GPU's tensor cores run it, fp8 (the
seed recommends FP8 for pretraining and BF16 as the safe default); for fine-tuning, LoRA
and QLoRA bf16 only (the seed: BF16 for fine-tuning). fp16 and fp32 are available with
``--allow precision=...``; fp4 only with ``--allow-fp4`` (the seed: not production-ready).
Gradient communication defaults to the training precision; ``--allow
grad_comm_precision=fp8`` lets the search quantize gradients on the wire (an accuracy risk
vramopt does not price, so it is opt-in).
"""

from __future__ import annotations

from vramopt.constraints.technique import DomainContext, Technique, parse_choice
from vramopt.types import PRECISIONS

PREFERENCE = ("bf16", "fp8", "fp16", "fp32", "fp4")
"""Tie-break order among precisions: the safe default first."""


def _default_precisions(context: DomainContext) -> tuple[str, ...]:
    if context.kind != "train":
        # The seed: "use BF16 for fine-tuning where every quality point matters".
        return ("bf16",)
    wanted = ["bf16", "fp8"] + (["fp4"] if context.allow_fp4 else [])
    return tuple(value for value in wanted if value in context.supported_precisions)


PRECISION = Technique(
    field="precision",
    group="key",
    description="compute precision of weights, gradients and activations (Adam states stay fp32)",
    parse=parse_choice("precision", PRECISIONS),
    default_values=_default_precisions,
    columns=lambda value: {"precision": PRECISIONS.index(value)},
    decode=lambda codes: PRECISIONS[int(codes["precision"])],
)

SAME_AS_PRECISION = "same"

GRAD_COMM_PRECISION = Technique(
    field="grad_comm_precision",
    group="state",
    description="precision of gradients in data-parallel communication",
    parse=parse_choice("grad_comm_precision", PRECISIONS),
    default_values=lambda context: (SAME_AS_PRECISION,),
    columns=lambda value: {"grad_comm_precision": PRECISIONS.index(value)},
    decode=lambda codes: PRECISIONS[int(codes["grad_comm_precision"])],
)

TECHNIQUES = (PRECISION, GRAD_COMM_PRECISION)
