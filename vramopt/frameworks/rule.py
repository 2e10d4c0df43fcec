"""What a target framework declares: the plans it can run, as masks over the search tables.

A ``Framework`` is a list of ``Rule`` objects. Each rule reads the key columns (layout,
precision, micro-batch) and the columns of at most one technique group (``state``: ZeRO,
offload, optimizer, gradient precision; or ``activation``: checkpointing, flash attention,
sequence parallelism, virtual stages), so that applying it to each group's table keeps the
cost model separable: a (key, state item, activation item) triple is legal under the
framework exactly when the key-and-state rules pass on its state item and the
key-and-activation rules pass on its activation item. ``tests/unit/test_frameworks.py``
fails when a rule reads a column outside its group.

Both engines (CP-SAT and the exhaustive oracle) read the masked tables, so they search the
same space; ``estimate`` refuses a plan that breaks a rule, naming the rule and its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from vramopt.costs.columns import PlanColumns

RULE_GROUPS = ("key", "state", "activation")



def group_column_names() -> dict[str, tuple[str, ...]]:
    """The PlanColumns the techniques of each group write (``Technique.columns`` of a value
    of their domain): a rule of the key group reads only the key columns, a rule of another
    group the key columns and its own (tests/unit/test_frameworks.py checks every rule)."""
    from vramopt.constraints import registry
    from vramopt.constraints.technique import REQUIRED

    names: dict[str, list[str]] = {group: [] for group in RULE_GROUPS}
    for technique in registry.training_techniques():
        if technique.derived:
            written: tuple[str, ...] = (technique.field,)
        else:
            declaration = technique.plan_field
            written = tuple(technique.columns(declaration.option_default if declaration.default is REQUIRED else declaration.default))
        names[technique.group].extend(name for name in written if name not in names[technique.group])
    return {group: tuple(columns) for group, columns in names.items()}


@dataclass(frozen=True, kw_only=True, slots=True)
class Rule:
    """One thing the framework refuses, with where its code says so."""

    message: str
    """What the framework refuses, as the user reads it ('DeepSpeed: pipeline parallelism
    needs zero_stage <= 1')."""
    group: str
    """'key', 'state' or 'activation': the technique group whose columns the rule reads."""
    refuses: Callable[[PlanColumns], np.ndarray]
    """PlanColumns -> bool mask of the plans the framework cannot run."""
    source: str
    """The framework's file and release that enforce or imply the rule."""
    enforced: bool = False
    """True when the framework's own code raises on such a plan (an exported config would be
    refused at start-up); False when it only has no mechanism that runs the plan as planned.
    Exporters refuse the enforced rules and leave the others to their notes."""

    def __post_init__(self) -> None:
        if self.group not in RULE_GROUPS:
            raise ValueError(f"rule group '{self.group}' is not one of {', '.join(RULE_GROUPS)}")
        if not self.message or not self.source:
            raise ValueError("a rule needs a message and a source")


@dataclass(frozen=True, kw_only=True, slots=True)
class Framework:
    """A training framework: its name, the release the rules were read from, and its rules."""

    name: str
    display_name: str
    version: str
    """The release whose code the rules and sources cite."""
    description: str
    rules: tuple[Rule, ...]
    sources: tuple[str, ...] = ()
    case_options: tuple[tuple[str, Any], ...] = ()
    """``TrainingCase`` fields the framework's runtime sets for the plans it exports (torchtitan
    0.3.0: the loss in 8 chunks, compiled), as (field, value) pairs; the published runs that
    calibrate the model set their own."""

    @property
    def all_rules(self) -> tuple[Rule, ...]:
        """The framework module's rules, then those a technique declares about this framework
        (``Contribution.framework_rules``: a technique the framework cannot run says so in its
        own module)."""
        from vramopt.constraints import registry

        declared = tuple(rule for technique in registry.training_techniques()
                         for rule in technique.contribution.framework_rules.get(self.name, ()))
        return self.rules + declared

    def refused(self, columns: PlanColumns, groups: tuple[str, ...] = RULE_GROUPS, enforced_only: bool = False) -> dict[str, np.ndarray]:
        """{message (source): mask} of the rules of ``groups`` over ``columns`` (only those
        the framework's code raises on, with ``enforced_only``)."""
        size = len(columns)
        return {
            f"{rule.message} ({rule.source})": np.broadcast_to(np.asarray(rule.refuses(columns), dtype=bool), (size,))
            for rule in self.all_rules
            if rule.group in groups and (rule.enforced or not enforced_only)
        }
