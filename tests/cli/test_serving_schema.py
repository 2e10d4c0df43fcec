"""`vramopt estimate --workload infer --format json` against docs/schema/vramopt-serving-v1.schema.json.

The validator is the small JSON Schema 2020-12 subset validator of test_cli_estimate.py
(loaded from its file, so this test does not depend on pytest's import mode); it rejects
schema keywords outside the subset, so the schema cannot grow a keyword nobody checks.
When jsonschema is installed it cross-checks the schema file and the responses too.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

import vramopt
from vramopt import cli
from vramopt.estimate import estimate_serving
from vramopt.optimizer.search import solve
from vramopt.types import SearchSpace, ServingPlan, ServingWorkload

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "docs" / "schema" / "vramopt-serving-v1.schema.json"
CONTRACT_PATH = ROOT / "docs" / "json-contract.md"


def _load_helpers():
    spec = importlib.util.spec_from_file_location("_vramopt_cli_estimate_helpers", Path(__file__).with_name("test_cli_estimate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_helpers = _load_helpers()
schema_errors = _helpers.schema_errors
make_runner = _helpers.make_runner

SOLVE_KEYS = ("solver", "runners_up", "explanation", "offload_cost")
MEMORY_TERMS = (
    "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "logits_bytes", "kv_cache_bytes",
    "cuda_graphs_bytes", "draft_model_bytes", "reserve_bytes",
)

CASES = {
    "default": [],
    "seed-70b-fp8-b200": ["--quantization", "fp8", "--kv-cache-dtype", "fp8", "--slots", "108", "--speculative"],
    "tp8-h100": ["--gpu", "h100", "--gpus", "8", "--tp", "8", "--quantization", "fp8", "--slots", "32"],
    "pp2-replicas": ["--gpus", "4", "--pp", "2", "--no-paged-kv", "--slots", "4"],
    "mig-8b-h100": ["--model", "8b", "--gpu", "h100", "--mig-profile", "1g.20gb", "--quantization", "fp8", "--slots", "19"],
    "int4-long-context": ["--model", "8b", "--gpu", "rtx4090", "--quantization", "int4", "--context", "32768", "--slots", "2"],
    "does-not-fit": ["--slots", "512"],
    "requirements-not-met": ["--min-slots", "100000", "--max-latency-ms", "0.001"],
    "requirements-met": ["--model", "8b", "--min-slots", "64", "--max-latency-ms", "50", "--slots", "64"],
}


def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def validate(response: dict) -> list[str]:
    root = schema()
    return schema_errors(response, root, root)


def serve_json(args) -> dict:
    result = make_runner().invoke(cli.main, ["estimate", "--workload", "infer", *args, "--format", "json"])
    assert "Traceback" not in result.output
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout)


@pytest.mark.parametrize("args", list(CASES.values()), ids=list(CASES))
def test_serving_json_validates_against_the_schema(args):
    response = serve_json(args)
    assert validate(response) == []


@pytest.mark.parametrize("args", list(CASES.values()), ids=list(CASES))
def test_serving_json_is_self_consistent(args):
    response = serve_json(args)
    plan, memory, throughput = response["plan"], response["memory"], response["throughput"]
    assert memory["total_bytes"] == pytest.approx(sum(memory[term] for term in MEMORY_TERMS), rel=1e-12)
    assert memory["headroom_fraction"] == pytest.approx(1 - memory["total_bytes"] / memory["capacity_bytes"])
    assert memory["fits"] is (memory["total_bytes"] <= memory["capacity_bytes"] * (1 - memory["required_headroom_fraction"]))
    assert throughput["concurrent_slots"] == plan["replicas"] * plan["slots"]
    # tokens/s of the deployment = sequences held at once / time per output token of one sequence.
    assert throughput["tokens_per_s"] == pytest.approx(throughput["concurrent_slots"] / (throughput["latency_per_token_ms"] / 1e3), rel=1e-9)
    if plan["mig_profile"] == "none":
        assert plan["instances_per_gpu"] == 1
        assert plan["replicas"] == plan["gpus"] // (plan["tensor_parallel"] * plan["pipeline_parallel"])
    else:
        assert plan["replicas"] == plan["gpus"] * plan["instances_per_gpu"]
        assert memory["capacity_bytes"] < 80e9  # the instance's memory, not the GPU's
    assert (memory["draft_model_bytes"] > 0) is plan["speculative_decoding"]
    assert (throughput["tensor_parallel_s"] > 0) is (plan["tensor_parallel"] > 1)
    requirements = response["requirements"]
    assert requirements["min_slots_met"] is (throughput["concurrent_slots"] >= requirements["min_slots"])
    bound = requirements["max_latency_ms"]
    assert requirements["max_latency_met"] is (bound is None or throughput["latency_per_token_ms"] <= bound)
    assert requirements["met"] is (requirements["min_slots_met"] and requirements["max_latency_met"])


@pytest.mark.docs_snapshot
def test_the_seed_case_reports_the_numbers_docs_quote():
    # A change detector, not validation: 5,177 and 20.9 are what the code prints since the
    # operator-level serving model (costs/serving_operators.py; benchmarks/serving_claims.py).
    response = serve_json(CASES["seed-70b-fp8-b200"])
    assert response["workload"] == "infer" and response["schema"] == vramopt.SCHEMA
    assert response["plan"]["context"] == 8192 and response["plan"]["quantization"] == "fp8"
    assert response["memory"]["fits"] is True
    # docs/claims.md quotes 5,177 tokens/s at 20.9 ms/token for this plan (benchmarks/serving_claims.py).
    assert response["throughput"]["tokens_per_s"] == pytest.approx(5177, rel=0.01)
    assert response["throughput"]["latency_per_token_ms"] == pytest.approx(20.9, rel=0.01)


def test_serving_json_matches_the_library_exactly():
    workload = ServingWorkload(model="70b", context=8192)
    plan = ServingPlan(gpu="b200", gpus=1, quantization="fp8", kv_cache_dtype="fp8", slots=108, speculative_decoding=True)
    library = json.loads(json.dumps(estimate_serving(workload, plan).to_dict()))
    assert serve_json(CASES["seed-70b-fp8-b200"]) == library


def test_the_validator_rejects_what_the_serving_schema_forbids():
    broken = serve_json([])
    broken["workload"] = "train"
    broken["plan"]["quantization"] = "int3"
    broken["plan"]["mig_profile"] = "half"
    broken["plan"]["zero_stage"] = 3
    broken["memory"]["gradients_bytes"] = 1.0
    del broken["throughput"]["latency_per_token_ms"]
    broken["lora"] = None
    errors = validate(broken)
    for fragment in ("'train'", "int3", "half", "zero_stage", "gradients_bytes", "'latency_per_token_ms'", "'lora'"):
        assert any(fragment in error for error in errors), (fragment, errors)


def test_a_training_response_does_not_validate_as_serving():
    training = vramopt.estimate_training(vramopt.TrainingWorkload(model="8b"), vramopt.TrainingPlan(gpu="b200", gpus=1)).to_dict()
    assert validate(training) != []


def test_the_solver_response_is_the_estimate_plus_solver_keys():
    result = solve(ServingWorkload(model="8b", context=8192), SearchSpace(gpus=("h100",), max_gpus=1, pin={"mig_profile": "1g.20gb"}))
    response = json.loads(json.dumps(result.to_dict()))
    assert {key: response.pop(key) for key in SOLVE_KEYS}["offload_cost"] is None
    assert validate(response) == []
    root = schema()
    runners_up = result.to_dict()["runners_up"]
    assert runners_up
    for runner in runners_up:
        assert schema_errors(runner["plan"], root["$defs"]["plan"], root) == []
        assert set(runner) == {"changed_field", "plan", "memory_total_bytes", "tokens_per_s", "tokens_per_s_loss_fraction", "differences"}


def test_every_serving_key_is_documented_in_the_contract():
    text = CONTRACT_PATH.read_text()
    root = schema()
    keys = set(root["properties"])
    for name in ("model", "plan", "memory", "throughput", "requirements", "requests"):
        keys |= set(root["$defs"][name]["properties"])
    missing = sorted(key for key in keys if not re.search(rf"`{re.escape(key)}`", text))
    assert missing == []


def test_the_serving_schema_is_valid_draft_2020_12_when_jsonschema_is_installed():
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(schema())
    validator = jsonschema.Draft202012Validator(schema())
    for args in CASES.values():
        validator.validate(serve_json(args))
