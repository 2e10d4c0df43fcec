"""The terms a training step's time is the sum of (``costs/training.evaluate_training``'s
outputs and the response's ``throughput`` keys), with the solver table each belongs to.

The step is ``compute + tp + cp + ep + pp`` per micro-batch slot (what one pipeline slot
holds, an activation-table quantity: checkpointing, interleaving and the overlaps change
it) plus ``dp + offload + optimizer step`` (model-state quantities: ZeRO, offload and the
optimizer format change them). The solver's tables add the two parts
(tests/unit/test_separability.py); the step-time table and the why line show them in this
order. A technique that adds a step term declares it here, once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StepTerm:
    key: str
    """The evaluate_training output and the response's throughput key, seconds per step."""
    label: str
    """Its row in the step-time table."""
    short: str
    """Its name in the why line's sum."""
    group: str
    """'activation' or 'state': the solver table that holds it."""
    always: bool
    """Shown at 0 too, in the table and the why line (compute, tp, dp, offload: 0 says the plan
    has none); else only when nonzero."""
    table_always: bool = False
    """Shown at 0 in the step-time table though not in the why line (the KV ring's row, kept
    since the table had it before expert and pipeline terms joined)."""


STEP_TERMS = (
    StepTerm("compute_s", "compute (incl. pipeline bubble {bubble})", "compute", "activation", True),
    StepTerm("tensor_parallel_s", "tensor-parallel communication", "TP", "activation", True),
    StepTerm("context_parallel_s", "context-parallel KV ring (exposed)", "CP", "activation", False, table_always=True),
    StepTerm("expert_parallel_s", "expert-parallel all-to-all (exposed)", "EP", "activation", False),
    StepTerm("pipeline_parallel_s", "pipeline point-to-point (exposed)", "PP", "activation", False),
    StepTerm("data_parallel_s", "data-parallel communication (exposed)", "DP", "state", True),
    StepTerm("offload_s", "offload transfers", "offload", "state", True),
    StepTerm("optimizer_step_s", "optimizer step", "optimizer step", "state", False),
)


def group_seconds(values, group: str):
    """The sum of one group's terms (the solver table's time)."""
    return sum(values[term.key] for term in STEP_TERMS if term.group == group)
