"""The fitted coefficients of the throughput model and their held-out errors
(``vramopt/validation/calibration.py``; printed by ``python benchmarks/calibrate_throughput.py``
and ``vramopt validate``).

Two coefficients are fitted, one per GPU generation with published runs in the project: the
Ampere large-GEMM fraction on Narayanan et al. 2021 Table 1 and the Hopper one on the
Megatron-LM README H100 weak-scaling table. Recorded (catalog values 0.7475 and 0.6775, issue
13's second pass: pipeline point-to-point time, Megatron-LM 2021's separate gradient-accumulation
pass, Megatron-Core's overlapped parameter all-gather): Narayanan in sample mean 2.4% / max
5.3%, leave-one-out 3.2% / 6.9%; Megatron README H100 in sample 5.1% / 10.2%, leave-one-out
5.5% / 10.4% (short of the issue's 5% / 10%).
"""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.costs.gemm import GENERATIONS, large_gemm_fraction_set_to
from vramopt.validation.calibration import GRID, GRID_STEP, error_table, fit, fit_sets

HELD_OUT_MEAN_BOUND = {"ampere": 0.045, "hopper": 0.07}
"""Regression bounds on the leave-one-out mean |error| (recorded 3.2% and 5.5%, plus ~1.5 points)."""
STABILITY_BAND = 0.04
"""Every refit without one row stays within 0.04 of the fit on all rows: no coefficient
hangs on a single row (recorded spread 0.7475-0.7625 and 0.675-0.685)."""


@pytest.fixture(scope="module", params=("ampere", "hopper"))
def result(request):
    return fit(request.param)


def test_one_held_out_error_per_row(result):
    _, runs = fit_sets()[result.generation]
    assert len(result.held_out_errors) == len(result.held_out_fits) == len(runs) >= 9
    assert all(np.isfinite(result.held_out_errors))


def test_the_catalog_value_is_the_fit_on_all_rows(result):
    assert result.catalog == pytest.approx(result.fitted, abs=GRID_STEP / 2 + 1e-9)
    # Below what the fastest GEMM on that generation was measured to reach.
    assert result.catalog < GENERATIONS[result.generation].max_achievable_fraction
    assert result.fitted_on.split(" (")[0] in GENERATIONS[result.generation].source


def test_each_held_out_fit_is_the_minimum_over_the_other_rows(result):
    _, runs = fit_sets()[result.generation]
    for index, value in enumerate(result.held_out_fits[:3]):
        others = runs[:index] + runs[index + 1:]
        near = [value - GRID_STEP, value, value + GRID_STEP]
        means = np.mean(np.abs(error_table(result.generation, others, np.array(near))), axis=0)
        assert means[1] <= means[0] + 1e-12 and means[1] <= means[2] + 1e-12


def test_held_out_errors_are_predictions_at_the_refit_value(result):
    _, runs = fit_sets()[result.generation]
    for run, value, error in list(zip(runs, result.held_out_fits, result.held_out_errors))[:3]:
        with large_gemm_fraction_set_to(result.generation, value):
            assert run.relative_error() == pytest.approx(error, abs=1e-12)
    assert GENERATIONS[result.generation].large_gemm_fraction == result.catalog  # restored


def test_refits_are_stable_and_the_held_out_error_is_bounded(result):
    assert all(abs(value - result.fitted) <= STABILITY_BAND for value in result.held_out_fits)
    assert np.mean(np.abs(result.held_out_errors)) <= HELD_OUT_MEAN_BOUND[result.generation]


def test_a_lower_fraction_slows_every_throughput_row():
    _, runs = fit_sets()["ampere"]
    table = error_table("ampere", runs[:3], np.array([0.65, 0.70]))
    assert np.all(table[:, 0] < table[:, 1])
    assert GRID[0] <= 0.5 and GRID[-1] >= 0.9
