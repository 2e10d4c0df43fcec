"""Issue 16 item 4 (disaggregated prefill/decode): ``vramopt estimate`` of an xPyD plan from the
CLI (--prefill-replicas, --prefill-tp, --decode-replicas, --decode-tp), which was API only."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from tests.cli_runner import invoke

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs/schema/vramopt-serving-v1.schema.json").read_text())
REQUEST = ["--workload", "infer", "--model", "70b", "--gpu", "h100", "--rate", "10", "--input-tokens", "1000", "--output-tokens",
           "1000", "--ttft-p99-ms", "2000", "--tpot-ms", "50"]


def test_the_estimate_of_the_solves_disaggregated_plan_gives_its_figures():
    """issue 16 item 4: the must-show's best disaggregated plan, estimated from the CLI, has the
    figures the solve's disaggregation object reports; its plan and requests objects follow
    the serving schema's disaggregation object."""
    solved = invoke(["solve", *REQUEST, "--objective", "min-gpus", "--format", "json"])
    assert solved.exit_code == 0, solved.stderr
    found = json.loads(solved.stdout)["disaggregation"]
    plan = found["plan"]
    result = invoke(["estimate", *REQUEST, "--quantization", plan["quantization"], "--kv-cache-dtype", plan["kv_cache_dtype"],
                     "--prefill-replicas", str(plan["prefill_replicas"]), "--prefill-tp", str(plan["prefill_tensor_parallel"]),
                     "--decode-replicas", str(plan["decode_replicas"]), "--decode-tp", str(plan["decode_tensor_parallel"]),
                     "--slots", str(plan["decode_slots"]), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    estimate = json.loads(result.stdout)
    assert estimate["plan"] == plan
    assert estimate["requests"] == found["requests"]
    assert estimate["fits"] and estimate["served"] and all(estimate["requirements"].values())
    definitions = SCHEMA["$defs"]["disaggregation"]["properties"]
    for key in ("plan", "requests"):
        jsonschema.validate(estimate[key], {**definitions[key], "$defs": SCHEMA["$defs"]})


def test_a_failing_plan_says_which_requirement_fails():
    """issue 16 item 4: one decode replica of tp 2 and 16 slots cannot serve 10 requests/s."""
    result = invoke(["estimate", *REQUEST, "--quantization", "fp8", "--kv-cache-dtype", "fp8", "--prefill-replicas", "1",
                     "--prefill-tp", "2", "--decode-replicas", "1", "--decode-tp", "2"])
    assert result.exit_code == 0, result.stderr
    assert "fails: load served" in result.stdout and "NOT MET" in result.stdout


def test_partial_or_colocated_options_are_one_error_line():
    """issue 16 item 4: all four options together, without --gpus/--tp, on a serving workload."""
    cases = ((["estimate", *REQUEST, "--prefill-replicas", "1", "--prefill-tp", "2"], "missing --decode-replicas, --decode-tp"),
             (["estimate", *REQUEST, "--gpus", "4", "--prefill-replicas", "1", "--prefill-tp", "2", "--decode-replicas", "1",
               "--decode-tp", "2"], "--gpus describes a colocated plan"),
             (["estimate", "--workload", "train", "--prefill-replicas", "1", "--prefill-tp", "2", "--decode-replicas", "1",
               "--decode-tp", "2"], "applies to --workload infer"))
    for arguments, fragment in cases:
        result = invoke(arguments)
        assert result.exit_code == 2 and result.stderr.startswith("error: ") and fragment in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1
