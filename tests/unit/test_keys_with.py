"""``Problem.keys_with`` (the runner-ups' columnar key mask) equals decoding every key one by
one, for every key field and every value it takes, on training and serving tables."""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.optimizer.problem import build_problem
from vramopt.types import SearchSpace, ServingWorkload, TrainingWorkload

CASES = [
    (TrainingWorkload(model="70b"), SearchSpace(max_gpus=16, gpus=("h100", "a100-80gb"), workers=1)),
    (ServingWorkload(model="8b"), SearchSpace(max_gpus=8, gpus=("a100-40gb", "h100"), workers=1)),
]


@pytest.mark.parametrize(("workload", "space"), CASES, ids=["train", "infer"])
def test_keys_with_matches_key_values(workload, space):
    problem = build_problem(workload, space)
    decoded = [problem.key_values(key) for key in range(problem.key_count)]
    for field in decoded[0]:
        values = {row[field] for row in decoded}
        assert len(values) >= 1
        for value in values | {"not-a-value" if isinstance(next(iter(values)), str) else -7}:
            expected = np.array([row[field] == value for row in decoded])
            assert np.array_equal(problem.keys_with(field, value), expected), (field, value)
