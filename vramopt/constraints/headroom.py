"""The headroom rule: every GPU keeps at least a fraction of its memory free.

Integer boundary (DESIGN.md section 4): each memory part is rounded *up* to whole MiB and
the budget ``capacity * (1 - headroom)`` *down*, so a plan that fits in integers also fits
in floating point; the decoded plan is re-evaluated in float regardless.
"""

from __future__ import annotations


def encode_memory_budget(cp, key_literal, state_items, activation_items, budget_mib: int, name: str) -> None:
    """For one candidate key: chosen state memory + chosen activation memory <= budget.

    ``state_items`` / ``activation_items`` are (literal, memory_mib) pairs; the key's
    constant memory (logits, framework reserve) is already subtracted from ``budget_mib``.
    Written per key (not one global row) because it keeps the LP relaxation tight.
    """
    from ortools.sat.python import cp_model  # the solver's, only when a model is built

    items = state_items + activation_items + [(key_literal, -budget_mib)]  # parts - budget x key <= 0
    terms = cp_model.LinearExpr.weighted_sum([literal for literal, _ in items], [mib for _, mib in items])
    cp.add(terms <= 0).with_name(f"headroom[{name}]")


TECHNIQUES = ()
