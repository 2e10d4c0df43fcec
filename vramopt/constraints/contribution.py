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

from dataclasses import dataclass
from typing import Any, Callable, Mapping

EXPORTERS = ("deepspeed", "vllm")
"""Every exporter a contribution must say something about."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ContractField:
    """The technique's field in the JSON response's ``plan`` object."""

    name: str
    json_type: str
    """JSON Schema type ('string', 'integer', 'boolean')."""
    description: str
    enum: tuple = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Export:
    """How one exporter carries the technique: ``apply`` edits the exporter's content and
    returns its notes, or ``not_exported`` says why the target has nothing for it."""

    apply: Callable[[Any, dict[str, Any]], list[str]] | None = None
    not_exported: str = ""

    def __post_init__(self) -> None:
        if (self.apply is None) == (not self.not_exported):
            raise ValueError("an Export has either an apply function or a not-exported note, not both or neither")


@dataclass(frozen=True, kw_only=True, slots=True)
class Contribution:
    validity: Callable[[Any, Any], Mapping[str, Any]]
    """(TrainingCase, PlanColumns) -> {message: mask of plans that break the rule}."""
    memory: Callable[..., Any]
    """The technique's memory term (its signature is documented by the technique)."""
    time: Callable[..., Any]
    """The technique's time term or the factor it applies to a shared one."""
    contract: ContractField
    display: Callable[[Mapping[str, Any]], str]
    """Plan dict -> the text of its line (or phrase) in the table display."""
    exports: Mapping[str, Export]
    sources: tuple[str, ...]


JSON_TYPES = ("string", "integer", "boolean", "number")


def missing_parts(technique) -> list[str]:
    """The parts a technique lacks (empty when it is complete); the completeness test's check."""
    contribution = technique.contribution
    if not isinstance(contribution, Contribution):
        return ["contribution"]
    missing = [name for name in ("validity", "memory", "time", "display") if not callable(getattr(contribution, name, None))]
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
    return missing
