"""Which training and serving plans are well formed: every technique's rules, gathered in one pass.

Each technique declares its rules (``Contribution.validity``: message -> mask of the plans
that break it); this module asks them in ``registry.PLAN_ORDER``, so the exhaustive
enumerator, the solver's tables and ``estimate``'s check read one set of rules and the first
broken rule of a plan is always the same one. Serving plans read the serving techniques'
rules in ``registry.SERVING_ORDER`` the same way.
"""

from __future__ import annotations

from typing import Any

from vramopt.constraints import registry


def training_invalid_reasons(case, columns) -> dict[str, Any]:
    """Masks of plans that are not well formed, keyed by a readable reason."""
    reasons: dict[str, Any] = {}
    for technique in registry.training_techniques():
        reasons.update(technique.contribution.validity(case, columns))
    return reasons


def serving_rules(technique):
    """A technique's rules on serving plans: its ``validity`` for a serving-only technique,
    its ``serving_validity`` for one that training plans share (the layout fields)."""
    contribution = technique.contribution
    if any(kind != "infer" for kind in technique.workloads):
        return contribution.serving_validity
    return contribution.validity


def serving_invalid_reasons(case, columns) -> dict[str, Any]:
    """Masks of serving plans that are not well formed (``costs.inference.ServingCase``,
    ``ServingColumns``), keyed by a readable reason, in ``registry.SERVING_ORDER``."""
    reasons: dict[str, Any] = {}
    for technique in registry.serving_techniques():
        reasons.update(serving_rules(technique)(case, columns))
    return reasons
