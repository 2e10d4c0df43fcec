"""Fitting the free coefficients of the training cost model, and their held-out error.

The operator-level model (``costs/operators.py``) has one free coefficient per GPU
generation: the large-GEMM fraction of peak (``costs/gemm.py`` ``GENERATIONS``). Everything
else is a datasheet figure, a shape, a byte count or an assumption with its source. Three are
fitted, each on one stated set of published runs, and nothing else is fitted:

- Ampere: Narayanan et al. 2021 Table 1 (ten A100 rows, achieved TFLOP/s per GPU).
- Hopper: Megatron-LM's README H100 weak-scaling table (nine rows, model TFLOP/s per GPU).
- The power-capped Grand Teton H100 of torchtitan's runs (``grand_teton.py``): its sustained
  compute rate over the DGX H100's, on the Dec 2024 benchmark's four Llama 3.1 8B FSDP rows
  (tokens/s per GPU). Its other rows (405B in 2-D and 3-D, fp8) are out of sample.

The fit minimizes the mean absolute relative error over its set on a grid of
``GRID_STEP``. Leave-one-out refits on all rows but one and predicts that one, for each
row: the held-out error. Every other published run (Korthikanti et al. 2022 Table 5, the
torchtitan rows) is predicted at the catalog value and is out of sample.

Errors are tabulated once per row and grid value, so the fit and the leave-one-out are
argmins over that table (no re-evaluation per held-out row).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vramopt.costs.gemm import GENERATIONS, large_gemm_fraction_set_to
from vramopt.validation import grand_teton

GRID = np.round(np.arange(0.50, 0.90 + 1e-9, 0.0025), 4)
GRID_STEP = 0.0025


@dataclass(frozen=True, slots=True)
class FitResult:
    generation: str
    """A GPU generation of costs/gemm.py, or ``grand_teton`` (validation/grand_teton.py)."""
    fitted_on: str
    fitted: float
    """The minimizing grid value over all rows of the set."""
    catalog: float
    """The value in costs/gemm.py or grand_teton.py (must equal ``fitted`` within one grid step)."""
    case_ids: tuple[str, ...]
    in_sample_errors: tuple[float, ...]
    """Per row, at the catalog value."""
    held_out_fits: tuple[float, ...]
    held_out_errors: tuple[float, ...]
    """Per row, at the value fitted without that row."""


def fit_sets():
    """generation -> (what it is fitted on, the runs)."""
    from vramopt.validation.narayanan import narayanan_runs
    from vramopt.validation.published import calibration_runs

    return {
        "ampere": ("Narayanan et al. 2021 Table 1 (10 A100 rows)", narayanan_runs()),
        "hopper": ("Megatron-LM README H100 weak-scaling table (9 rows)",
                   tuple(run for run in calibration_runs() if run.case_id.startswith("meg_readme_"))),
        "grand_teton": ("torchtitan Dec 2024 benchmarks, Llama 3.1 8B FSDP rows of Tables 1 and 3 (4 rows)",
                        tuple(run for run in calibration_runs() if run.case_id in GRAND_TETON_FIT_CASES)),
    }


GRAND_TETON_FIT_CASES = ("tt24_t1_8b_fsdp8", "tt24_t1_8b_fsdp8_compile", "tt24_t3_8b_fsdp128", "tt24_t3_8b_fsdp128_compile")


def _set_to(generation: str, value: float):
    if generation == "grand_teton":
        return grand_teton.sustained_rate_fraction_set_to(value)
    return large_gemm_fraction_set_to(generation, value)


def catalog_value(generation: str) -> float:
    if generation == "grand_teton":
        return grand_teton.SUSTAINED_RATE_FRACTION
    return GENERATIONS[generation].large_gemm_fraction


def error_table(generation: str, runs, grid=GRID) -> np.ndarray:
    """Relative errors, shape (len(runs), len(grid)), with the generation's fraction at each grid value."""
    table = np.empty((len(runs), len(grid)))
    for column, value in enumerate(grid):
        with _set_to(generation, value):
            table[:, column] = [run.relative_error() for run in runs]
    return table


def best_grid_value(errors: np.ndarray, grid=GRID) -> float:
    return float(grid[int(np.argmin(np.mean(np.abs(errors), axis=0)))])


def fit(generation: str, grid=GRID) -> FitResult:
    fitted_on, runs = fit_sets()[generation]
    table = error_table(generation, runs, grid)
    held_out_fits, held_out_errors = [], []
    for row in range(len(runs)):
        others = np.delete(table, row, axis=0)
        value = best_grid_value(others, grid)
        held_out_fits.append(value)
        held_out_errors.append(float(table[row, list(grid).index(value)]))
    return FitResult(
        generation=generation, fitted_on=fitted_on, fitted=best_grid_value(table, grid),
        catalog=catalog_value(generation), case_ids=tuple(run.case_id for run in runs),
        in_sample_errors=tuple(run.relative_error() for run in runs),
        held_out_fits=tuple(held_out_fits), held_out_errors=tuple(held_out_errors),
    )
