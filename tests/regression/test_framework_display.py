"""Issue 15 build item 1 (the framework named in the answer): under a target framework the
estimate and solve responses carry ``framework`` and the table names it with its release;
under generic neither appears, so the generic output is unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.cli_runner import invoke

SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "schema" / "vramopt-v1.schema.json").read_text())
ESTIMATE = ["estimate", "--model", "8b", "--gpus", "8", "--zero", "1"]
SOLVE = ["solve", "--model", "8b", "--max-gpus", "8"]


def run(args):
    result = invoke(args)
    assert result.exit_code == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("framework, release", [("deepspeed", "DeepSpeed 0.19.8"), ("megatron", "Megatron-LM core_v0.16.1")])
def test_estimate_and_solve_name_the_framework(framework, release):
    estimate = json.loads(run([*ESTIMATE, "--framework", framework, "--format", "json"]))
    assert estimate["framework"] == framework
    jsonschema.validate(estimate, SCHEMA)
    assert json.loads(run([*SOLVE, "--framework", framework, "--format", "json"]))["framework"] == framework
    for args in (ESTIMATE, SOLVE):
        table = run([*args, "--framework", framework])
        assert f"framework {release}: its rules and memory accounting" in table


def test_generic_output_carries_no_framework():
    estimate = json.loads(run([*ESTIMATE, "--format", "json"]))
    assert "framework" not in estimate
    jsonschema.validate(estimate, SCHEMA)
    assert "framework" not in json.loads(run([*SOLVE, "--format", "json"]))
    for args in (ESTIMATE, [*ESTIMATE, "--framework", "generic"], SOLVE):
        assert "its rules and memory accounting" not in run(args)
