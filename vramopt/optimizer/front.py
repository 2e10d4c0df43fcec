"""``pareto``: the exact front as a v1 response, each point re-evaluated in floating point."""

from __future__ import annotations

import time
from typing import Any

from vramopt.errors import InputError
from vramopt.estimate import estimate_serving, estimate_training
from vramopt.optimizer.decode import decode_choice
from vramopt.optimizer.pareto import exact_front, searched_gpu_counts, verify_gpu_counts, verify_with_cp_sat
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.serving_problem import build_serving_problem
from vramopt.results import SCHEMA, model_summary
from vramopt.types import SearchSpace, ServingWorkload

OBJECTIVES = ("tokens_per_s: maximize", "gpus: minimize", "memory.total_bytes (peak per GPU): minimize")


def pareto_response(workload, space: SearchSpace, verify: bool = False) -> dict[str, Any]:
    if space.objective != "throughput" or space.min_tokens_per_s is not None:
        raise InputError("the Pareto front covers tokens/s, GPUs and memory at once: --objective and --min-tokens-per-s do not apply")
    if space.total_tokens is not None or space.deadline_days is not None or space.usd_per_gpu_hour:
        raise InputError("total_tokens, deadline_days and usd_per_gpu_hour apply to the time-money front (axes time,cost), "
                         "not to the tokens/s-GPUs-memory front")
    started = time.perf_counter()
    serving = isinstance(workload, ServingWorkload)
    # Every GPU count stays in a serving table: the largest-count-per-layout pruning is
    # exact for max tokens/s only, and would drop every smaller deployment from the front.
    problem = build_serving_problem(workload, space, prune_counts=False) if serving else build_problem(workload, space)
    front = exact_front(problem)
    if verify:
        unconfirmed = verify_with_cp_sat(problem, front, workers=space.workers)
        if unconfirmed:
            raise InputError(f"internal error: CP-SAT does not confirm {len(unconfirmed)} front points")
        beaten = verify_gpu_counts(problem, front, workers=space.workers)
        if beaten:
            raise InputError(f"internal error: the front misses plans at {len(beaten)} GPU counts: {'; '.join(beaten[:3])}")
    chosen = min(front, key=lambda point: (point.ticks, point.gpus, point.memory_mib, point.choice.objective[3])) if front else None
    rows = []
    for point in front:
        plan = decode_choice(problem, point.choice)
        estimate = estimate_serving(workload, plan) if serving else estimate_training(workload, plan, space.framework)
        if not estimate.fits:
            raise InputError(f"internal error: front plan does not fit in floating point: {plan}")
        response = estimate.to_dict()
        rows.append(
            {
                "chosen": point is chosen,
                "plan": response["plan"],
                "memory": response["memory"],
                "throughput": response["throughput"],
            }
        )
    rows.sort(key=lambda row: (row["plan"]["gpus"], -row["throughput"]["tokens_per_s"], row["memory"]["total_bytes"]))
    return {
        "schema": SCHEMA,
        "workload": workload.kind,
        "model": model_summary(problem.model),
        "objectives": list(OBJECTIVES),
        "front": rows,
        "solver": {
            "method": "exact enumeration of the candidate table (the oracle's tables, group-dominance and a 3-D sweep)"
            + (f"; every point certified by CP-SAT, and for each of the {len(searched_gpu_counts(problem))} GPU counts a solve "
               "pinned to that count finds no plan the front misses" if verify else ""),
            "points": len(rows),
            "candidate_layouts": problem.key_count,
            "wall_time_s": time.perf_counter() - started,
        },
    }


def front_rows_for_csv(response: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for point in response["front"]:
        row: dict[str, Any] = {"chosen": point["chosen"]}
        for section in ("plan", "memory", "throughput", "time_and_cost"):
            for key, value in point.get(section, {}).items():
                row[f"{section}.{key}"] = value
        rows.append(row)
    return rows

