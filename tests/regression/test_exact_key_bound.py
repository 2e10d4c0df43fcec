"""issue 18 item 3 (a lean model): each key's best primary objective is computed exactly
before CP-SAT (``prune.fitting_min_ticks``), and the CP model holds only the keys that reach
the best of them. Checked against brute force: every (key, state item, activation item)
triple of the integer tables, enumerated with the oracle's ``feasible_mask``."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from vramopt.optimizer.oracle import feasible_mask, solve_exhaustive
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.prune import fitting_min_ticks, primary_of_ticks, reduce
from vramopt.optimizer.ticks import UNREACHABLE
from vramopt.types import SearchSpace, TrainingWorkload

CASES = [
    (TrainingWorkload(model="2t"), SearchSpace(max_gpus=16)),
    (TrainingWorkload(model="llama-3.1-70b"), SearchSpace(max_gpus=64)),
    (TrainingWorkload(model="mixtral-8x7b"), SearchSpace(gpus=("h100",), max_gpus=16, objective="per-gpu")),
    (TrainingWorkload(model="llama-3.1-8b"), SearchSpace(gpus=("a100-40gb",), max_gpus=16, objective="min-gpus", min_tokens_per_s=20_000.0)),
    (TrainingWorkload(model="llama-3.1-70b"), SearchSpace(gpus=("h100", "a100-80gb"), max_gpus=32, objective="cost",
                                                          total_tokens=10**12, usd_per_gpu_hour={"h100": 3.0, "a100-80gb": 1.5})),
]


def _brute_min_ticks(problem, keys: np.ndarray) -> np.ndarray:
    """Per key: the fewest ticks over every fitting (state, activation) pair (the oracle's
    mask, with the step-time bound left out), UNREACHABLE where none fits."""
    fits = feasible_mask(replace(problem, bound_ticks=None), keys)  # the bound is primary_of_ticks' to apply
    ticks = problem.state.time_ticks[keys][:, :, None] + problem.activation.time_ticks[keys][:, None, :]
    return np.where(fits, ticks, UNREACHABLE).min(axis=(1, 2))


@pytest.mark.parametrize(("workload", "space"), CASES)
def test_each_keys_fewest_fitting_ticks_equal_brute_force(workload, space):
    """issue 18 item 3: the sorted scan gives every key's exact fastest fitting pair."""
    problem = build_problem(workload, space)
    keys = np.arange(problem.key_count)
    ticks, state_item = fitting_min_ticks(problem, keys)
    expected = _brute_min_ticks(problem, keys)
    np.testing.assert_array_equal(ticks, expected)
    assert (expected < UNREACHABLE).any()
    fits = ticks < UNREACHABLE
    # The state item returned is part of such a pair.
    rows = np.flatnonzero(fits)
    leftover = problem.budget_mib[rows] - problem.state.memory_mib[rows, state_item[rows]]
    allowed = problem.activation.valid[rows] & (problem.activation.memory_mib[rows] <= leftover[:, None])
    best_activation = np.where(allowed, problem.activation.time_ticks[rows], UNREACHABLE).min(axis=1)
    np.testing.assert_array_equal(problem.state.time_ticks[rows, state_item[rows]] + best_activation, ticks[rows])


@pytest.mark.parametrize("probe_keys", [1, 64])
@pytest.mark.parametrize(("workload", "space"), CASES)
def test_the_cp_model_holds_exactly_the_keys_that_reach_the_primary_optimum(workload, space, probe_keys, monkeypatch):
    """issue 18 item 3: the ties are the keys whose brute-force best primary objective is the
    optimum's (so none that could hold the optimum is dropped), and the optimum is among them,
    whatever number of probe keys bounds the exact scan."""
    pytest.importorskip("ortools")
    from vramopt.optimizer import prune
    from vramopt.optimizer.solve import build_model, solve_cp

    monkeypatch.setattr(prune, "EXACT_PROBE_KEYS", probe_keys)
    problem = build_problem(workload, space)
    reduced = reduce(problem)
    optimum = solve_exhaustive(problem)
    assert optimum is not None
    keys = np.arange(problem.key_count)
    primary = primary_of_ticks(problem, keys, _brute_min_ticks(problem, keys))
    assert reduced.primary == optimum.objective[0] == primary.min()
    reaching = set(np.flatnonzero(primary == optimum.objective[0]).tolist())
    model = build_model(problem, reduced)
    assert set(model.key_literals) == reaching
    assert solve_cp(problem, 60.0, 1).choice == optimum
