"""Issue 18 item 1 (the per-stage search speed): the per-stage search visits keys best first,
by a lower bound from the uniform tables (optimizer/per_stage.key_lower_bounds), and builds
only the bases that tie at the least exact bound. These tests hold it to the enumeration of
every base, and check the two facts the lower bound rests on, on real unpinned spaces."""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.optimizer import per_stage
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.stage_model import solve_stages
from vramopt.types import SearchSpace, TrainingWorkload

SPACES = [
    ("llama-3.1-8b", SearchSpace(gpus=("h100",), max_gpus=8, workers=1)),
    ("llama-3.1-70b", SearchSpace(gpus=("a100-40gb",), max_gpus=16, workers=1)),  # memory binds: stages differ
    ("mixtral-8x7b", SearchSpace(gpus=("a100-40gb",), max_gpus=16, workers=1)),
    ("llama-3.1-405b", SearchSpace(gpus=("h100",), max_gpus=64, workers=1, pin={"pipeline_parallel": ("8",)})),  # 126 layers: uneven
]


def _every_group(model, space):
    problem = build_problem(TrainingWorkload(model=model, global_batch=64), space)
    return problem, per_stage._groups(problem)


@pytest.mark.parametrize(("model", "space"), SPACES)
def test_the_lower_bound_never_exceeds_a_base_exact_bound(model, space):
    """issue 18 item 1: every key's lower bound is at most the exact bound of each of its bases
    (the time bound: recomputation never makes a stage faster; the memory part: with even
    stages the first stage's leanest candidate is the uniform table's leanest item)."""
    problem, groups = _every_group(model, space)
    lower = per_stage.key_lower_bounds(problem)
    for alike in (False, True):
        for group in groups:
            bounds = per_stage._group_bounds(problem, group, alike)
            assert (lower[group.key] <= bounds).all(), (group.key, group.shared, int(lower[group.key]), int(bounds.min()))


@pytest.mark.parametrize(("model", "space"), SPACES)
def test_no_candidate_makes_a_stage_faster_than_no_checkpointing(model, space):
    """issue 18 item 1: the premise of the time bound, stage by stage."""
    _, groups = _every_group(model, space)
    for group in groups:
        if "none" in group.names:
            plain = group.seconds[:, [group.names.index("none")]]
            assert (group.seconds >= plain * (1 - 1e-12)).all()


@pytest.mark.parametrize(("model", "space"), SPACES)
def test_best_first_finds_the_optimum_of_every_base(model, space):
    """issue 18 item 1: the best-first search's answer is the optimum (and tie-break) of the
    enumeration of every base handed to CP-SAT."""
    workload = TrainingWorkload(model=model, global_batch=64)
    problem, groups = _every_group(model, space)
    bases = [base for group in groups for base in per_stage._group_bases(problem, group)]
    choice = solve_stages([base.stage for base in bases])
    answer = per_stage.per_stage_search(workload, space)
    chosen = bases[choice.base]
    assert (answer.key, answer.state_item) == (chosen.key, chosen.state_item)
    assert dict(answer.shared) == dict(chosen.shared)
    assert [stage.checkpointing for stage in answer.stages] == [chosen.names[candidate] for candidate in choice.candidates]
    assert answer.step_s == pytest.approx(max(chosen.seconds[stage, candidate] for stage, candidate in enumerate(choice.candidates)))
    assert np.isfinite(answer.tokens_per_s)
