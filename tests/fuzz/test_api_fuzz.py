"""Fuzz the embedding API (vramopt.solve / pareto / estimate / pack): random request
structures as dicts, JSON text and bytes, and request dataclasses with wrong field types.

Each call either returns a response whose ``to_dict()`` is plain JSON (no NaN) or raises a
``vramopt.errors.VramoptError`` subclass; any other exception is a bug
(fuzz_support.check_api).
"""

from __future__ import annotations

import json
import time

from hypothesis import given
from hypothesis import strategies as st

import vramopt
from fuzz_support import (
    ADVERSARIAL_JSON,
    ESTIMATE_REQUESTS,
    NON_JSON_PYTHON,
    PACK_REQUESTS,
    PARETO_REQUESTS,
    SOLVE_REQUESTS,
    TALLY,
    check_api,
    fuzz_settings,
    json_scalars,
    mutate,
    random_json,
)
from vramopt.api import MAX_REQUEST_BYTES, EstimateRequest, PackRequest, ParetoRequest, SolveRequest
from vramopt.errors import VramoptError
from vramopt.types import SearchSpace, ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload

CALLS = {
    "solve": (vramopt.solve, SOLVE_REQUESTS),
    "pareto": (vramopt.pareto, PARETO_REQUESTS),
    "estimate": (vramopt.estimate, ESTIMATE_REQUESTS),
    "pack": (vramopt.pack, PACK_REQUESTS),
}
API_VALUES = st.one_of(json_scalars, st.sampled_from(NON_JSON_PYTHON))


def request_of(data, name: str):
    """A mostly-almost-valid request for ``name``: a dict, its JSON text, or its bytes."""
    _, bases = CALLS[name]
    base = data.draw(st.sampled_from(bases), label="base")
    choice = data.draw(st.integers(0, 19), label="kind")
    if choice < 14:
        request = mutate(data.draw, base, API_VALUES if choice < 4 else json_scalars)
    elif choice < 17:
        request = data.draw(random_json)
    elif choice < 18:
        request = data.draw(st.sampled_from(ADVERSARIAL_JSON))
    else:
        request = mutate(data.draw, base)
    form = data.draw(st.sampled_from(["dict", "dict", "text", "bytes"]), label="form")
    if form == "dict" or choice < 4:
        return request
    text = json.dumps(request)
    if data.draw(st.integers(0, 9)) == 0:
        text = data.draw(st.sampled_from(["", "{", "\ud800", "[" * 100_000, "{" * 50_000, text[:-1], "1e999", "-", "NaN"]))
    return text.encode("utf-8", "surrogatepass") if form == "bytes" else text


def fuzz_call(name: str, data) -> None:
    call, _ = CALLS[name]
    check_api(call, request_of(data, name), f"api:{name}")


@fuzz_settings(600)
@given(data=st.data())
def test_api_solve_requests(data):
    fuzz_call("solve", data)


@fuzz_settings(300)
@given(data=st.data())
def test_api_pareto_requests(data):
    fuzz_call("pareto", data)


@fuzz_settings(600)
@given(data=st.data())
def test_api_estimate_requests(data):
    fuzz_call("estimate", data)


@fuzz_settings(400)
@given(data=st.data())
def test_api_pack_requests(data):
    fuzz_call("pack", data)


# ---------------------------------------------------------------------------------------
# Dataclasses built by a caller with wrong field types: the library validates them too

WRONG = st.one_of(st.sampled_from(ADVERSARIAL_JSON), st.sampled_from(NON_JSON_PYTHON))

TRAINING_WORKLOAD = {"model": "8b", "seq_len": 2048, "global_batch": 16, "headroom_fraction": 0.1, "kind": "train", "lora_rank": 16}
SERVING_WORKLOAD = {"model": "7b", "context": 4096, "headroom_fraction": 0.1, "min_slots": 1, "max_latency_ms": None}
SPACE = {"gpus": ("h100",), "max_gpus": 2, "whole_nodes": True, "allow_tp_across_nodes": False, "allow_fp4": False,
         "allow": {}, "forbid": {}, "pin": {}, "objective": "throughput", "min_tokens_per_s": None, "time_limit_s": 2.0,
         "workers": 2}
TRAINING_PLAN = {"gpu": "h100", "gpus": 2, "tensor_parallel": 1, "pipeline_parallel": 1, "sequence_parallel": False,
                 "virtual_stages": 1, "zero_stage": 1, "checkpointing": "none", "precision": "bf16",
                 "grad_comm_precision": "bf16", "offload": "none", "flash_attention": True, "micro_batch": 1}
SERVING_PLAN = {"gpu": "h100", "gpus": 1, "tensor_parallel": 1, "pipeline_parallel": 1, "quantization": "bf16",
                "kv_cache_dtype": "bf16", "paged_kv": True, "slots": 4, "mig_profile": "none", "speculative_decoding": False}


def spoiled(data, fields: dict, label: str) -> dict:
    """``fields`` with one or two of them given a wrong value (type or range)."""
    fields = dict(fields)
    for name in data.draw(st.lists(st.sampled_from(sorted(fields)), min_size=1, max_size=2, unique=True), label=label):
        fields[name] = data.draw(WRONG, label=f"{label}.{name}")
    return fields


@fuzz_settings(500)
@given(data=st.data())
def test_api_dataclasses_with_wrong_field_types(data):
    serving = data.draw(st.booleans(), label="serving")
    what = data.draw(st.sampled_from(["workload", "space", "plan"]), label="spoil")
    workload_fields = SERVING_WORKLOAD if serving else TRAINING_WORKLOAD
    workload_class = ServingWorkload if serving else TrainingWorkload
    workload = workload_class(**(spoiled(data, workload_fields, "workload") if what == "workload" else workload_fields))
    if what == "plan" or data.draw(st.booleans(), label="estimate"):
        plan_fields = SERVING_PLAN if serving else TRAINING_PLAN
        plan_class = ServingPlan if serving else TrainingPlan
        plan = plan_class(**(spoiled(data, plan_fields, "plan") if what == "plan" else plan_fields))
        check_api(vramopt.estimate, EstimateRequest(workload, plan), "api:dataclasses")
        return
    space = SearchSpace(**(spoiled(data, SPACE, "space") if what == "space" else SPACE))
    call = data.draw(st.sampled_from(["solve", "pareto"]), label="call")
    request = SolveRequest(workload, space) if call == "solve" else ParetoRequest(workload, space)
    check_api(getattr(vramopt, call), request, "api:dataclasses")


@fuzz_settings(150)
@given(data=st.data())
def test_api_pack_request_dataclass_with_wrong_field_types(data):
    base = data.draw(st.sampled_from(PACK_REQUESTS))
    fields = {"cluster": base["cluster"], "jobs": tuple(base["jobs"]), "running": tuple(base.get("running", ())),
              "time_limit_s": 1.0, "workers": 2}
    check_api(vramopt.pack, PackRequest(**spoiled(data, fields, "pack")), "api:dataclasses")


# ---------------------------------------------------------------------------------------
# Large and deeply nested requests


def test_api_refuses_large_and_deep_requests_quickly():
    padded = json.dumps(SOLVE_REQUESTS[0]) + " " * MAX_REQUEST_BYTES
    deep = "[" * 200_000 + "]" * 200_000
    nested_dict = {"workload": {"model": "8b"}, "space": {}}
    node = nested_dict["space"]
    for _ in range(10_000):
        node["pin"] = {}
        node = node["pin"]
    many_pins = {"workload": {"model": "8b"}, "space": {"max_gpus": 1, "pin": {f"field{index}": "1" for index in range(50_000)}}}
    many_gpus = {"workload": {"model": "8b"}, "space": {"max_gpus": 1, "gpus": ["h100"] * 50_000}}
    many_jobs = {"cluster": PACK_REQUESTS[0]["cluster"], "jobs": [{"id": str(index), "model": "ü"} for index in range(20_000)]}
    for call, request in [
        (vramopt.solve, padded), (vramopt.solve, padded.encode()), (vramopt.pareto, padded), (vramopt.estimate, deep),
        (vramopt.solve, deep), (vramopt.pack, deep), (vramopt.solve, nested_dict), (vramopt.solve, many_pins),
        (vramopt.solve, many_gpus), (vramopt.pack, many_jobs),
    ]:
        started = time.perf_counter()
        try:
            check_api(call, request, "api:large")
        except RecursionError:
            raise AssertionError("RecursionError escaped the API") from None
        assert time.perf_counter() - started < 10


def test_api_errors_are_typed_for_every_call_and_non_request():
    for name, (call, _) in CALLS.items():
        for request in (None, 1, [], "", b"", "null", object(), {"workload": None}):
            try:
                check_api(call, request, "api:non-requests")
            except VramoptError:
                pass
    assert TALLY.tracebacks == 0
