"""Issue 11 item 11: ``estimate --workload infer --min-slots 100000 --max-latency-ms 0.001``
said FITS. The estimate now checks the service requirements, reports each as met or not
met (table: ok/FAIL lines under the verdict, which says "FITS, requirements NOT MET";
JSON: a ``requirements`` object), by the same test that makes a candidate invalid in solve.
"""

from __future__ import annotations

import json

import pytest

from tests.cli_runner import invoke
from vramopt.errors import InputError
from vramopt.estimate import estimate_serving
from vramopt.optimizer.search import solve
from vramopt.types import SearchSpace, ServingPlan, ServingWorkload


REQUIREMENTS = ["--min-slots", "100000", "--max-latency-ms", "0.001"]


def test_the_issue_command_says_the_requirements_are_not_met():
    """issue 11 item 11: 100,000 sequences and 1 us per token are impossible, whatever the memory verdict."""
    lines = invoke(["estimate", "--workload", "infer", *REQUIREMENTS]).stdout.splitlines()
    assert any(line in ("FITS, requirements NOT MET", "DOES NOT FIT, requirements NOT MET") for line in lines)
    assert "FITS" not in lines


def test_a_plan_that_fits_but_misses_the_requirements_is_not_called_fitting():
    """issue 11 item 11: the plan fits in memory, and the verdict says the requirements are not met."""
    args = ["estimate", "--workload", "infer", "--model", "8b", "--gpu", "h100", "--slots", "16", *REQUIREMENTS]
    table = invoke(args)
    assert table.exit_code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert "FITS, requirements NOT MET" in lines
    assert "FITS" not in lines
    concurrent = [line for line in lines if line.strip().startswith("concurrent sequences")]
    latency = [line for line in lines if line.strip().startswith("time per output token") and "bound" in line]
    assert len(concurrent) == 1 and " FAIL " in concurrent[0] and "< 100,000 required" in concurrent[0]
    assert len(latency) == 1 and " FAIL " in latency[0] and "> 0.001 ms bound" in latency[0]
    response = json.loads(invoke([*args, "--format", "json"]).stdout)
    assert response["memory"]["fits"] is True
    assert response["requirements"] == {"min_slots": 100_000, "min_slots_met": False, "max_latency_ms": 0.001,
                                        "max_latency_met": False, "met": False}


def test_requirements_a_plan_meets_are_ok_lines():
    """issue 11 item 11: met requirements read ok, and the verdict stays FITS."""
    args = ["estimate", "--workload", "infer", "--model", "8b", "--gpu", "h100", "--slots", "64", "--min-slots", "64",
            "--max-latency-ms", "50"]
    lines = invoke(args).stdout.splitlines()
    assert "FITS" in lines
    assert any(line.strip().startswith("concurrent sequences") and " ok " in line and "64 >= 64 required" in line for line in lines)
    assert any(line.strip().startswith("time per output token") and " ok " in line and "<= 50 ms bound" in line for line in lines)
    assert json.loads(invoke([*args, "--format", "json"]).stdout)["requirements"]["met"] is True


@pytest.mark.parametrize("slots", [16, 128, 512])
@pytest.mark.parametrize("max_latency_ms", [8.0, 20.0, None])
def test_estimate_and_solve_judge_the_requirements_alike(slots, max_latency_ms):
    """issue 11 item 11: a plan estimate calls fitting and meeting the requirements is exactly
    a plan solve accepts when every plan field is pinned to it."""
    workload = ServingWorkload(model="8b", context=8192, min_slots=200, max_latency_ms=max_latency_ms)
    plan = ServingPlan(gpu="h100", gpus=2, quantization="fp8", kv_cache_dtype="fp8", slots=slots, speculative_decoding=False)
    estimate = estimate_serving(workload, plan)
    pins = {"gpus": "2", "tensor_parallel": "1", "pipeline_parallel": "1", "quantization": "fp8", "kv_cache_dtype": "fp8",
            "paged_kv": "true", "speculative_decoding": "false", "slots": str(slots), "mig_profile": "none"}
    solved = solve(workload, SearchSpace(gpus=("h100",), max_gpus=2, pin=pins), runner_up_count=0)
    assert (solved.estimate is not None) is (estimate.fits and estimate.requirements_dict()["met"])
    if solved.estimate is not None:
        assert solved.to_dict()["requirements"]["met"] is True


@pytest.mark.parametrize("field, value, fragment", [("min_slots", 0, "min_slots"), ("max_latency_ms", -1.0, "max latency")])
def test_estimate_refuses_malformed_requirements(field, value, fragment):
    """issue 11 item 11: estimate checks the requirements as solve does, so it refuses the malformed ones."""
    workload = ServingWorkload(model="8b", **{field: value})
    with pytest.raises(InputError, match=fragment):
        estimate_serving(workload, ServingPlan(gpu="h100", gpus=1))
