"""The time-money front (``vramopt pareto --axes time,cost``; issue 17 item 3): every plan
that no other plan beats on both wall clock and money.

Training: days for ``total_tokens`` (down) against dollars (down). Serving: output tokens/s
(up) against dollars per million output tokens (down). Both axes are read from the same
integer tables the solver reads: time is the plan's ticks (step, or seconds per output
token), money the cost objective's price x GPUs x ticks (``cost_objective``).

Exact by enumeration. For one key (GPU type, count, layout, precision, micro-batch) the
money is a fixed positive multiple of the ticks, so the key's fastest plan that fits is
also its cheapest and every other plan of the key is dominated (a free GPU type, price 0,
costs 0 at any speed, so there too only the fastest counts). The front is then the 2-D
non-dominated subset of one point per key: keys in order of (ticks, money, memory, rank),
each kept when it is strictly cheaper than every faster one.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from vramopt.estimate import estimate_serving, estimate_training
from vramopt.optimizer.cost_objective import cost_per_tick
from vramopt.optimizer.decode import decode_choice
from vramopt.optimizer.interaction import grid_ticks
from vramopt.optimizer.objective import constant_mib, rank_of
from vramopt.optimizer.oracle import KEYS_PER_CHUNK, Choice, feasible_mask
from vramopt.optimizer.problem import build_problem
from vramopt.prices import PriceTable, space_prices
from vramopt.results import SCHEMA, model_summary
from vramopt.time_cost import serving_time_and_cost, training_time_and_cost
from vramopt.types import SearchSpace, ServingWorkload

AXES = ("throughput", "time,cost")
"""--axes: the front over tokens/s, GPUs and memory (``pareto``), or this one."""


def _fastest_per_key(problem) -> list[Choice]:
    """Each key's fastest fitting plan (then least memory, then the fixed order)."""
    found: list[Choice] = []
    constants = constant_mib(problem)
    for start in range(0, problem.key_count, KEYS_PER_CHUNK):
        keys = np.arange(start, min(start + KEYS_PER_CHUNK, problem.key_count))
        fits = feasible_mask(problem, keys)
        ticks = grid_ticks(problem, keys)
        memory = problem.state.memory_mib[keys][:, :, None] + problem.activation.memory_mib[keys][:, None, :]
        for local, key in enumerate(keys):
            state_items, activation_items = np.nonzero(fits[local])
            if state_items.size == 0:
                continue
            key_ticks = ticks[local, state_items, activation_items]
            key_memory = memory[local, state_items, activation_items]
            rank = rank_of(problem, key, state_items, activation_items)
            best = np.lexsort((rank, key_memory, key_ticks))[0]
            objective = (int(key_ticks[best]), int(key_memory[best]) + int(constants[key]), int(rank[best]))
            found.append(Choice(int(key), int(state_items[best]), int(activation_items[best]), objective))
    return found


def time_money_front(problem) -> list[Choice]:
    """The non-dominated (ticks, money) plans, fastest first; ``Choice.objective`` holds
    (money, ticks, memory MiB, rank)."""
    units = cost_per_tick(problem, np.arange(problem.key_count))
    points = [Choice(choice.key, choice.state_item, choice.activation_item,
                     (int(units[choice.key]) * choice.objective[0],) + choice.objective)
              for choice in _fastest_per_key(problem)]
    points.sort(key=lambda point: (point.objective[1], point.objective[0], point.objective[2], point.objective[3]))
    front: list[Choice] = []
    for point in points:
        if not front or point.objective[0] < front[-1].objective[0]:
            front.append(point)
    return front


def cost_front_response(workload, space: SearchSpace, prices: PriceTable | None = None) -> dict[str, Any]:
    """The time-money front as a v1 response (``front`` rows as ``pareto``'s, plus each
    plan's ``time_and_cost``; ``chosen`` marks the least money)."""
    started = time.perf_counter()
    serving = isinstance(workload, ServingWorkload)
    space = replace(space, objective="cost-per-token" if serving else "cost")
    problem = build_problem(workload, space)
    prices = space_prices(space.usd_per_gpu_hour) if prices is None else prices
    front = time_money_front(problem)
    cheapest = min(front, key=lambda point: (point.objective[0], point.objective[1:])) if front else None
    rows = []
    for point in front:
        plan = decode_choice(problem, point)
        estimate = estimate_serving(workload, plan) if serving else estimate_training(workload, plan)
        if not estimate.fits:
            raise ValueError(f"internal error: a time-money front plan does not fit in floating point: {plan}")
        response = estimate.to_dict()
        money = serving_time_and_cost(response, prices) if serving else training_time_and_cost(response, space.total_tokens, prices)
        rows.append({"chosen": point is cheapest, "plan": response["plan"], "memory": response["memory"],
                     "throughput": response["throughput"], "time_and_cost": money})
    objectives = (["tokens_per_s: maximize", "time_and_cost.usd_per_million_output_tokens: minimize"] if serving
                  else ["time_and_cost.wall_clock_days: minimize", "time_and_cost.usd: minimize"])
    return {
        "schema": SCHEMA,
        "workload": workload.kind,
        "model": model_summary(problem.model),
        "objectives": objectives,
        "front": rows,
        "solver": {
            "method": "exact enumeration of the candidate table: each layout's fastest fitting plan (also its cheapest), "
                      "then the 2-D non-dominated subset over time and money",
            "points": len(rows),
            "candidate_layouts": problem.key_count,
            "wall_time_s": time.perf_counter() - started,
        },
    }
