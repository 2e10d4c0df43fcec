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

REQUIRED = object()
"""``PlanField.default`` of a field every plan must name (the GPU type and count)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanField:
    """The technique's field in the typed training plan (``vramopt.plan_record.TrainingPlan``,
    generated from these declarations in ``registry.PLAN_ORDER``), the checks a plan's value
    must pass before it is encoded, and its ``vramopt estimate`` option, so that a new
    technique declares them here and touches no shared record."""

    python_type: type
    default: Any = REQUIRED
    doc: str = ""
    flags: tuple[str, ...] = ()
    """The estimate option's flags (``("--cp", "--context-parallel")``; a boolean's is
    ``("--x/--no-x",)``); the option's parameter name is the field."""
    help: str = ""
    minimum: int | None = None
    """An integer field's smallest value (its largest is ``types.MAX_COUNT``)."""
    minimum_note: str = ""
    """What the smallest value means when it is not a degree (``(or 0 for tensor_parallel)``)."""
    choices: tuple = ()
    """The values a string (or enumerated integer) field takes."""
    show_default: bool = True
    """False when the help text states the default itself (a default that follows another field)."""
    cli_type: str = ""
    """'parse': the option converts its text with the technique's ``parse`` (checkpointing's
    every:K spelling); '' for the type the declaration implies."""
    metavar: str = ""
    """The option's value placeholder in ``--help`` when ``cli_type`` is 'parse'."""
    resolve: Callable[[Any], Any] | None = None
    """plan -> the value the plan stores, for a default that follows another field
    (expert tensor parallelism's 0 is the tensor-parallel degree)."""
    option_default: Any = None
    """The estimate option's default for a field every plan must name (``--gpu b200``)."""
    follows: str = ""
    """The field whose value the estimate option takes when it is not given (gradient
    communication precision follows --precision); the option's default is then None."""

    def problem(self, name: str, value: Any) -> str:
        """Why ``value`` is not a well-formed value of the field ('' when it is)."""
        if self.python_type is int:
            if isinstance(value, bool) or not isinstance(value, int):
                return self._integer_message(name, value)
            if self.choices:
                return "" if value in self.choices else self._integer_message(name, value)
            if self.minimum is not None and not self.minimum <= value <= MAX_COUNT:
                return self._integer_message(name, value)
            return ""
        if self.choices and value not in self.choices:
            return f"{name} '{value}' is not one of {', '.join(self.choices)}"
        return ""

    def _integer_message(self, name: str, value: Any) -> str:
        if self.choices:
            listed = [str(choice) for choice in self.choices]
            return f"{name} must be {', '.join(listed[:-1])} or {listed[-1]}, got {value!r}"
        note = f" {self.minimum_note}" if self.minimum_note else ""
        return f"{name} must be an integer from {self.minimum} to {MAX_COUNT:,}{note}, got {value!r}"


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
    plan_field: PlanField | None = None
    """Its field in the typed training plan and its estimate option (every training
    technique that is not derived has one; serving plans are ``types.ServingPlan``)."""
    explain_values: Callable[..., tuple[Callable[[Any], str | None], Callable[[], list]]] | None = None
    """For a key field whose values depend on the request: ``(seq_len=, most=)`` -> (why a
    value is not searched, or None; the values it could take), which explains a domain the
    user's choices left empty (``optimizer/empty_domains.py``); None for the fields the
    explanations there spell out."""
    excludes: Callable[[Mapping[str, Any]], str] | None = None
    """For a state or activation technique: why a combination of its group's values runs on no
    key ('' when it may run; its validity rule refuses the same whatever the layout), so the
    tables never hold it (``optimizer/problem._items``); None when every combination may run."""
    aliases: tuple[str, ...] = ()
    """Short names a user may type for the field (``cp``): --pin cp=2 is answered with the
    field's real name (``optimizer/domains.py``)."""
    contribution: Any = None
    """Its validity rules, memory and time terms, contract field, display line, exports and
    sources (``constraints/contribution.Contribution``); every registered technique has one
    (``registry.NOT_MIGRATED`` is empty)."""
    serving_columns: Callable[[Any, Any], Mapping[str, int]] | None = None
    """For a serving technique: (value, GpuSpec) -> its ``costs/inference.ServingColumns``
    codes (``plan_record.serving_codes``; the GPU names the MIG profiles); None elsewhere."""
    runner_up_rank: int = 0
    """Its place among the headline techniques that ``solve`` offers runners-up for (the best
    plan deciding it differently; ``optimizer/runners_up.py``), 1 first; 0: none offered."""
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
