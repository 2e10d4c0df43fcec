"""Golden test: achieved FLOP/s per GPU against Narayanan et al. 2021 Table 1.

Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", section 5.1, Table 1 (weak scaling, GPT 1.7B-1T on 32-3072 A100 80GB,
bf16 peak 312 TFLOP/s, V = 51,200, s = 2,048, interleaved schedule, full recomputation).
Each row is evaluated with ``vramopt.costs.training.evaluate_training`` on the a100-80gb
catalog GPU with checkpointing every:1, bf16, ZeRO 0, flash attention off, sequence
parallelism off, and the micro-batch and virtual stages of the paper's reproduction script
(``examples/sc21/run_table_1.sh``; see ``megatron_gpt.py``). vramopt's
``achieved_flops_per_s_per_gpu`` counts FLOPs as the paper's eq. 3 does (with recomputation).

Tolerance: every row within 15% of the table (the task's bound); the mean absolute error
below 5%. The Ampere large-GEMM fraction (``costs/gemm.py``) is the one coefficient fitted
to this table (minimum mean absolute relative error, ``vramopt/validation/calibration.py``),
so these errors are in sample; a test checks the catalog value is that fit. The held-out
(leave-one-out) errors are checked in ``test_throughput_calibration.py``.
"""

from __future__ import annotations

import pytest

from megatron_gpt import TABLE_1, evaluate_row, gpt_model
from vramopt.costs.gemm import GENERATIONS
from vramopt.validation.calibration import GRID_STEP, fit

ROW_TOLERANCE = 0.15
MEAN_TOLERANCE = 0.05


@pytest.fixture(scope="module")
def ampere_fit():
    return fit("ampere")


@pytest.mark.parametrize("row", TABLE_1, ids=lambda row: row.label)
def test_parameter_count_of_each_row_matches_the_table(row):
    # Table 1's first column, rounded to 0.1B (1008.0 for the 1T model).
    params = gpt_model(row.layers, row.hidden, row.heads).parameters.total
    assert params / 1e9 == pytest.approx(row.params_billion, abs=0.05)


@pytest.mark.parametrize("row", TABLE_1, ids=lambda row: row.label)
def test_achieved_flops_per_gpu_within_15_percent(row):
    values = evaluate_row(row)
    predicted = values["achieved_flops_per_s_per_gpu"] / 1e12
    assert predicted == pytest.approx(row.achieved_tflops_per_gpu, rel=ROW_TOLERANCE), (row.label, predicted)
    assert values["fits"], f"{row.label} must fit an 80 GB A100, as it ran"


def test_mean_error_over_the_table_is_small():
    errors = [
        abs(evaluate_row(row)["achieved_flops_per_s_per_gpu"] / 1e12 / row.achieved_tflops_per_gpu - 1)
        for row in TABLE_1
    ]
    assert sum(errors) / len(errors) < MEAN_TOLERANCE, errors


def test_the_ampere_large_gemm_fraction_is_the_fit_to_this_table(ampere_fit):
    # Recalibrate (python benchmarks/calibrate_throughput.py) when a formula changes.
    assert GENERATIONS["ampere"].large_gemm_fraction == pytest.approx(ampere_fit.fitted, abs=GRID_STEP / 2 + 1e-9)
    assert "Narayanan et al. 2021 Table 1" in GENERATIONS["ampere"].source
    errors = [abs(error) for error in ampere_fit.in_sample_errors]
    assert sum(errors) / len(errors) < MEAN_TOLERANCE and max(errors) < ROW_TOLERANCE


def test_interleaving_rows_use_the_interleaved_bubble():
    # 76.1B: p = 4, v = 3, m = 1792 / (32 * 2) = 28 -> bubble (p-1)/v / (m + (p-1)/v).
    row = TABLE_1[5]
    values = evaluate_row(row)
    assert values["micro_batches"] == 28
    assert values["bubble_fraction"] == pytest.approx(1.0 / 29.0)
    plain = evaluate_row(row, virtual_stages=1)
    assert plain["bubble_fraction"] == pytest.approx(3.0 / 31.0)
    assert values["achieved_flops_per_s_per_gpu"] > plain["achieved_flops_per_s_per_gpu"]
