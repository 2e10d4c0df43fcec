"""Which training plans are well formed: every technique's rules, gathered in one pass.

Each technique declares its rules (``Contribution.validity``: message -> mask of the plans
that break it); this module asks them in ``registry.PLAN_ORDER``, so the exhaustive
enumerator, the solver's tables and ``estimate``'s check read one set of rules and the first
broken rule of a plan is always the same one.
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
