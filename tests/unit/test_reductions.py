"""Training and serving are explicit reductions (issue 12 build item 3): build_problem asks
each reduction of problem.REDUCTIONS whether it accepts the request and applies that one;
decode_choice inverts a chosen candidate through the reduction that built the problem."""

from __future__ import annotations

import dataclasses

import pytest

from vramopt.errors import InputError
from vramopt.optimizer import problem as problem_module
from vramopt.optimizer.decode import decode_choice
from vramopt.optimizer.oracle import solve_exhaustive
from vramopt.optimizer.reductions import ServingReduction, TrainingReduction, reduction_for
from vramopt.types import SearchSpace, ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload

TRAINING = TrainingWorkload(model="llama-3.1-8b", seq_len=4096, global_batch=64)
SERVING = ServingWorkload(model="llama-3.1-8b", context=8192)
SPACE = SearchSpace(gpus=("h100",), max_gpus=8)


def test_each_workload_has_exactly_one_reduction():
    reductions = problem_module.REDUCTIONS
    assert [type(reduction) for reduction in reductions] == [TrainingReduction, ServingReduction]
    for workload, kind in ((TRAINING, TrainingReduction), (SERVING, ServingReduction)):
        assert [type(reduction) for reduction in reductions if reduction.accepts(workload)] == [kind]


def test_a_request_no_reduction_takes_is_an_input_error():
    with pytest.raises(InputError, match="neither a TrainingWorkload nor a ServingWorkload"):
        reduction_for(problem_module.REDUCTIONS, object())


def test_build_problem_dispatches_through_the_list(monkeypatch):
    """Replacing the training reduction in the list changes what build_problem calls: the
    entry point has no branch of its own on the workload."""
    calls = []
    training = problem_module.REDUCTIONS[0]

    def build(workload, space):
        calls.append(workload)
        return training.build(workload, space)

    monkeypatch.setattr(problem_module, "REDUCTIONS", (dataclasses.replace(training, build=build),) + problem_module.REDUCTIONS[1:])
    built = problem_module.build_problem(TRAINING, SPACE)
    assert calls == [TRAINING] and built.kind == "train"


@pytest.mark.parametrize("workload, plan_type", [(TRAINING, TrainingPlan), (SERVING, ServingPlan)])
def test_invert_of_apply_is_the_plan_the_estimate_accepts(workload, plan_type):
    from vramopt.estimate import estimate_serving, estimate_training

    built = problem_module.build_problem(workload, SPACE)
    choice = solve_exhaustive(built)
    plan = decode_choice(built, choice)
    assert type(plan) is plan_type
    estimate = (estimate_training if plan_type is TrainingPlan else estimate_serving)(workload, plan)
    assert estimate.to_dict()["memory"]["fits"]
