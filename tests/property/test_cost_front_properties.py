"""The time-money front (issue 17 item 3, `pareto --axes time,cost`) equals the brute-force
non-dominated set over every feasible plan of the table (every key x state x activation
item, not one plan per key), on random money requests."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, assume, event, given, settings

from vramopt.errors import InputError
from vramopt.optimizer.cost_front import time_money_front
from vramopt.optimizer.oracle import feasible_mask
from vramopt.optimizer.problem import build_problem
from tests.property.test_cost_objective_properties import cost_requests


def _brute_force_front(problem) -> set[tuple[int, int]]:
    keys = np.arange(problem.key_count)
    fits = feasible_mask(problem, keys)
    key, state, activation = np.nonzero(fits)
    ticks = problem.state.time_ticks[key, state] + problem.activation.time_ticks[key, activation]
    units = np.array(problem.gpu_price_units, dtype=np.int64)[problem.keys["gpu_index"][key]]
    money = units * problem.keys["gpus"][key] * ticks
    # Every plan, not one per key: sorted by time then money, a point is non-dominated when
    # it is cheaper than every faster-or-as-fast one.
    front, cheapest = set(), None
    for t, m in sorted(set(zip(ticks.tolist(), money.tolist()))):
        if cheapest is None or m < cheapest:
            front.add((t, m))
            cheapest = m
    return front


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cost_requests())
def test_time_money_front_is_the_brute_force_non_dominated_set(request):
    workload, space = request
    try:
        problem = build_problem(workload, space)
    except InputError:
        assume(False)
    front = time_money_front(problem)
    event(f"front of {'1' if len(front) < 2 else '2 or more'} points")
    assert {(point.objective[1], point.objective[0]) for point in front} == _brute_force_front(problem)


def test_a_many_point_front_equals_the_brute_force_one():
    from vramopt.types import SearchSpace, TrainingWorkload

    problem = build_problem(TrainingWorkload(model="llama-3.1-8b", seq_len=4096, global_batch=256),
                            SearchSpace(gpus=("h100", "b200"), max_gpus=64, objective="cost", total_tokens=10**12,
                                        usd_per_gpu_hour={"h100": 1.0, "b200": 5.98}, workers=1))
    front = time_money_front(problem)
    assert len(front) >= 5
    assert {(point.objective[1], point.objective[0]) for point in front} == _brute_force_front(problem)
