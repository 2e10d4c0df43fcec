"""The search on the issue's headline requests, pins, and infeasibility explanations."""

from __future__ import annotations

import pytest

from vramopt.errors import InputError
from vramopt.optimizer.search import solve_training
from vramopt.types import SearchSpace, TrainingWorkload


def test_2t_on_16_b200_is_only_possible_heavily_offloaded():
    result = solve_training(TrainingWorkload(model="2t"), SearchSpace(max_gpus=16))
    assert result.solver.status == "optimal"
    plan = result.estimate.plan
    # 2T parameters need ~32 TB of model state; 16 B200s hold 2.6 TB: only NVMe offload fits.
    assert plan.offload == "nvme" and plan.zero_stage == 3
    assert result.estimate.values["offload_s"] > 0
    assert result.estimate.fits


def test_2t_on_16_gpus_without_offload_is_explained_with_numbers_and_a_fix():
    result = solve_training(TrainingWorkload(model="2t"), SearchSpace(max_gpus=16, forbid={"offload": ("nvme", "cpu")}))
    assert result.solver.status == "infeasible" and result.estimate is None
    explanation = result.explanation
    assert explanation.binding_constraint == "gpu_memory"
    assert explanation.needed_bytes_per_gpu > explanation.allowed_bytes_per_gpu
    assert "TB of model state" in explanation.reason
    changes = [relaxation.change for relaxation in explanation.relaxations]
    assert any(change.startswith("--max-gpus") for change in changes)
    assert any("offload" in change for change in changes)


def test_the_more_gpus_relaxation_is_the_smallest_count_that_fits():
    workload = TrainingWorkload(model="70b")
    result = solve_training(workload, SearchSpace(max_gpus=4, pin={"offload": "none"}))
    change = result.explanation.relaxations[0].change
    smallest = int(change.split()[-1])
    assert solve_training(workload, SearchSpace(max_gpus=smallest, pin={"offload": "none"})).feasible
    assert not solve_training(workload, SearchSpace(max_gpus=smallest - 1, pin={"offload": "none"})).feasible


def test_pins_are_honoured():
    result = solve_training(
        TrainingWorkload(model="70b"),
        SearchSpace(max_gpus=8, pin={"zero_stage": "3", "checkpointing": "every:4", "precision": "bf16"}),
    )
    plan = result.estimate.plan
    assert (plan.zero_stage, plan.checkpointing, plan.precision) == (3, "every:4", "bf16")


def test_allow_and_forbid_are_honoured():
    result = solve_training(
        TrainingWorkload(model="70b"), SearchSpace(max_gpus=8, allow={"zero_stage": ("1", "2")}, forbid={"offload": ("cpu",)})
    )
    assert result.estimate.plan.zero_stage in (1, 2)
    assert result.estimate.plan.offload != "cpu"


@pytest.mark.parametrize(
    "space",
    [
        SearchSpace(pin={"zero": "3"}),
        SearchSpace(pin={"zero_stage": "5x"}),
        SearchSpace(pin={"checkpointing": "every:0"}),
        SearchSpace(pin={"zero_stage": "2"}, forbid={"zero_stage": ("2",)}),
        SearchSpace(max_gpus=0),
        SearchSpace(objective="min-gpus"),
        SearchSpace(objective="fastest"),
        SearchSpace(gpus=("h10",)),
        SearchSpace(gpus=("a100-80gb",), pin={"precision": "fp8"}),
    ],
)
def test_bad_requests_raise_input_errors(space):
    with pytest.raises(Exception) as error:
        solve_training(TrainingWorkload(model="70b"), space)
    assert error.type.__module__ == "vramopt.errors" or error.type is InputError
    assert "\n" not in str(error.value)


def test_min_gpus_objective_reaches_the_target_with_fewest_gpus():
    workload = TrainingWorkload(model="8b")
    result = solve_training(workload, SearchSpace(max_gpus=64, objective="min-gpus", min_tokens_per_s=100_000))
    assert result.estimate.tokens_per_s >= 100_000 * (1 - 1e-6)
    fewer = solve_training(workload, SearchSpace(max_gpus=result.estimate.plan.gpus - 1, objective="min-gpus", min_tokens_per_s=100_000))
    assert not fewer.feasible
    assert fewer.explanation.binding_constraint == "throughput_target"


def test_runners_up_are_slower_or_tied_and_say_what_changed():
    result = solve_training(TrainingWorkload(model="70b"), SearchSpace(max_gpus=8))
    assert 1 <= len(result.runners_up) <= 3
    for runner in result.runners_up:
        assert runner.tokens_per_s_loss_fraction >= -1e-6
        assert runner.differences
        assert runner.estimate.fits


def test_exhaustive_engine_gives_the_same_plan():
    workload, space = TrainingWorkload(model="70b"), SearchSpace(max_gpus=8)
    cp = solve_training(workload, space)
    exhaustive = solve_training(workload, space, engine="exhaustive")
    assert cp.estimate.plan == exhaustive.estimate.plan
    assert cp.solver.objective_value == exhaustive.solver.objective_value
