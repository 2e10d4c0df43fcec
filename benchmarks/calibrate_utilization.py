#!/usr/bin/env python
"""Fit ``base_utilization`` to Narayanan et al. 2021 Table 1 and print the fit.

    python benchmarks/calibrate_utilization.py

The table, the GPT models and the fit live in ``tests/golden/megatron_gpt.py`` (the golden
test uses the same code). The fit minimizes the mean absolute relative error of vramopt's
``achieved_flops_per_s_per_gpu`` against the table's achieved TFLOP/s per GPU over all ten
rows. The printed value goes into ``vramopt/costs/coefficients.py`` and docs/cost-model.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "golden")]

from megatron_gpt import TABLE_1, fit_base_utilization  # noqa: E402

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


def main() -> None:
    print(f"base_utilization in coefficients.py now: {coefficient('base_utilization')}")
    print_fit("Micro-batch and virtual stages of examples/sc21/run_table_1.sh (the calibration):")
    print_fit("Sensitivity: micro-batch 1 and no interleaving in every row:", micro_batch=1, virtual_stages=1)


if __name__ == "__main__":
    main()
