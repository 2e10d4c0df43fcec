"""Property tests of the money objectives (issue 17 item 3): CP-SAT equals brute force on
the integer tables, and the answer is the least money in floating point too, computed
here from the tables' seconds and the float prices (not from the integer objective).

Requests are the solver properties' random requests with a money objective, random prices
(zero included) for the GPU types drawn, a token budget and, for training, sometimes a
deadline.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from vramopt.errors import InputError
from vramopt.estimate import estimate_serving, estimate_training
from vramopt.optimizer.decode import decode_choice
from vramopt.optimizer.oracle import feasible_mask, solve_exhaustive
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.solve import solve_cp
from vramopt.types import ServingWorkload
from tests.property.test_solver_properties import requests

PRICES = (0.0, 0.35, 1.29, 2.0, 2.69, 3.59, 5.98)
TOKENS = (10**9, 10**11, 15 * 10**12)


@st.composite
def cost_requests(draw):
    workload, space = draw(requests())
    serving = isinstance(workload, ServingWorkload)
    prices = {gpu: draw(st.sampled_from(PRICES)) for gpu in space.gpus}
    space = replace(space, objective="cost-per-token" if serving else "cost", min_tokens_per_s=None,
                    usd_per_gpu_hour=prices, total_tokens=None if serving else draw(st.sampled_from(TOKENS)))
    if not serving and draw(st.booleans()):
        space = replace(space, deadline_days=draw(st.sampled_from((1.0, 30.0, 365.0, 3650.0))))
    return workload, space


def _problem(workload, space):
    try:
        return build_problem(workload, space)
    except InputError:
        assume(False)


def _float_costs(problem, space):
    """Money of every feasible plan in floating point: price x GPUs x seconds per step (or
    per output token), proportional to the dollars of the whole budget."""
    keys = np.arange(problem.key_count)
    fits = feasible_mask(problem, keys)
    seconds = problem.state.time_s[:, :, None] + problem.activation.time_s[:, None, :]
    price = np.array([space.usd_per_gpu_hour[gpu.name] for gpu in problem.gpus])[problem.keys["gpu_index"]]
    money = (price * problem.keys["gpus"])[:, None, None] * seconds
    return np.where(fits, money, np.inf)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cost_requests())
def test_cost_objectives_cp_sat_equals_exhaustive_and_is_least_money_in_floating_point(request):
    workload, space = request
    problem = _problem(workload, space)
    outcome = solve_cp(problem, time_limit_s=30.0, workers=1)
    exhaustive = solve_exhaustive(problem)
    event(f"{space.objective}, deadline {space.deadline_days}: {'feasible' if exhaustive else 'infeasible'}")
    assert outcome.status in ("optimal", "infeasible")
    if exhaustive is None:
        assert outcome.choice is None
        return
    assert outcome.choice == exhaustive
    money = _float_costs(problem, space)
    chosen = money[exhaustive.key, exhaustive.state_item, exhaustive.activation_item]
    # Integer prices are 1/10,000 of the dearest (a cheap GPU's price is coarser
    # relatively) and ticks 1e-6 of the fastest step: the float optimum may differ by that.
    units = np.array(problem.gpu_price_units, dtype=float)
    positive = units[units > 0]
    price_error = float((0.5 / positive).max()) if positive.size else 0.0
    assert chosen <= money.min() * (1 + 2 * price_error + 1e-4) + 1e-12
    plan = decode_choice(problem, exhaustive)
    if isinstance(workload, ServingWorkload):
        assert estimate_serving(workload, plan).fits
        return
    estimate = estimate_training(workload, plan)
    assert estimate.fits
    if space.deadline_days is not None:
        days = space.total_tokens / estimate.tokens_per_s / 86_400
        assert days <= space.deadline_days * (1 + 1e-9)
