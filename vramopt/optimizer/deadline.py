"""What a money objective with a deadline needs from the search itself: why no plan meets
the deadline (the fastest plan's days), and the fewest GPUs whose plans meet it. Apart from
``cost_objective`` because they run the oracle and the bounds, which read the objective
(``objective`` -> ``cost_objective``): one module each way, no import cycle."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from vramopt.optimizer.cost_objective import SECONDS_PER_DAY, tokens_per_step
from vramopt.optimizer.interaction import plan_seconds
from vramopt.optimizer.oracle import KEYS_PER_CHUNK, best_in_keys_by_bound, feasible_mask
from vramopt.optimizer.prune import lower_bounds


def deadline_reason(problem, try_build) -> tuple[str, float] | None:
    """Why a cost request with a deadline has no plan, when the deadline is the reason: the
    fastest plan of the same space (no deadline) and its days. None when no plan fits even
    without the deadline (memory is then the reason). ``try_build(workload, space)`` is the
    explainer's problem builder (None when the space is empty)."""
    space, workload = problem.space, problem.workload
    if space.objective != "cost" or space.deadline_days is None:
        return None
    fastest_problem = try_build(workload, replace(space, objective="throughput", deadline_days=None))
    if fastest_problem is None:
        return None
    best = best_in_keys_by_bound(fastest_problem, np.arange(fastest_problem.key_count), lower_bounds(fastest_problem))
    if best is None:
        return None
    step_s = plan_seconds(fastest_problem, best.key, best.state_item, best.activation_item)
    days = space.total_tokens * float(step_s) / tokens_per_step(workload) / SECONDS_PER_DAY
    gpus = int(fastest_problem.keys["gpus"][best.key])
    gpu = fastest_problem.gpu_of(best.key).name
    reason = (f"no plan ends {space.total_tokens:,} tokens within the {space.deadline_days:g}-day deadline: the fastest plan "
              f"within {space.max_gpus} GPUs ({gpus}x {gpu}) takes {days:,.1f} days")
    return reason, days


def smallest_count_meeting_deadline(problem) -> int | None:
    """The fewest GPUs with a plan that fits and meets the deadline (exact: the plans'
    feasibility, deadline bound included, checked count by count)."""
    for count in np.unique(problem.keys["gpus"]):
        keys = np.flatnonzero(problem.keys["gpus"] == count)
        for start in range(0, keys.size, KEYS_PER_CHUNK):
            if feasible_mask(problem, keys[start : start + KEYS_PER_CHUNK]).any():
                return int(count)
    return None
