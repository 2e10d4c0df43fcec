"""Korthikanti et al. 2022 Table 4 (one 22B layer, A100, tp 8, per recomputation mode), out of
sample: data and the per-layer reading in ``vramopt/validation/korthikanti_table4.py``.

Recorded (issue 13, with the backward's input-gradient collectives beside the weight-gradient
GEMMs, costs/overlap.py): -0.3%, +0.4%, +0.8%, -0.8%, -0.2% at the Ampere fraction 0.73; -2.0%,
-1.3%, -0.8%, -2.5%, -1.8% at the refit 0.7475; without that overlap 3.5 to 7 points slower.
"""

from __future__ import annotations

import pytest

from vramopt.validation.korthikanti_table4 import TABLE_4, layer_ms

TOLERANCE = 0.05
"""Accuracy bound: the recorded errors are within 2.5%."""


@pytest.mark.parametrize("row", TABLE_4, ids=[row.case_id for row in TABLE_4])
def test_layer_time_matches_table_4(row):
    assert layer_ms(row.checkpointing, row.sequence_parallel) == pytest.approx(row.published_ms, rel=TOLERANCE)


def test_the_overhead_of_full_recomputation_matches_table_4():
    # 27.2 / 19.6 = 1.39: one more forward of the layer, its tensor-parallel collectives included.
    assert layer_ms("every:1", False) / layer_ms("none", False) == pytest.approx(27.2 / 19.6, rel=0.02)


def test_without_the_backward_overlap_the_layer_is_slower_than_measured():
    # Issue 13: the exposed input-gradient all-reduces alone put the baseline layer over 5% above Table 4.
    assert layer_ms("none", False, backward_overlap=False) > 19.6 * 1.05
