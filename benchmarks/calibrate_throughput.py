#!/usr/bin/env python
"""Fit the throughput model's free coefficients and print in-sample, leave-one-out and
out-of-sample errors.

    python benchmarks/calibrate_throughput.py

One coefficient per GPU generation is fitted (``vramopt/validation/calibration.py``): the
Ampere large-GEMM fraction on Narayanan et al. 2021 Table 1, the Hopper one on the
Megatron-LM README H100 weak-scaling table; and the sustained rate of the 500 W Grand Teton H100
of torchtitan's runs on its four Dec 2024 8B rows. The printed fits go into ``FITTED_A100`` /
``FITTED_H100`` in ``vramopt/costs/gemm.py`` and ``SUSTAINED_RATE_FRACTION`` in
``vramopt/validation/grand_teton.py``. Per-row errors follow, then the report of
``vramopt validate`` (every other published run is out of sample).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from vramopt.cli_validate import render_validation  # noqa: E402
from vramopt.validate import validation_report  # noqa: E402
from vramopt.validation.calibration import fit  # noqa: E402


def main() -> None:
    for generation in ("ampere", "hopper", "grand_teton"):
        result = fit(generation)
        print(f"{generation}: fitted on {result.fitted_on}")
        print(f"  fit on all rows {result.fitted:.4f} (catalog {result.catalog:.4f}); "
              f"leave-one-out refits {min(result.held_out_fits):.4f}-{max(result.held_out_fits):.4f}")
        inside, held = np.abs(result.in_sample_errors), np.abs(result.held_out_errors)
        print(f"  in sample:     mean {inside.mean():.2%}, max {inside.max():.2%}")
        print(f"  leave-one-out: mean {held.mean():.2%}, max {held.max():.2%}")
        for case, error, held_out in zip(result.case_ids, result.in_sample_errors, result.held_out_errors):
            print(f"    {case:<26} {error:+7.2%}   held out {held_out:+7.2%}")
    print()
    print(render_validation([row.to_dict() for row in validation_report()]))


if __name__ == "__main__":
    main()
