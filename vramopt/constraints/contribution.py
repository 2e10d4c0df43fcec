"""The parts a technique module declares beside its domain, so that one module is its home.

A ``Contribution`` gathers what used to be spread over the tree for one technique: its
validity rules with their messages, its memory and time terms (functions the cost model
calls; the shared physics stays in ``costs/``), its field in the JSON contract, its line in
the table display, its export mapping per exporter (or an explicit note that it is not
exported there, and why), and its sources. ``tests/unit/test_technique_completeness.py``
fails when a registered technique that declares a contribution lacks any part, and when a
technique is registered without one outside the list of those not migrated yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

EXPORTERS = ("deepspeed", "vllm", "megatron", "torchtitan")
"""Every exporter a contribution must say something about."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ContractField:
    """The technique's field in the JSON response's ``plan`` object."""

    name: str
    json_type: str
    """JSON Schema type ('string', 'integer', 'boolean')."""
    description: str
    enum: tuple = ()


@dataclass(frozen=True, slots=True)
class ExportDraft:
    """What an exporter hands each technique: the response's plan (checked against the
    contract, with the defaults of older responses filled in) and model, the framework's
    configuration being built (``content``, edited in place) and the exporter's table of
    documented settings (``setting(name)``)."""

    plan: Mapping[str, Any]
    model: Mapping[str, Any]
    content: dict[str, Any]
    setting: Callable[[str], Any]

    def argument(self, flag: str, *values: Any) -> None:
        """A command-line exporter's argument (Megatron-LM's ``--context-parallel-size 2``; a
        switch has no values): the exporter writes them in its own ``ARGUMENT_ORDER``."""
        self.content.setdefault("arguments", {})[flag] = [str(value) for value in values]


@dataclass(frozen=True, kw_only=True, slots=True)
class Export:
    """How one exporter carries the technique: ``apply`` edits the exporter's content and
    returns its notes, or ``not_exported`` says why the target has nothing for it."""

    apply: Callable[[ExportDraft], list[str]] | None = None
    """Edits ``draft.content`` and returns the notes on what the target cannot say."""
    not_exported: str = ""
    launch: bool = False
    """Its notes say how the job is launched (processes, devices, replicas) rather than what
    a setting cannot express: the vLLM exporter lists them after its notes on the settings
    (the DeepSpeed exporter writes its launch note in plan order, with the others)."""

    def __post_init__(self) -> None:
        if (self.apply is None) == (not self.not_exported):
            raise ValueError("an Export has either an apply function or a not-exported note, not both or neither")


@dataclass(frozen=True, kw_only=True, slots=True)
class Gain:
    """What the technique's value in a solved plan buys against its plain value (8-bit Adam
    against Adam, expert parallelism against experts split like the dense layers): measured
    after the solve by estimating the plan again without it, written to the response under
    ``key`` only when there is something to say, and told by a sentence of the why line."""

    key: str
    """The response's top-level key ('optimizer_gain'); docs/json-contract.md."""
    measure: Callable[[Any, Any, str], Mapping[str, Any] | None]
    """(workload, estimate, framework) -> the comparison, or None when the plan uses the plain value."""
    sentence: Callable[[Mapping[str, Any], Mapping[str, Any], Callable], str]
    """(response plan, the comparison, the display's GB formatter) -> the why line's sentence."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Contribution:
    validity: Callable[[Any, Any], Mapping[str, Any]]
    """(TrainingCase, PlanColumns) -> {message: mask of plans that break the rule}; for a
    serving-only technique (ServingCase, ServingColumns) -> the same."""
    memory: Callable[..., Any]
    """The technique's memory term (its signature is documented by the technique)."""
    time: Callable[..., Any]
    """The technique's time term or the factor it applies to a shared one."""
    contract: ContractField
    display: Callable[[Mapping[str, Any]], str]
    """Plan dict -> its phrase in the table display ('' to show nothing for this plan)."""
    display_line: str = ""
    """The line of the plan table its phrase joins (``DISPLAY_LINES``); '' when the phrase
    is part of a line the display composes from several values (hardware, batch)."""
    display_separator: str = ", "
    """What goes before its phrase on the line: ', ', ' ' (the degrees tp=2 cp=1 pp=4) or '; '."""
    exports: Mapping[str, Export]
    sources: tuple[str, ...]
    serving_validity: Callable[[Any, Any], Mapping[str, Any]] | None = None
    """For a technique of training and serving plans (gpu, gpus, tp, pp): its rules on a
    serving plan, (ServingCase, ServingColumns) -> {message: mask}; None elsewhere."""
    brief: Callable[[Mapping[str, Any]], str] | None = None
    """Plan dict -> its phrase in the one-line plan descriptions of messages ('tp=2'; '' to
    leave it out for this plan); None for a technique those descriptions do not show
    (``vramopt/plan_brief.py``)."""
    framework_rules: Mapping[str, tuple] = field(default_factory=dict)
    """Framework name -> the ``frameworks.rule.Rule``s of that framework that refuse some of
    the technique's values (a technique only Megatron-LM runs declares DeepSpeed's and
    torchtitan's refusals here, each citing the framework's file and release)."""
    gain: Gain | None = None
    """What its chosen value buys, for the solve response and the why line (None: nothing
    beyond the plan's own figures)."""
    invalid_detail: Callable[[Any, Any, str], str | None] | None = None
    """(TrainingCase, TrainingPlan, broken rule's message) -> the one-line error naming this
    plan's own numbers, for a rule of this technique; None (or returning None) leaves
    ``plan.check_plan``'s generic message."""
    memory_labels: Callable[[Mapping[str, Any]], Mapping[str, str]] | None = None
    """Plan dict -> memory-table rows it renames for this plan ({'optimizer_bytes':
    'optimizer states (adam8bit)'}), so the table names the format the bytes are in."""
    layout_hint: Callable[[Any], str] | None = None
    """Workload -> the clause the "no parallel layout fits" message adds when the user pinned
    or allowed this technique's values (its divisibility rule in the workload's numbers)."""


JSON_TYPES = ("string", "integer", "boolean", "number")
DISPLAY_LINES = ("parallel", "memory", "precision", "hardware", "replicas", "weights", "")
"""Lines of the plan tables built from technique phrases: parallel, memory and precision of
the training table (in registry.PLAN_ORDER); hardware, replicas and weights of the serving
table (in registry.SERVING_ORDER; its replicas line also shows the parallel phrases of tp
and pp)."""
DISPLAY_SEPARATORS = (", ", " ", "; ")


def no_term(*arguments: Any) -> float:
    """The memory (or time) term of a technique that has none: it changes only the other
    quantity (gradient precision on the wire costs time, not memory). Declared, not left out,
    so that a missing term is a decision someone wrote down."""
    return 0.0


def no_rules(case: Any, columns: Any) -> dict[str, Any]:
    """The validity of a technique with no rule of its own: every value it takes is well
    formed on its own (the rules that involve it belong to the technique that adds them)."""
    return {}


def missing_parts(technique) -> list[str]:
    """The parts a technique lacks (empty when it is complete); the completeness test's check."""
    contribution = technique.contribution
    if not isinstance(contribution, Contribution):
        return ["contribution"]
    missing = [name for name in ("validity", "memory", "time", "display") if not callable(getattr(contribution, name, None))]
    if contribution.display_line not in DISPLAY_LINES or contribution.display_separator not in DISPLAY_SEPARATORS:
        missing.append("display")
    shared = "infer" in technique.workloads and any(kind != "infer" for kind in technique.workloads)
    if shared and not callable(contribution.serving_validity):
        missing.append("validity:serving")
    contract = contribution.contract
    if not (isinstance(contract, ContractField) and contract.name == technique.field and contract.json_type in JSON_TYPES
            and contract.description):
        missing.append("contract")
    exports = contribution.exports or {}
    for exporter in EXPORTERS:
        export = exports.get(exporter)
        if not isinstance(export, Export) or (export.apply is None and not export.not_exported):
            missing.append(f"export:{exporter}")
    if not contribution.sources or not all(isinstance(source, str) and source.strip() for source in contribution.sources):
        missing.append("sources")
    if not technique.default_values or not callable(technique.parse):
        missing.append("domain")
    if not technique.derived and technique.plan_field is None:
        missing.append("plan_field")  # its field in TrainingPlan or ServingPlan and its estimate option (plan_record.py)
    return missing
