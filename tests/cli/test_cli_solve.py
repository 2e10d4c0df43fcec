"""`vramopt solve` through click's runner: the headline requests, formats, bad input."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.cli_runner import invoke
from vramopt import cli
from vramopt.optimizer.search import solve_training
from vramopt.types import SearchSpace, TrainingWorkload




def test_2t_on_16_gpus_prints_an_offloaded_plan_with_its_slowdown():
    result = invoke(["solve", "--model", "2t", "--max-gpus", "16"])
    assert result.exit_code == 0, result.stderr
    assert "offload nvme is what makes it fit" in result.stdout
    assert "expected slowdown" in result.stdout
    assert "cp-sat: optimal" in result.stdout
    assert "runner-up tokens/s" in result.stdout


def test_json_answer_is_the_api_answer():
    result = invoke(["solve", "--model", "70b", "--max-gpus", "8", "--format", "json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    api = solve_training(TrainingWorkload(model="70b"), SearchSpace(max_gpus=8)).to_dict()
    for section in ("schema", "model", "plan", "memory", "throughput", "runners_up", "offload_cost"):
        assert data[section] == api[section]
    assert data["solver"]["status"] == "optimal" and data["solver"]["objective_value"] == api["solver"]["objective_value"]
    assert data["memory"]["fits"] is True


def test_csv_answer_has_one_row_with_solver_columns():
    result = invoke(["solve", "--model", "8b", "--max-gpus", "4", "--format", "csv"])
    assert result.exit_code == 0
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert len(rows) == 2
    header, row = rows
    assert "plan.zero_stage" in header and "solver.status" in header
    assert len(header) == len(row)
    assert row[header.index("solver.status")] == "optimal"


def test_exhaustive_engine_agrees_from_the_cli():
    answers = [
        json.loads(invoke(["solve", "--model", "70b", "--max-gpus", "8", "--engine", engine, "--format", "json"]).stdout)
        for engine in ("cp-sat", "exhaustive")
    ]
    assert answers[0]["plan"] == answers[1]["plan"]


def test_infeasible_request_explains_and_exits_2():
    result = invoke(["solve", "--model", "2t", "--max-gpus", "16", "--forbid", "offload=cpu,nvme"])
    assert result.exit_code == 2
    assert result.stdout.startswith("infeasible:")
    assert "fix: --max-gpus" in result.stdout
    assert result.stderr.count("\n") == 1 and "smallest fix" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--pin", "zero=3"], "did you mean zero_stage"),
        (["--pin", "zero_stage=3,2"], "takes one value"),
        (["--allow", "foo"], "KEY=VALUE"),
        (["--objective", "min-gpus"], "--min-tokens-per-s"),
        (["--max-gpus", "0"], "--max-gpus"),
        (["--time-limit", "0"], "--time-limit"),
        (["--gpu", "h10"], "unknown GPU"),
        (["--gpu", "a100-80gb", "--pin", "precision=fp8"], "does not support fp8"),
        (["--pin", "checkpointing=every:0"], "every:K"),
        (["--pin", "offload=disk"], "offload value 'disk'"),
        (["--pin", "zero_stage=2", "--forbid", "zero_stage=2"], "pinned and forbidden"),
        (["--engine", "magic"], "--engine"),
        (["--min-tokens-per-s", "5"], "only used with --objective min-gpus"),
    ],
)
def test_bad_solve_input_is_one_line_and_exit_2(args, fragment):
    result = invoke(["solve", "--model", "70b"] + args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and fragment in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
