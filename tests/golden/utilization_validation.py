"""Leave-one-out validation of the ``base_utilization`` fit (Narayanan et al. 2021 Table 1).

The fit (``megatron_gpt.fit_base_utilization``) uses all ten rows, so its error is in
sample. Leave-one-out refits on nine rows and predicts the tenth with that value, ten
times: the held-out errors say how well the one-coefficient model predicts a run it has
not seen. Shared by ``benchmarks/calibrate_utilization.py --leave-one-out`` (prints it) and
``test_utilization_leave_one_out.py`` (checks the mechanics).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from megatron_gpt import TABLE_1, Table1Row, evaluate_row, fit_base_utilization
from vramopt.costs.coefficients import coefficient


@dataclass(frozen=True, slots=True)
class LeaveOneOut:
    held_out: tuple[Table1Row, ...]
    fitted: tuple[float, ...]
    """base_utilization fitted without each row."""
    errors: tuple[float, ...]
    """Predicted / published - 1 of each row at the value fitted without it."""

    @property
    def mean_abs_error(self) -> float:
        return float(np.mean(np.abs(self.errors)))

    @property
    def max_abs_error(self) -> float:
        return float(np.max(np.abs(self.errors)))


def error_at(row: Table1Row, utilization: float, micro_batch: int | None = None, virtual_stages: int | None = None) -> float:
    """Relative error of achieved TFLOP/s for one row with ``base_utilization`` replaced.

    The catalog value is applied by the cost model; only the compute term depends on it
    (as 1/u), so the step time is rebuilt from the evaluated terms."""
    values = evaluate_row(row, micro_batch, virtual_stages)
    compute = values["compute_s"] * coefficient("base_utilization") / utilization
    step = compute + values["step_time_s"] - values["compute_s"]
    achieved = values["achieved_flops_per_s_per_gpu"] * values["step_time_s"] / step
    return achieved / (row.achieved_tflops_per_gpu * 1e12) - 1.0


def leave_one_out(rows=TABLE_1, micro_batch: int | None = None, virtual_stages: int | None = None) -> LeaveOneOut:
    fitted, errors = [], []
    for index, row in enumerate(rows):
        others = rows[:index] + rows[index + 1 :]
        value = fit_base_utilization(others, micro_batch, virtual_stages).base_utilization
        fitted.append(value)
        errors.append(error_at(row, value, micro_batch, virtual_stages))
    return LeaveOneOut(held_out=tuple(rows), fitted=tuple(fitted), errors=tuple(errors))
