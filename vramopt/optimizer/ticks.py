"""The integer conventions the tables, the pruning and the money objective share: the
step-time bound in whole ticks and the sentinel of a bound no plan reaches. A module of its
own so that ``tables``, ``prune`` and ``cost_objective`` import it instead of each other
(tests/unit/test_optimizer_imports.py)."""

from __future__ import annotations

import math

import numpy as np

MAX_BOUND_TICKS = 2**62
"""min-gpus: a step-time bound above this many ticks constrains nothing (a tiny
--min-tokens-per-s); it is capped here so that it stays an int64 for CP-SAT."""

UNREACHABLE = np.iinfo(np.int64).max // 4
"""A lower or upper bound no plan of the key reaches (a quarter of int64, so that sums of a
few of them do not overflow)."""


def bound_in_ticks(bound_s: float, tick_s: float) -> int:
    """The min-gpus step-time bound in whole ticks (rounded down: never looser than asked)."""
    ticks = bound_s / tick_s
    return MAX_BOUND_TICKS if not math.isfinite(ticks) or ticks >= MAX_BOUND_TICKS else int(math.floor(ticks))
