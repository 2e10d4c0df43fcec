"""ZeRO 1-2 with Megatron-Core's --overlap-param-gather (costs/overlap.py), by hand: the step's
data-parallel volume is a gradient reduce-scatter and a parameter all-gather of equal size;
the first hides behind one micro-batch's backward GEMMs, the second behind its forward GEMMs."""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.costs.overlap import exposed_data_parallel_seconds

BANDWIDTH = 40e9  # the tail is one 25 MiB bucket: 0.66 ms here


def exposed(communication, backward, compute, zero_stage, gather_overlap):
    return float(exposed_data_parallel_seconds(np.array([communication]), BANDWIDTH, np.array([backward]),
                                               np.array([compute]), np.array([4.0]), np.array([zero_stage]), True,
                                               gather_overlap)[0])


def test_the_gather_hides_behind_the_forward():
    # 0.4 s: reduce-scatter 0.2 - backward 0.1 = 0.1; all-gather 0.2 - forward (0.15 - 0.1) = 0.15.
    assert exposed(0.4, 0.1, 0.15, 1, True) == pytest.approx(0.25)
    # Without the option the whole volume waits for one backward: 0.4 - 0.1.
    assert exposed(0.4, 0.1, 0.15, 1, False) == pytest.approx(0.3)


def test_only_zero_one_and_two_gather_parameters_after_the_step():
    assert exposed(0.4, 0.1, 0.15, 0, True) == pytest.approx(0.3)
    sharded = exposed(0.4, 0.1, 0.15, 3, True)  # ZeRO-3 keeps its per-micro-batch treatment
    assert sharded == pytest.approx(exposed(0.4, 0.1, 0.15, 3, False))


def test_at_least_the_last_bucket_stays_exposed():
    assert exposed(0.4, 1.0, 2.0, 2, True) == pytest.approx(25 * 2**20 / BANDWIDTH)
