"""Issue 13 must-show (Narayanan et al. 2021 Table 2: ZeRO-3 vs PTD-P at 384-2,240 GPUs):
the rows are shipped with their source, evaluated out of sample by ``vramopt validate``,
and the ZeRO-3 slowdown is reproduced in direction; its size is held to today's error by a
bound and the 15% target by a strict xfail.

Out of sample (nothing fitted on Table 2), as measured when this was recorded:
PTD-P rows mean 1.1%, max 2.4%; ZeRO-3 rows mean 12.3%, max 24.1% (the starred 530B row on
640 GPUs, which vramopt also puts above 80 GB); ZeRO-3 / PTD-P ratio at the same GPU count
mean 10.7%, max 18.7% (175B at 1,536 GPUs: published 0.312, vramopt 0.370). Re-recorded in
issue 13's second pass (pipeline point-to-point time; Megatron-LM 2021's separate
gradient-accumulation pass, which the PTD-P rows pay at 1 sequence per micro-batch; Ampere
refit 0.7275 -> 0.7475): PTD-P mean 3.0%, max 4.5% (vramopt slower); ZeRO-3 mean 12.6%, max
24.8%; ratio mean 13.1%, max 20.6%. The direction
is wrong at the smallest count, 175B on 384 GPUs: published ZeRO-3 6% slower than PTD-P,
vramopt 9% faster (ZeRO-3's micro-batch 4 at tp 1 runs larger GEMMs than PTD-P's tp 8 and
vramopt hides 38 of its 52 s of gathers and reductions behind them).

Issue 13, third pass: DeepSpeed's ZeRO-3 gathers the parameters its release rule freed again
for the recomputed forward (two thirds of each layer of both models,
costs/recompute_regather.py; nothing fitted). ZeRO-3 rows mean 7.6%, max 17.2% (530B on
1,120 GPUs, vramopt slower); the ratio mean 5.7%, max 14.0%, and the direction is right at
every count (175B on 384 GPUs: published 0.941, vramopt 0.956).
"""

from __future__ import annotations

import numpy as np

from vramopt.validation.narayanan_table2 import table2_rows, table2_runs, zero3_slowdowns

# Narayanan et al. 2021 Table 2, typed from the paper: (scheme, params, GPUs) -> TFLOP/s per GPU.
PUBLISHED = {
    ("zero3", "174.6", 384): 144, ("zero3", "174.6", 768): 88, ("zero3", "174.6", 1536): 44,
    ("zero3", "529.6", 640): 138, ("zero3", "529.6", 1120): 98, ("zero3", "529.6", 2240): 48,
    ("ptdp", "174.6", 384): 153, ("ptdp", "174.6", 768): 149, ("ptdp", "174.6", 1536): 141,
    ("ptdp", "529.6", 560): 171, ("ptdp", "529.6", 1120): 167, ("ptdp", "529.6", 2240): 159,
}


def test_the_table_is_shipped_with_its_source():
    rows = {(row["scheme"], row["params_billion"], int(row["gpus"])): float(row["published_tflops_per_gpu"]) for row in table2_rows()}
    assert rows == PUBLISHED
    assert all("Narayanan et al. 2021" in row["source"] and "Table 2" in row["source"] for row in table2_rows())


def test_zero3_slows_down_as_gpus_double_at_a_fixed_batch_and_ptdp_barely_does():
    predicted = {run.case_id: run.predicted() for run in table2_runs()}
    for size, counts in (("175b", (384, 768, 1536)), ("530b", (640, 1120, 2240))):
        zero3 = [predicted[f"n21_t2_zero3_{size}_{gpus}"] for gpus in counts]
        assert zero3[0] > 1.6 * zero3[1] > 1.6 * 1.6 * zero3[2]  # published: 144 -> 88 -> 44, 138 -> 98 -> 48
    for size, counts in (("175b", (384, 1536)), ("530b", (560, 2240))):
        ptdp = [predicted[f"n21_t2_ptdp_{size}_{gpus}"] for gpus in counts]
        assert 0.85 < ptdp[1] / ptdp[0] < 1.0  # published: 141 / 153 = 0.92, 159 / 171 = 0.93


def test_ptdp_rows_stay_within_their_recorded_error():
    errors = np.array([abs(run.relative_error()) for run in table2_runs() if "_ptdp_" in run.case_id])
    assert errors.max() <= 0.05, errors


def test_zero3_is_slower_than_ptdp_from_768_gpus_and_its_slowdown_stays_within_the_recorded_bound():
    ratios = zero3_slowdowns()
    for case, (published, predicted) in ratios.items():
        if not case.endswith("_384"):
            assert predicted < 0.7 and published < 0.7, (case, published, predicted)
    errors = np.array([abs(predicted / published - 1.0) for published, predicted in ratios.values()])
    assert errors.max() <= 0.145 and errors.mean() <= 0.06, errors


def test_zero3_slowdown_meets_the_target():
    """Issue 13 must-show: the direction (ZeRO-3 slower at every count, 384 GPUs included)
    and the size within 15%."""
    ratios = zero3_slowdowns()
    assert all(predicted < 1.0 for _, predicted in ratios.values())
    assert all(abs(predicted / published - 1.0) <= 0.15 for published, predicted in ratios.values())


def test_zero3_rows_stay_within_their_recorded_error():
    errors = np.array([abs(run.relative_error()) for run in table2_runs() if "_zero3_" in run.case_id])
    assert errors.max() <= 0.18 and errors.mean() <= 0.08, errors
