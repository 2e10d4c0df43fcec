"""Issue 11 item 14: an empty domain is named as the reason.

Before: ``solve --model 8b --pin checkpointing=every:7`` (32 layers) blamed host RAM and the
ZeRO rules; ``--forbid precision=fp8,bf16,fp16,fp32`` blamed tp, pp and dp. Now the
answer is infeasible, as any request whose choices leave no plan (the explanation on
stdout, one ``error:`` line on stderr, exit status 2; for the API a response with
``feasible`` false), and its reason names the field, the values given, why each one was
removed, and the fixes that work (each re-solved).
"""

from __future__ import annotations

import json
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import vramopt
from tests.cli_runner import invoke
from vramopt.errors import InputError, VramoptError
from vramopt.optimizer import problem as problem_module
from vramopt.optimizer.oracle import solve_exhaustive
from vramopt.types import SearchSpace, ServingWorkload, TrainingWorkload


def assert_infeasible(result, *fragments):
    """The CLI's infeasible answer: the explanation on stdout, one error line, status 2."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout.startswith("infeasible: "), result.stdout
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    for fragment in fragments:
        assert fragment in result.stdout and fragment in result.stderr, (fragment, result.stdout, result.stderr)
    return result.stdout


def test_a_checkpoint_interval_that_divides_no_stage_is_named():
    """issue 11 item 14: `--pin checkpointing=every:7` on a 32-layer model blamed host RAM."""
    stdout = assert_infeasible(
        invoke(["solve", "--model", "8b", "--pin", "checkpointing=every:7", "--time-limit", "10"]),
        "checkpointing has no value left to search", "every:7 (pinned)", "32 layers", "must divide the layers",
        "valid: none, selective, every:1, every:2, every:4, every:8",
    )
    assert "host RAM" not in stdout and "ZeRO" not in stdout
    assert "fix: --pin checkpointing=every:8: best plan" in stdout


def test_forbidding_every_precision_names_precision_not_the_layout():
    """issue 11 item 14: `--forbid precision=fp8,bf16,fp16,fp32` blamed tp/pp/dp."""
    stdout = assert_infeasible(
        invoke(["solve", "--model", "8b", "--forbid", "precision=fp8,bf16,fp16,fp32", "--time-limit", "10"]),
        "precision has no value left to search", "bf16, fp8 (default) are forbidden", "--forbid precision=fp8,bf16,fp16,fp32",
    )
    assert "tp must divide" not in stdout
    assert "fix: drop --forbid precision: best plan" in stdout
    # fp4 training is experimental: it is not proposed as a fix without --allow-fp4.
    assert "fp4" not in stdout


def test_the_api_answers_an_empty_domain_as_infeasible_with_the_field_named():
    """issue 11 item 14: the API's response carries the same explanation."""
    response = vramopt.solve({"workload": {"model": "8b"}, "space": {"max_gpus": 8, "pin": {"checkpointing": "every:7"}}})
    assert not response.feasible
    data = response.to_dict()
    assert data["solver"]["status"] == "infeasible"
    explanation = data["explanation"]
    assert explanation["binding_constraint"] == "empty_domain"
    assert explanation["reason"].startswith("checkpointing has no value left to search: every:7 (pinned)")
    changes = [relaxation["change"] for relaxation in explanation["relaxations"]]
    assert changes[0] == "--pin checkpointing=every:8"


def test_json_output_of_an_empty_domain():
    """issue 11 item 14: --format json carries binding_constraint empty_domain."""
    result = invoke(["solve", "--model", "8b", "--forbid", "zero_stage=0,1,2,3", "--format", "json", "--time-limit", "10"])
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["plan"] is None and data["explanation"]["binding_constraint"] == "empty_domain"
    assert data["explanation"]["reason"].startswith("zero_stage has no value left to search: 0, 1, 2, 3 (default) are forbidden")


@pytest.mark.parametrize(
    "args, fragments, fix",
    [
        (["--pin", "tensor_parallel=3"], ["tensor_parallel has no value left", "3 (pinned) is not a divisor of llama-3.1-8b's 32 attention heads",
                                          "valid: 1, 2, 4, 8"], "--pin tensor_parallel=2"),
        # 3 stages now split 32 layers unevenly (11 + 11 + 10, issue 14 item 3); 20 has no split.
        (["--pin", "pipeline_parallel=20"], ["pipeline_parallel has no value left",
                                             "neither a divisor of llama-3.1-8b's 32 layers nor a degree with an uneven split"],
         "--pin pipeline_parallel=8"),
        (["--pin", "gpus=16"], ["gpus has no value left", "16 (pinned) is above --max-gpus 8"], "--max-gpus 16"),
        (["--pin", "sequence_parallel=true", "--pin", "tensor_parallel=1"],
         ["sequence_parallel has no value left", "needs tensor_parallel > 1"], "--pin sequence_parallel=false"),
        (["--pin", "offload=nvme", "--allow", "zero_stage=1,2"], ["offload has no value left", "needs zero_stage 3"], "--pin offload=none"),
        (["--pin", "virtual_stages=2", "--pin", "pipeline_parallel=1"],
         ["virtual_stages has no value left", "needs pipeline_parallel > 1"], "--pin virtual_stages=1"),
        (["--pin", "micro_batch=3"], ["micro_batch has no value left", "not a divisor of the global batch of 1,024 sequences"],
         "--pin micro_batch=2"),
        (["--allow", "data_parallel=3,5"], ["data_parallel has no value left", "3, 5 (allowed) are not a divisor of the global batch"],
         "drop --allow data_parallel"),
        (["--forbid", "grad_comm_precision=bf16,fp8"], ["grad_comm_precision has no value left",
                                                          "bf16, fp8 (following precision) are forbidden"],
         "drop --forbid grad_comm_precision"),
    ],
)
def test_each_training_field_emptied_is_named_with_a_working_fix(args, fragments, fix):
    """issue 11 item 14: the same for every training field a request can empty."""
    stdout = assert_infeasible(invoke(["solve", "--model", "8b", "--time-limit", "20"] + args), *fragments)
    assert f"fix: {fix}: best plan" in stdout, stdout


@pytest.mark.parametrize(
    "args, fragments, fix",
    [
        (["--forbid", "quantization=bf16,fp8"], ["quantization has no value left", "bf16, fp8 (default) are forbidden"],
         "drop --forbid quantization"),
        (["--gpu", "a100-80gb", "--pin", "kv_cache_dtype=fp8"], ["kv_cache_dtype has no value left", "a100-80gb has no fp8 support"],
         "--pin kv_cache_dtype=bf16"),
        (["--pin", "mig_profile=1g.23gb", "--pin", "tensor_parallel=2"],
         ["mig_profile has no value left", "a MIG instance serves one replica"], "--pin mig_profile=none"),
        (["--forbid", "paged_kv=true,false"], ["paged_kv has no value left"], "drop --forbid paged_kv"),
    ],
)
def test_each_serving_field_emptied_is_named_with_a_working_fix(args, fragments, fix):
    """issue 11 item 14: serving's fields too (the pins left 'no serving layout' before)."""
    stdout = assert_infeasible(invoke(["solve", "--workload", "infer", "--model", "8b", "--time-limit", "20"] + args), *fragments)
    assert f"fix: {fix}: best plan" in stdout, stdout


def test_pareto_refuses_an_empty_domain_with_one_line_naming_it():
    """issue 11 item 14: the front has no explanation section; one error line names the field."""
    result = invoke(["pareto", "--model", "8b", "--max-gpus", "8", "--pin", "checkpointing=every:7"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("error: checkpointing has no value left to search") and result.stderr.count("\n") == 1
    with pytest.raises(InputError, match="checkpointing has no value left to search"):
        vramopt.pareto({"workload": {"model": "8b"}, "space": {"max_gpus": 8, "pin": {"checkpointing": "every:7"}}})


EMPTY_REQUESTS = [
    (TrainingWorkload(model="8b", global_batch=64), SearchSpace(gpus=("h100",), max_gpus=4, pin={"checkpointing": "every:3"})),
    (TrainingWorkload(model="8b", global_batch=64), SearchSpace(gpus=("h100",), max_gpus=4, pin={"pipeline_parallel": "4", "checkpointing": "every:16"})),
    (TrainingWorkload(model="8b", global_batch=64), SearchSpace(gpus=("h100",), max_gpus=4, pin={"tensor_parallel": "8"})),
    (TrainingWorkload(model="8b", global_batch=64), SearchSpace(gpus=("h100", "a100-80gb"), max_gpus=4, pin={"micro_batch": "128"})),
    (TrainingWorkload(model="8b", global_batch=64), SearchSpace(gpus=("h100",), max_gpus=4, pin={"data_parallel": "4", "micro_batch": "32"})),
    (TrainingWorkload(model="8b", global_batch=64), SearchSpace(gpus=("h100",), max_gpus=4, pin={"virtual_stages": "3"})),
    (TrainingWorkload(model="8b", global_batch=64, kind="lora"), SearchSpace(gpus=("h100",), max_gpus=2, forbid={"precision": ("bf16",)})),
    (ServingWorkload(model="8b"), SearchSpace(gpus=("a100-80gb",), max_gpus=2, pin={"kv_cache_dtype": "fp8"})),
    (ServingWorkload(model="8b"), SearchSpace(gpus=("h100",), max_gpus=2, allow={"pipeline_parallel": ("3", "5")})),
    (ServingWorkload(model="8b"), SearchSpace(gpus=("h100",), max_gpus=2, pin={"mig_profile": "1g.10gb", "pipeline_parallel": "2"})),
]


@pytest.mark.parametrize("workload, space", EMPTY_REQUESTS)
def test_a_field_reported_empty_really_leaves_no_plan(workload, space, monkeypatch):
    """issue 11 item 14: the check never reports a field that still has a plan: with the
    check switched off, the builders' tables have no feasible plan (the oracle), or the
    builders refuse the request themselves."""
    response = vramopt.solve(vramopt.SolveRequest(workload, space))
    assert response.to_dict()["explanation"]["binding_constraint"] == "empty_domain"
    monkeypatch.setattr(problem_module, "raise_on_empty_domain", lambda *arguments: None)
    try:
        built = problem_module.build_problem(workload, space)
    except VramoptError:
        return
    assert solve_exhaustive(built) is None


@pytest.mark.parametrize(
    "space",
    [
        SearchSpace(gpus=("h100",), max_gpus=4, pin={"checkpointing": "every:4"}),
        SearchSpace(gpus=("h100",), max_gpus=4, pin={"virtual_stages": "2"}),
        SearchSpace(gpus=("h100",), max_gpus=4, pin={"sequence_parallel": "true"}),
        SearchSpace(gpus=("h100",), max_gpus=4, pin={"offload": "cpu"}),
        SearchSpace(gpus=("h100",), max_gpus=4, forbid={"grad_comm_precision": ("bf16",)}),
    ],
)
def test_a_field_with_a_valid_value_left_is_not_reported(space):
    """issue 11 item 14: the same fields with one valid value left still solve."""
    response = vramopt.solve(vramopt.SolveRequest(TrainingWorkload(model="8b", global_batch=64), space))
    assert response.feasible, response.to_dict()["explanation"]


TRAINING_PINS = {
    "tensor_parallel": ("1", "2", "3", "8", "16"), "pipeline_parallel": ("1", "2", "3", "4", "32"),
    "data_parallel": ("1", "2", "3", "64"), "micro_batch": ("1", "3", "16", "128"), "zero_stage": ("0", "1", "3"),
    "offload": ("none", "cpu", "nvme"), "checkpointing": ("none", "every:2", "every:3", "every:8", "every:16"),
    "sequence_parallel": ("true", "false"), "virtual_stages": ("1", "2", "3"), "gpus": ("1", "2", "3", "8"),
    "grad_comm_precision": ("bf16", "fp8"),
}
SERVING_PINS = {
    "tensor_parallel": ("1", "2", "3", "8"), "pipeline_parallel": ("1", "2", "3"), "gpus": ("1", "2", "3"),
    "kv_cache_dtype": ("bf16", "fp8"), "mig_profile": ("none", "1g.10gb"), "quantization": ("bf16", "int4"),
    "paged_kv": ("true", "false"),
}


@st.composite
def small_requests(draw):
    serving = draw(st.booleans(), label="serving")
    pins = SERVING_PINS if serving else TRAINING_PINS
    fields = draw(st.lists(st.sampled_from(sorted(pins)), max_size=3, unique=True), label="pinned")
    pin = {field: draw(st.sampled_from(pins[field])) for field in fields}
    forbid_field = draw(st.sampled_from([None] + sorted(set(pins) - set(pin))), label="forbidden")
    forbid = {forbid_field: tuple(draw(st.lists(st.sampled_from(pins[forbid_field]), min_size=1, unique=True)))} if forbid_field else {}
    gpus = tuple(draw(st.lists(st.sampled_from(("h100", "a100-80gb")), min_size=1, max_size=2, unique=True), label="gpus"))
    space = SearchSpace(gpus=gpus, max_gpus=draw(st.sampled_from((1, 2, 4))), pin=pin, forbid=forbid, workers=1)
    if serving:
        return ServingWorkload(model="8b", context=2048), space
    return TrainingWorkload(model="8b", seq_len=1024, global_batch=draw(st.sampled_from((16, 64)))), space


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_requests())
def test_the_empty_domain_check_agrees_with_the_oracle(request):
    """issue 11 item 14: over random pins and forbids, whenever a field is reported empty,
    the builders without the check find no plan (or refuse the request themselves)."""
    from vramopt.optimizer.empty_domains import EmptyDomainError

    workload, space = request
    try:
        problem_module.build_problem(workload, space)
        event("a plan space")
        return
    except EmptyDomainError:
        event("empty domain")
    except VramoptError:
        event("refused")
        return
    with mock.patch.object(problem_module, "raise_on_empty_domain", lambda *arguments: None):
        try:
            built = problem_module.build_problem(workload, space)
        except VramoptError:
            event("empty domain: the builders refuse it")
            return
    event("empty domain: the oracle finds no plan")
    assert solve_exhaustive(built) is None


def test_the_largest_gpu_count_matches_the_listed_counts():
    """issue 11 item 14: the check bounds tp/pp/dp by the largest count without listing a
    million counts; it must equal the largest of parallelism.gpu_counts."""
    from vramopt.constraints.parallelism import gpu_counts
    from vramopt.optimizer.empty_domains import largest_gpu_count

    for max_gpus in range(1, 80):
        for gpus_per_node in (1, 4, 8, 72):
            for whole_nodes in (True, False):
                assert largest_gpu_count(max_gpus, gpus_per_node, whole_nodes) == max(gpu_counts(max_gpus, gpus_per_node, whole_nodes))
