"""Golden tests on published runs: out of sample, except the Megatron-LM README H100 rows.

The fitted coefficients (``costs/gemm.py``): the Ampere large-GEMM fraction on Narayanan
et al. 2021 Table 1 (``test_narayanan_throughput.py``), the Hopper one on the Megatron-LM
README H100 rows below (in sample here; leave-one-out in ``test_throughput_calibration.py``).
Every other row is another paper's or framework's run that no fit used, evaluated with
vramopt's cost model (``evaluate_training``, what ``estimate`` calls) on the plan each source
describes (``vramopt/validation/published.py``; data and sources in
``vramopt/validation/data/``).

Tolerances, per row (``tolerance_pct`` and ``tolerance_kind`` in the data files):

- "accuracy": today's first-order model is within 8% (the throughput-v2 target's max), and
  the test holds it there.
- "regression bound": the model is further off. The tolerance is the error recorded with the
  operator-level model (throughput v2) plus 3 points (``error_when_recorded_pct``), so that
  the test catches a change that makes the row worse; it is NOT an accuracy claim.

Korthikanti et al. 2022 Table 5 (8 iteration times on A100), out of sample: mean |error|
4.0%, max 7.3% (1T, full recomputation; the operator-level model before issue 13's second
pass: 5.4% / 10.6%; the first model: 10.6% / 18.2%). The max meets the target (<= 8%), the
mean does not (<= 3.5%): ``test_table5_meets_the_v2_target`` stays a strict xfail (it fails
loudly, as XPASS, the day the model reaches it). The 1T rows are the worst: the same 1T
layout ran 8.7% faster in Korthikanti 2022 (94.42 s, 177 TFLOP/s) than in Narayanan 2021
(163 TFLOP/s), which the Ampere fraction is fitted on; the 2022 code's asynchronous backward
all-reduces and fused gradient accumulation (both modelled) explain about 5 of those points.

Rows of the calibration set the model cannot express (context or expert parallelism,
torch.compile, async TP, GPUs outside the catalog, unstated sequence lengths, end-to-end
serving with prefill) are listed in ``data/published_runs_out_of_sample.csv`` with the reason.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from out_of_sample import (
    KORTHIKANTI_TARGET_MAX,
    KORTHIKANTI_TARGET_MEAN,
    calibration_rows,
    calibration_runs,
    korthikanti_runs,
    table5_runs,
)

TABLE5_MEAN_REGRESSION_BOUND = 0.055
"""Recorded mean |error| over the eight Table 5 rows 4.0% (issue 13 second pass), plus ~1.5 points."""
TABLE5_MAX_REGRESSION_BOUND = 0.10
"""Recorded max |error| 7.3% (1T full recomputation), plus ~2.5 points."""

SHARED_CALIBRATION = Path(__file__).resolve().parents[3] / "shared" / "calibration" / "published-runs.csv"


def _ids(runs):
    return [run.case_id for run in runs]


@pytest.mark.parametrize("run", korthikanti_runs(), ids=_ids(korthikanti_runs()))
def test_korthikanti_iteration_time_within_its_tolerance(run):
    values = run.evaluate()
    error = run.relative_error(values)
    assert run.tolerance is not None, f"{run.case_id} has no tolerance"
    assert abs(error) <= run.tolerance, (
        f"{run.case_id}: vramopt {values['step_time_s']:.2f} s vs published {run.published} s ({error:+.1%}); "
        f"tolerance {run.tolerance:.0%} ({run.tolerance_kind})"
    )
    # Every configuration ran on 80 GB A100s: the model must say it fits (no headroom).
    assert values["total_bytes"] <= values["capacity_bytes"], f"{run.case_id} ran, but vramopt says it needs {values['total_bytes'] / 1e9:.1f} GB"


def test_korthikanti_parameter_counts_match_the_model_sizes():
    # Table 3's first column: 22B, 175B, 530B, 1T (nominal sizes; GPT count with biases,
    # layer norms, tied head and 2,048 learned positions).
    expected = {"22b": 22e9, "175b": 175e9, "530b": 530e9, "1t": 1.0e12}
    for run in table5_runs():
        size = run.case_id.split("_")[2]
        assert run.model.parameters.total == pytest.approx(expected[size], rel=0.01), run.case_id


def test_table5_mean_and_max_error_within_the_regression_bounds():
    errors = np.array([abs(run.relative_error()) for run in table5_runs()])
    assert errors.size == 8
    assert errors.mean() <= TABLE5_MEAN_REGRESSION_BOUND, errors
    assert errors.max() <= TABLE5_MAX_REGRESSION_BOUND, errors


@pytest.mark.xfail(strict=True, reason="throughput model v2 target not reached: Table 5 mean |error| <= 3.5%, max <= 8%; today 5.4% / 10.6%")
def test_table5_meets_the_v2_target():
    errors = np.array([abs(run.relative_error()) for run in table5_runs()])
    assert errors.mean() <= KORTHIKANTI_TARGET_MEAN and errors.max() <= KORTHIKANTI_TARGET_MAX, errors


def test_selective_plus_sequence_parallel_is_faster_than_full_recompute_in_every_row():
    # The paper's headline (Table 5): 29.0-32.1% higher throughput. vramopt must at least
    # get the direction right for every model size.
    by_size = {}
    for run in table5_runs():
        by_size.setdefault(run.case_id.split("_")[2], {})[run.case_id.rsplit("_", 1)[1]] = run.evaluate()["step_time_s"]
    for size, times in by_size.items():
        assert times["present"] < times["full"], size


@pytest.mark.parametrize("run", calibration_runs(), ids=_ids(calibration_runs()))
def test_calibration_row_within_its_tolerance(run):
    values = run.evaluate()
    error = run.relative_error(values)
    assert run.tolerance is not None, f"{run.case_id} has no tolerance"
    assert abs(error) <= run.tolerance, (
        f"{run.case_id}: vramopt {run.predicted(values):.1f} vs published {run.published} {run.metric} ({error:+.1%}); "
        f"tolerance {run.tolerance:.0%} ({run.tolerance_kind})"
    )


def test_every_calibration_row_is_evaluated_or_has_a_reason():
    rows = calibration_rows()
    assert len(rows) == len({row["case_id"] for row in rows}) == 69
    for row in rows:
        assert row["source"], row["case_id"]
        if row["status"] == "expressible":
            assert row["metric"] and row["published"] and row["mapping"], row["case_id"]
        else:
            assert row["status"] == "not_expressible" and row["reason"], row["case_id"]


@pytest.mark.skipif(not SHARED_CALIBRATION.is_file(), reason="the shared calibration set is outside this repository")
def test_copied_rows_match_the_shared_calibration_set():
    import json

    shared = {row["case_id"]: row for row in csv.DictReader(SHARED_CALIBRATION.open(newline=""))}
    ours = calibration_rows()
    assert {row["case_id"] for row in ours} == set(shared)
    keys = {"tokens_per_s_per_gpu": "tokens_per_sec_per_gpu", "model_tflops_per_gpu": "tflops_per_gpu",
            "peak_memory_gib": ("peak_memory_gib_max_over_ranks", "peak_memory_gib")}
    for row in ours:
        if row["status"] != "expressible":
            continue
        expected = json.loads(shared[row["case_id"]]["expected"])
        names = keys[row["metric"]]
        value = next(expected[name] for name in (names if isinstance(names, tuple) else (names,)) if name in expected)
        assert float(row["published"]) == value, row["case_id"]
        assert row["source"] == shared[row["case_id"]]["source"]
