"""Megatron-LM's asynchronous input-gradient collectives (costs/overlap.py), by hand.

Per layer, without sequence parallelism, 4 all-reduces (2 forward, 2 backward; Shoeybi et al.
2019), 2 more with a recomputed forward; the 2 backward ones (QKV's and MLP up's input gradient)
run beside those linears' weight-gradient GEMMs. With sequence parallelism the 4 all-reduce
volumes are all-gathers and reduce-scatters, and only the backward's 2 reduce-scatters (one
all-reduce's volume) are asynchronous (Megatron-LM ``megatron/mpu/layers.py``, May 2022)."""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.costs.overlap import exposed_tensor_parallel_seconds


def exposed(communication, sequence_parallel, full, window):
    return float(exposed_tensor_parallel_seconds(np.array([communication]), np.array([0.0]), False, True,
                                                 np.array([sequence_parallel]), np.array([full]), np.array([window]))[0])


def test_half_the_all_reduces_hide_behind_a_long_enough_weight_gradient():
    assert exposed(4.0, 0, False, 10.0) == pytest.approx(2.0)


def test_sequence_parallel_hides_its_two_reduce_scatters_only():
    assert exposed(4.0, 1, False, 10.0) == pytest.approx(3.0)


def test_a_recomputed_forward_adds_exposed_collectives():
    # 6 all-reduce volumes, 2 hideable: 4 exposed.
    assert exposed(6.0, 0, True, 10.0) == pytest.approx(4.0)


def test_a_short_weight_gradient_hides_only_its_own_length():
    assert exposed(4.0, 0, False, 0.5) == pytest.approx(3.5)


def test_without_the_option_everything_is_exposed():
    value = exposed_tensor_parallel_seconds(np.array([4.0]), np.array([0.0]), False)
    assert float(value[0]) == 4.0
