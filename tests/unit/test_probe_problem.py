"""The relaxation probes' problem (``problem.probe_problem``, issue 18: table building for
the relaxation search) answers exactly what the full problem answers: None where no key's
plan fits (``prune.lower_bounds`` all unreachable), else the very same tables."""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.optimizer.problem import build_problem, probe_problem
from vramopt.optimizer.prune import lower_bounds
from vramopt.optimizer.ticks import UNREACHABLE
from vramopt.types import SearchSpace, TrainingWorkload

NO_OFFLOAD = {"offload": ("nvme", "cpu")}
CASES = [
    (TrainingWorkload(model="2t"), SearchSpace(max_gpus=16, forbid=NO_OFFLOAD)),
    (TrainingWorkload(model="2t"), SearchSpace(max_gpus=128, forbid=NO_OFFLOAD)),
    (TrainingWorkload(model="2t"), SearchSpace(max_gpus=256, forbid=NO_OFFLOAD)),
    (TrainingWorkload(model="70b"), SearchSpace(max_gpus=1, gpus=("rtx4090",))),
    (TrainingWorkload(model="8b", kind="lora", global_batch=64), SearchSpace(max_gpus=1, gpus=("rtx4090",))),
    (TrainingWorkload(model="405b"), SearchSpace(max_gpus=8, objective="min-gpus", min_tokens_per_s=1e9)),
]


@pytest.mark.parametrize("workload,space", CASES, ids=[f"{w.model}-{s.max_gpus}" for w, s in CASES])
def test_probe_is_none_exactly_when_nothing_fits(workload, space):
    """issue 18: skipping the activation table of a space whose model states cannot fit
    changes no relaxation's answer."""
    full = build_problem(workload, space)
    fits = bool((np.where(full.state.valid, full.state.memory_mib, UNREACHABLE).min(axis=1) <= full.budget_mib).any())
    probed = probe_problem(workload, space)
    if not fits:
        assert probed is None and not (lower_bounds(full) < UNREACHABLE).any()
        return
    assert probed is not None
    for name in ("valid", "memory_mib", "time_ticks"):
        np.testing.assert_array_equal(getattr(probed.state, name), getattr(full.state, name))
        np.testing.assert_array_equal(getattr(probed.activation, name), getattr(full.activation, name))
    np.testing.assert_array_equal(probed.budget_mib, full.budget_mib)
    np.testing.assert_array_equal(lower_bounds(probed), lower_bounds(full))
