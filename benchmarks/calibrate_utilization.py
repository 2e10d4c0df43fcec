#!/usr/bin/env python
"""Fit ``base_utilization`` to Narayanan et al. 2021 Table 1 and print the fit.

    python benchmarks/calibrate_utilization.py
    python benchmarks/calibrate_utilization.py --leave-one-out

The table, the GPT models and the fit live in ``tests/golden/megatron_gpt.py`` (the golden
test uses the same code). The fit minimizes the mean absolute relative error of vramopt's
``achieved_flops_per_s_per_gpu`` against the table's achieved TFLOP/s per GPU over all ten
rows. The printed value goes into ``vramopt/costs/coefficients.py`` and docs/cost-model.md.

That error is in sample. ``--leave-one-out`` also prints the out-of-sample figures: each
row predicted with the value fitted on the other nine (``tests/golden/utilization_validation.py``),
and, at the value fitted on all ten, the errors on runs never used in the fit: Korthikanti
et al. 2022 Table 5 iteration times and the calibration-set rows vramopt can express
(``tests/golden/out_of_sample.py``, data in ``tests/golden/data/``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "golden")]

from megatron_gpt import TABLE_1, fit_base_utilization  # noqa: E402
from out_of_sample import (  # noqa: E402
    KORTHIKANTI_TARGET_MAX,
    KORTHIKANTI_TARGET_MEAN,
    calibration_rows,
    calibration_runs,
    errors_at_utilization,
    korthikanti_runs,
    table5_runs,
)
from utilization_validation import leave_one_out  # noqa: E402

from vramopt.costs.coefficients import coefficient  # noqa: E402


def print_fit(title: str, **options) -> None:
    fit = fit_base_utilization(**options)
    print(title)
    print(f"  fitted base_utilization = {fit.base_utilization:.4f}")
    print(f"  mean |relative error|   = {fit.mean_abs_relative_error:.2%}")
    print(f"  max  |relative error|   = {fit.max_abs_relative_error:.2%}")
    print(f"  {'row':>8} {'published':>10} {'predicted':>10} {'error':>8}")
    for row, error in zip(TABLE_1, fit.relative_errors):
        published = row.achieved_tflops_per_gpu
        print(f"  {row.label:>8} {published:>10.0f} {published * (1 + error):>10.1f} {error:>8.1%}")


def print_leave_one_out() -> None:
    fit = fit_base_utilization()
    result = leave_one_out()
    print("Leave-one-out (refit on nine rows, predict the tenth):")
    print(f"  in sample:     mean |error| {fit.mean_abs_relative_error:.2%}, max {fit.max_abs_relative_error:.2%} (fit {fit.base_utilization:.4f})")
    print(f"  leave-one-out: mean |error| {result.mean_abs_error:.2%}, max {result.max_abs_error:.2%} "
          f"(refits {min(result.fitted):.4f}-{max(result.fitted):.4f})")
    print(f"  {'held out':>8} {'refit':>7} {'in-sample':>10} {'held-out':>9}")
    for row, value, in_sample, held_out in zip(result.held_out, result.fitted, fit.relative_errors, result.errors):
        print(f"  {row.label:>8} {value:>7.4f} {in_sample:>+10.1%} {held_out:>+9.1%}")


def _print_runs(title: str, runs, utilization: float) -> list[float]:
    current = coefficient("base_utilization")
    errors = errors_at_utilization(runs, utilization, current)
    print(title)
    print(f"  {'case':<36} {'metric':<21} {'published':>10} {'vramopt':>10} {'error':>7} {'fits':>5} {'tolerance':>9}")
    for run, error in zip(runs, errors):
        values = run.evaluate()
        fits = "yes" if values["total_bytes"] <= values["capacity_bytes"] else "NO"
        tolerance = f"{run.tolerance:.0%}" if run.tolerance is not None else "-"
        print(f"  {run.case_id:<36} {run.metric:<21} {run.published:>10.2f} {run.published * (1 + error):>10.2f} "
              f"{error:>+7.1%} {fits:>5} {tolerance:>9}")
    return errors


def print_out_of_sample() -> None:
    utilization = fit_base_utilization().base_utilization
    print(f"Out of sample at the fitted base_utilization {utilization:.4f} (fits: at 0% headroom on the catalog GPU):")
    runs = korthikanti_runs()
    errors = _print_runs("Korthikanti et al. 2022 Table 5 (iteration time, s), and section 6.3's 530B at dp 8:", runs, utilization)
    in_table5 = {run.case_id for run in table5_runs()}
    table5_errors = np.abs([error for run, error in zip(runs, errors) if run.case_id in in_table5])
    print(f"  Table 5 (8 rows): mean |error| {table5_errors.mean():.2%}, max {table5_errors.max():.2%} "
          f"(target of the throughput-v2 issue: mean <= {KORTHIKANTI_TARGET_MEAN:.1%}, max <= {KORTHIKANTI_TARGET_MAX:.0%})")
    runs = calibration_runs()
    errors = np.abs(_print_runs("Calibration-set rows vramopt can express:", runs, utilization))
    throughput = [abs(e) for run, e in zip(runs, errors) if run.metric != "peak_memory_gib"]
    memory = [abs(e) for run, e in zip(runs, errors) if run.metric == "peak_memory_gib"]
    print(f"  throughput rows ({len(throughput)}): mean |error| {sum(throughput) / len(throughput):.2%}, max {max(throughput):.2%}")
    print(f"  memory rows ({len(memory)}): mean |error| {sum(memory) / len(memory):.2%}, max {max(memory):.2%}")
    skipped = [row for row in calibration_rows() if row["status"] != "expressible"]
    print(f"  not expressible: {len(skipped)} of {len(calibration_rows())} rows (reasons in tests/golden/data/published_runs_out_of_sample.csv)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leave-one-out", action="store_true", help="also print leave-one-out and out-of-sample errors")
    arguments = parser.parse_args()
    print(f"base_utilization in coefficients.py now: {coefficient('base_utilization')}")
    print_fit("Micro-batch and virtual stages of examples/sc21/run_table_1.sh (the calibration):")
    print_fit("Sensitivity: micro-batch 1 and no interleaving in every row:", micro_batch=1, virtual_stages=1)
    if arguments.leave_one_out:
        print()
        print_leave_one_out()
        print()
        print_out_of_sample()


if __name__ == "__main__":
    main()
