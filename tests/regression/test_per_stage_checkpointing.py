"""Issue 18 item 1: per-stage activation checkpointing (optimizer/per_stage.py,
optimizer/stage_model.py, costs/stage_plans.py): CP-SAT equals the brute-force product of the
stages' choices, and a per-stage plan whose stages choose alike is the uniform plan."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramopt.errors import InfeasibleError
from vramopt.optimizer.per_stage import _bases, per_stage_search
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.search import solve_training
from vramopt.optimizer.stage_model import StageBase, objective, solve_stages, solve_stages_exhaustive
from vramopt.types import SearchSpace, TrainingWorkload


@st.composite
def instances(draw):
    bases = []
    for _ in range(draw(st.integers(1, 3))):
        stages, candidates = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        cells = stages * candidates
        ticks = draw(st.lists(st.integers(1, 60), min_size=cells, max_size=cells))
        memory = draw(st.lists(st.integers(0, 40), min_size=cells, max_size=cells))
        valid = draw(st.lists(st.booleans(), min_size=cells, max_size=cells))
        bases.append(StageBase(time_ticks=np.array(ticks, dtype=np.int64).reshape(stages, candidates),
                               memory_mib=np.array(memory, dtype=np.int64).reshape(stages, candidates),
                               valid=np.array(valid).reshape(stages, candidates), budget_mib=draw(st.integers(0, 40))))
    return bases


def assert_same(bases, prune=True):
    exhaustive = solve_stages_exhaustive(bases)
    solved = solve_stages(bases, prune=prune)
    assert (solved is None) == (exhaustive is None)
    if solved is None:
        return
    assert objective(bases, solved) == objective(bases, exhaustive)
    base = bases[solved.base]
    for stage, candidate in enumerate(solved.candidates):
        assert base.valid[stage, candidate] and base.memory_mib[stage, candidate] <= base.budget_mib


@settings(max_examples=150, deadline=None)
@given(instances(), st.booleans())
def test_cp_sat_equals_the_per_stage_product_on_drawn_instances(bases, prune):
    """issue 18 item 1 (item 4's oracle): CP-SAT's per-stage optimum (step time = the slowest
    stage, a linear bound; memory per stage), with and without the exact base bounds, equals
    the enumeration of every stage's choices."""
    assert_same(bases, prune)


@pytest.mark.parametrize(("model", "gpus", "pin"), [
    ("llama-3.1-8b", 8, {"pipeline_parallel": ("4",), "tensor_parallel": ("2",)}),
    ("llama-3.1-70b", 16, {"pipeline_parallel": ("4",), "tensor_parallel": ("4",), "micro_batch": ("2",)}),
    ("mixtral-8x7b", 16, {"pipeline_parallel": ("2",), "tensor_parallel": ("2",), "micro_batch": ("1",)}),
])
def test_cp_sat_equals_the_per_stage_product_on_real_layouts(model, gpus, pin):
    """issue 18 item 1: the same on the bases of real requests (pp <= 4)."""
    problem = build_problem(TrainingWorkload(model=model, global_batch=64), SearchSpace(gpus=("h100",), max_gpus=gpus, pin=pin))
    bases = [_fewer_candidates(base.stage) for base in _bases(problem)]
    assert bases
    assert_same(bases)


def _fewer_candidates(base: StageBase, most: int = 12) -> StageBase:
    """The base with at most ``most`` candidates per stage (evenly spread over its list), so
    the oracle's product stays small on 20-layer stages."""
    keep = np.zeros(base.valid.shape[1], dtype=bool)
    keep[np.unique(np.linspace(0, base.valid.shape[1] - 1, min(most, base.valid.shape[1])).astype(int))] = True
    return StageBase(base.time_ticks, base.memory_mib, base.valid & keep[None, :], base.budget_mib)


def test_stages_choosing_alike_are_the_uniform_tables():
    """issue 18 item 1: every base's uniform assignment has the uniform tables' step ticks (its
    slowest stage) and memory (its heaviest stage), even and uneven stages (405B's 126 layers on
    8 stages) alike; so the per-stage optimum can only be faster."""
    for model, gpus, pin in (("llama-3.1-70b", 16, {"pipeline_parallel": ("4",), "tensor_parallel": ("4",)}),
                             ("llama-3.1-405b", 64, {"pipeline_parallel": ("8",), "tensor_parallel": ("8",)})):
        problem = build_problem(TrainingWorkload(model=model, global_batch=64), SearchSpace(gpus=("h100",), max_gpus=gpus, pin=pin))
        items = {(tuple((field, value) for field, value in item.items() if field != "checkpointing"), item["checkpointing"]): index
                 for index, item in enumerate(problem.activation.values)}
        for base in _bases(problem):
            for candidate, name in enumerate(base.names):
                if name.startswith("block:"):
                    continue
                item = items[(tuple(base.shared), name)]
                uniform_ticks = problem.state.time_ticks[base.key, base.state_item] + problem.activation.time_ticks[base.key, item]
                uniform_mib = problem.state.memory_mib[base.key, base.state_item] + problem.activation.memory_mib[base.key, item]
                assert abs(int(base.stage.time_ticks[:, candidate].max()) - int(uniform_ticks)) <= 1  # each rounded once
                assert int(base.stage.memory_mib[:, candidate].max()) == int(uniform_mib)
                assert np.all(base.memory_bytes[:, candidate] <= base.memory_bytes[0, candidate] + 1e-6) or problem.keys["first_stage_layers"][base.key]


def test_the_first_stage_checkpoints_more_than_the_last_where_memory_binds():
    """issue 18 item 1: Llama 3.1 70B, tp 4 pp 4 on 16 A100 40GB at micro-batch 2: the early
    stages hold more micro-batches in flight and need recomputation the late ones do not; the
    per-stage plan is at least as fast as the best uniform plan of the same space."""
    workload = TrainingWorkload(model="llama-3.1-70b", global_batch=64)
    space = SearchSpace(gpus=("a100-40gb",), max_gpus=16, workers=1,
                        pin={"pipeline_parallel": ("4",), "tensor_parallel": ("4",), "gpus": ("16",)})
    answer = per_stage_search(workload, space)
    uniform = solve_training(workload, space, runner_up_count=0)
    assert answer.tokens_per_s >= uniform.estimate.tokens_per_s * (1 - 1e-6)
    def recomputed(plan):  # the share of the stage's layers recomputed (selective: the attention core only)
        kind, _, count = plan.checkpointing.partition(":")
        return {"none": 0.0, "selective": 0.1, "every": 1.0}.get(kind, int(count or 0) / plan.layers)

    shares = [recomputed(plan) for plan in answer.stages]
    assert shares == sorted(shares, reverse=True) and shares[0] > shares[-1]  # never less on an earlier stage
    assert all(plan.memory_bytes <= plan.budget_bytes for plan in answer.stages)
    assert all(plan.why for plan in answer.stages)
    assert answer.to_dict()["stages"][0]["stage"] == 0 and "not expressible" in answer.to_dict()["megatron"]


def test_a_request_no_stage_plan_fits_names_the_stage():
    """issue 18 item 1: an infeasible per-stage request names the stage that does not fit."""
    workload = TrainingWorkload(model="llama-3.1-405b", global_batch=64)
    space = SearchSpace(gpus=("a100-40gb",), max_gpus=16, pin={"pipeline_parallel": ("2",), "tensor_parallel": ("8",)},
                        forbid={"offload": ("cpu", "nvme")})
    with pytest.raises(InfeasibleError, match=r"stage \d+ of 2 needs at least"):
        per_stage_search(workload, space)
