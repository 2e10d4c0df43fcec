"""Expert-parallel all-to-all overlap (Megatron-Core combined 1F1B), issue 12's proof that a
technique is added through its own modules and issue 14's all-to-all overlap.

Expected values are derived by hand from the schedule Megatron-Core core_v0.16.1 runs
(pipeline_parallel/combined_1f1b.py, schedules.py) and the asserts of its
TransformerConfig.__post_init__, not read from the code under test.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from vramopt.estimate import estimate_training
from vramopt.exporters.megatron import megatron_args
from vramopt.optimizer.search import solve
from vramopt.types import SearchSpace, TrainingPlan, TrainingWorkload

from tests.unit.test_megatron_export import fixture_parser

MIXTRAL = TrainingWorkload(model="mixtral-8x7b")
EP8 = TrainingPlan(gpu="b200", gpus=8, expert_parallel=8)


def _values(plan, workload=MIXTRAL):
    return estimate_training(workload, plan).values


def test_without_pipelining_one_more_micro_batch_is_held_and_the_all_to_all_hides_behind_the_other():
    """pp 1: combined 1F1B pairs micro-batch i+1's forward with i's backward, so two
    micro-batches' activations are alive (twice the one of plain 1F1B), and of the m
    micro-batches only the first forward and the last backward (1/m of the passes) run
    unpaired; where the pair's compute exceeds the all-to-all, that is all that shows."""
    off, on = _values(EP8), _values(dataclasses.replace(EP8, expert_comm_overlap=True))
    micro_batches = MIXTRAL.global_batch // 8
    assert on["activations_bytes"] == pytest.approx(2.0 * off["activations_bytes"], rel=1e-12)
    per_micro_batch_all_to_all = off["expert_parallel_s"] / micro_batches
    per_micro_batch_compute = off["compute_s"] / micro_batches
    assert per_micro_batch_compute > per_micro_batch_all_to_all  # the case the formula below assumes
    assert on["expert_parallel_s"] == pytest.approx(off["expert_parallel_s"] / micro_batches, rel=1e-9)
    assert on["step_time_s"] < off["step_time_s"]
    # Nothing else moves: compute, tensor-parallel and data-parallel time are the same plan's.
    for name in ("compute_s", "tensor_parallel_s", "data_parallel_s", "weights_bytes", "optimizer_bytes"):
        assert on[name] == pytest.approx(off[name], rel=1e-12), name


def test_with_the_interleaved_schedule_one_more_micro_batch_of_one_chunk_is_held():
    """pp 2, 4 virtual stages, m = 64 micro-batches: plain interleaved 1F1B holds
    min(p, m) x (1 + (p - 1) / (p v)) = 2 x 1.125 = 2.25 micro-batches of a stage
    (Korthikanti et al. 2022 section 4.2.3); the one extra warm-up forward adds one micro-batch
    of one chunk, 1/4 of a stage: 2.25 + 0.25 = 2.5, a factor 2.5 / 2.25."""
    workload = TrainingWorkload(model="mixtral-8x7b", global_batch=512)
    plan = TrainingPlan(gpu="b200", gpus=16, expert_parallel=8, pipeline_parallel=2, virtual_stages=4)
    off, on = _values(plan, workload), _values(dataclasses.replace(plan, expert_comm_overlap=True), workload)
    assert on["activations_bytes"] == pytest.approx(off["activations_bytes"] * 2.5 / 2.25, rel=1e-12)


@pytest.mark.parametrize(("change", "message"), [
    ({"expert_parallel": 1}, "expert_comm_overlap needs expert_parallel > 1"),
    ({"pipeline_parallel": 2, "gpus": 16}, "needs virtual_stages > 1"),
    ({"checkpointing": "full"}, "needs checkpointing none or selective"),
    ({"precision": "fp32", "grad_comm_precision": "fp32"}, "needs bf16 or fp16 weights"),
])
def test_megatron_cores_asserts_are_the_rules(change, message):
    from vramopt.errors import InputError

    with pytest.raises(InputError, match=message):
        estimate_training(MIXTRAL, dataclasses.replace(EP8, expert_comm_overlap=True, **change))


def test_a_dense_model_searches_no_overlap_and_a_pin_on_it_is_refused():
    result = solve(TrainingWorkload(model="llama-3.1-8b"), SearchSpace(max_gpus=8))
    assert result.estimate.plan.expert_comm_overlap is False
    completed = subprocess.run(
        [sys.executable, "-c", "from vramopt.cli import main; main()", "estimate", "--model", "8b", "--gpus", "8",
         "--expert-comm-overlap"], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2
    assert completed.stderr.count("\n") == 1 and "expert_comm_overlap needs expert_parallel > 1" in completed.stderr


@pytest.mark.parametrize("framework", ["deepspeed", "torchtitan"])
def test_frameworks_that_pair_no_micro_batches_refuse_it(framework):
    from vramopt.errors import InputError

    # A plan each framework runs but for the overlap (torchtitan: FSDP, fp32 gradient reduction).
    plan = dataclasses.replace(EP8, expert_comm_overlap=True, zero_stage=3, grad_comm_precision="fp32")
    estimate_training(MIXTRAL, dataclasses.replace(plan, expert_comm_overlap=False), framework=framework)
    with pytest.raises(InputError, match="expert_comm_overlap must be off"):
        estimate_training(MIXTRAL, plan, framework=framework)
    result = solve(MIXTRAL, SearchSpace(max_gpus=8, framework=framework))
    assert result.estimate.plan.expert_comm_overlap is False


def test_megatron_gets_its_flag_and_the_arguments_parse():
    response = estimate_training(MIXTRAL, dataclasses.replace(EP8, expert_comm_overlap=True), framework="megatron").to_dict()
    assert response["plan"]["expert_comm_overlap"] is True
    arguments = megatron_args(response).content["arguments"]
    assert "--overlap-moe-expert-parallel-comm" in arguments
    parsed = fixture_parser().parse_args(arguments)
    assert parsed.overlap_moe_expert_parallel_comm is True


def test_the_solver_turns_it_on_where_it_hides_the_all_to_all_and_both_engines_agree():
    space = SearchSpace(max_gpus=8, pin={"expert_parallel": "8"})
    chosen = solve(MIXTRAL, space)
    exhaustive = solve(MIXTRAL, space, engine="exhaustive")
    assert chosen.estimate.plan == exhaustive.estimate.plan
    assert chosen.estimate.plan.expert_comm_overlap is True
    forbidden = solve(MIXTRAL, dataclasses.replace(space, forbid={"expert_comm_overlap": ("true",)}))
    assert forbidden.estimate.tokens_per_s < chosen.estimate.tokens_per_s


def test_full_recomputation_with_the_overlap_is_never_tabled_and_a_pin_of_both_says_why():
    """Megatron-Core refuses full recomputation with the overlap whatever the layout, so those
    activation items are dropped before the tables (2t on 16,384 GPUs: 14 checkpointing values
    x 4 others (flash attention, sequence parallelism; interleaving is a key field since issue 18)
    = 56 items, plus 2 x 4 with the overlap under none or selective = 64)."""
    from vramopt.optimizer.problem import build_problem

    problem = build_problem(TrainingWorkload(model="2t"), SearchSpace(max_gpus=16384))
    overlapped = [item for item in problem.activation.values if item["expert_comm_overlap"]]
    assert len(problem.activation.values) == 64 and len(overlapped) == 8
    assert all(item["checkpointing"] in ("none", "selective") for item in overlapped)
    completed = subprocess.run(
        [sys.executable, "-c", "from vramopt.cli import main; main()", "solve", "--model", "mixtral", "--max-gpus", "8",
         "--pin", "expert_comm_overlap=true", "--pin", "checkpointing=full"], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2 and completed.stderr.count("\n") == 1
    assert "expert_comm_overlap needs checkpointing none or selective" in completed.stderr
