"""What every technique module declares.

A technique is one plan field (``zero_stage``, ``checkpointing`` ...). Its module declares
- its group: ``key`` (layout, precision and micro-batch: fixed per candidate row), ``state``
  (model-state choices: ZeRO, offload, gradient precision) or ``activation`` (what is kept
  for the backward pass: checkpointing, flash attention, sequence parallelism, interleaving).
  The cost model is separable along these groups (tests/unit/test_separability.py), which is
  what lets the solver keep only each group's Pareto-optimal items;
- its domain: default values, and how a user's text is parsed (``--pin zero_stage=3``);
- its coefficient columns: how a value is written into ``costs.columns.PlanColumns``;
- its decode step: reading the chosen value back into the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from vramopt.errors import InputError
from vramopt.types import MAX_COUNT, TRAINING_KINDS, WORKLOADS

GROUPS = ("key", "state", "activation")


@dataclass(frozen=True, slots=True)
class DomainContext:
    """What a default domain may depend on."""

    layers: int
    gpus_per_node: int
    max_gpus: int
    global_batch: int
    allow_tp_across_nodes: bool
    allow_fp4: bool
    supported_precisions: tuple[str, ...]
    kind: str = "train"
    """The workload ('train', 'finetune', 'lora', 'qlora', 'infer')."""
    experts: int = 0
    """Routed experts per MoE layer (0 for a dense model): expert parallelism's domain."""
    checkpoint_format: str = ""
    """The serving weight format of a quantized checkpoint (an imported config.json's
    quantization_config: an AWQ checkpoint is int4); '' for 16-bit weights."""
    seq_len: int = 0
    """Tokens per training sequence (0 when unknown: serving, or a check that needs no
    sequence-dependent domain); context parallelism is searched only for long ones."""


@dataclass(frozen=True, slots=True)
class Technique:
    field: str
    """The plan field it decides, also the key of --pin/--allow/--forbid."""
    group: str
    description: str
    parse: Callable[[str], Any]
    default_values: Callable[[DomainContext], tuple]
    columns: Callable[[Any], Mapping[str, int]]
    """Value -> PlanColumns codes (empty for derived fields such as data_parallel)."""
    decode: Callable[[Mapping[str, int]], Any]
    """PlanColumns codes of the chosen row -> the plan value."""
    workloads: tuple[str, ...] = TRAINING_KINDS
    """The workloads whose plans have this field."""
    neutral: Any = None
    """For a state or activation technique: the value its group's table assumes while the
    other group is evaluated (the cost model is separable, so any valid value would do; the
    declared one is the plain choice: ZeRO-0, no offload, Adam, no checkpointing ...)."""
    derived: bool = False
    """A field the layout computes from the others (data_parallel): it is in the response's
    plan and the display, not in ``TrainingPlan``."""
    contribution: Any = None
    """Its validity rules, memory and time terms, contract field, display line, exports and
    sources (``constraints/contribution.Contribution``); every registered technique has one
    (``registry.NOT_MIGRATED`` is empty)."""
    key_domain: Any = None
    """For a key technique: how the key enumeration generates its field
    (``constraints/key_domain.KeyDomain``: candidates, rules on the layout); None for the GPU
    type, the enumeration's outer loop, and for the other groups."""

    def preference(self, value: Any, domain: Sequence) -> int:
        """Fixed tie-break order: the position in the domain's declared order."""
        return list(domain).index(value)


def parse_int(field_name: str, minimum: int = 0) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(str(text).strip())
        except ValueError:
            raise InputError(f"{field_name} value '{text}' is not an integer") from None
        if value < minimum:
            raise InputError(f"{field_name} value {value} is below {minimum}")
        if value > MAX_COUNT:
            raise InputError(f"{field_name} value {value} is above {MAX_COUNT:,}")
        return value

    return parse


def parse_bool(field_name: str) -> Callable[[str], bool]:
    truthy, falsy = {"true", "on", "yes", "1"}, {"false", "off", "no", "0"}

    def parse(text: str) -> bool:
        value = str(text).strip().lower()
        if value in truthy:
            return True
        if value in falsy:
            return False
        raise InputError(f"{field_name} value '{text}' is not true/false")

    return parse


def parse_choice(field_name: str, choices: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = str(text).strip().lower()
        if value not in choices:
            raise InputError(f"{field_name} value '{text}' is not one of {', '.join(choices)}")
        return value

    return parse
