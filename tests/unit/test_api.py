"""The embedding API: requests from dicts or dataclasses, responses that round-trip through
JSON and equal the CLI's output, thread safety, determinism."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

import vramopt
from tests.cli_runner import invoke
from vramopt import cli
from vramopt.api import EstimateRequest, ParetoRequest, Response, SolveRequest
from vramopt.errors import InputError
from vramopt.types import SearchSpace, ServingWorkload, TrainingPlan, TrainingWorkload


def without_timing(data: dict) -> dict:
    data = json.loads(json.dumps(data))
    (data.get("solver") or {}).pop("wall_time_s", None)
    return data




REQUESTS = [
    {"workload": {"model": "70b"}, "space": {"max_gpus": 8}},
    {"schema": "vramopt/v1", "workload": {"model": "2t"}, "space": {"max_gpus": 16, "pin": {"precision": "bf16"}}},
    {"workload": {"kind": "infer", "model": "70b", "context": 8192}, "space": {"max_gpus": 4}},
    {"workload": {"kind": "lora", "model": "8b", "seq_len": 2048, "global_batch": 16}, "space": {"gpus": ["rtx4090"], "max_gpus": 1}},
]


@pytest.mark.parametrize("request_dict", REQUESTS)
def test_api_solve_equals_the_cli_for_the_same_request(request_dict):
    api = vramopt.solve(request_dict)
    result = invoke(["solve", "--request", "-", "--format", "json"], stdin=json.dumps(request_dict))
    assert result.exit_code == 0, result.stderr
    assert without_timing(api.to_dict()) == without_timing(json.loads(result.stdout))


def test_requests_round_trip_and_dataclasses_equal_dicts():
    request = SolveRequest(TrainingWorkload(model="70b"), SearchSpace(max_gpus=8, pin={"zero_stage": "3"}))
    again = SolveRequest.from_dict(json.loads(json.dumps(request.to_dict())))
    assert again == request
    assert without_timing(vramopt.solve(request).to_dict()) == without_timing(vramopt.solve(request.to_dict()).to_dict())
    estimate = EstimateRequest(TrainingWorkload(model="70b"), TrainingPlan(gpu="b200", gpus=8, zero_stage=3))
    assert EstimateRequest.from_dict(estimate.to_dict()) == estimate
    pareto = ParetoRequest(ServingWorkload(model="8b"), SearchSpace(max_gpus=2))
    assert ParetoRequest.from_dict(pareto.to_dict()) == pareto


def test_responses_round_trip_through_json():
    response = vramopt.solve(REQUESTS[0])
    again = Response.from_json(response.to_json())
    assert again.to_dict() == response.to_dict()
    assert response.plan["gpus"] == 8 and response.feasible
    frame = response.to_frame()
    assert frame.shape[0] == 1 and "plan.zero_stage" in frame.columns
    assert not response.runners_up_frame().empty


def test_estimate_api_equals_the_library():
    response = vramopt.estimate({"workload": {"model": "70b", "seq_len": 8192, "global_batch": 32},
                                 "plan": {"gpu": "b200", "gpus": 4, "zero_stage": 3, "checkpointing": "every:4"}})
    assert response.data["memory"]["fits"] is False
    serving = vramopt.estimate({"workload": {"kind": "infer", "model": "70b"}, "plan": {"gpu": "b200", "gpus": 1, "quantization": "fp8"}})
    assert serving.data["plan"]["quantization"] == "fp8"


@pytest.mark.parametrize(
    "request_dict, fragment",
    [
        ({"workload": {"model": "70b", "foo": 1}}, "unknown field 'foo'"),
        ({"workload": {"model": "70b"}, "spaces": {}}, "spaces"),
        ({"workload": {"model": "70b"}, "space": {"max_gpus": "8"}}, "must be an integer"),
        ({"workload": {"model": "70b"}, "space": {"max_gpus": True}}, "must be an integer"),
        ({"workload": {"model": "70b", "headroom_fraction": float("nan")}}, "finite number"),
        ({"workload": {"kind": "serve", "model": "70b"}}, "not one of"),
        ({"schema": "vramopt/v0", "workload": {"model": "70b"}}, "not supported"),
        ({"space": {}}, "workload"),
        ([1, 2], "JSON object"),
        ({"workload": {"model": "70b"}, "engine": "gurobi"}, "engine"),
        ({"workload": {"model": "70b"}, "space": {"pin": {"zero_stage": [3, 2]}}}, "must be a string, number or boolean"),
    ],
)
def test_bad_requests_are_typed_errors(request_dict, fragment):
    with pytest.raises(InputError) as error:
        vramopt.solve(request_dict)
    assert fragment in str(error.value) and "\n" not in str(error.value)


def test_text_requests_are_bounded_and_parsed():
    with pytest.raises(InputError, match="not valid JSON"):
        vramopt.solve("{not json")
    with pytest.raises(InputError, match="bytes, more than"):
        vramopt.solve("{" + " " * 1_000_001 + "}")


def test_concurrent_solves_equal_serial_solves():
    requests = [REQUESTS[index % len(REQUESTS)] for index in range(12)]
    serial = [without_timing(vramopt.solve(request).to_dict()) for request in requests]
    with ThreadPoolExecutor(max_workers=6) as pool:
        concurrent = [without_timing(response.to_dict()) for response in pool.map(vramopt.solve, requests)]
    assert concurrent == serial


def test_pareto_api_frame_and_cli_agree():
    request = {"workload": {"model": "8b"}, "space": {"max_gpus": 8}}
    response = vramopt.pareto(request)
    frame = response.to_frame()
    assert len(frame) == len(response.data["front"]) > 1
    assert frame["chosen"].sum() == 1
    result = invoke(["pareto", "--model", "8b", "--max-gpus", "8", "--format", "json"])
    assert without_timing(json.loads(result.stdout)) == without_timing(response.to_dict())
