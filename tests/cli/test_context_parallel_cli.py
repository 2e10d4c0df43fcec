"""`--cp` / `--context-parallel` and the context_parallel plan field on the command line
(issue 12 item 4): shown, exported with a note, pinnable, and bad input in one line."""

from __future__ import annotations

import json

import pytest

from tests.cli_runner import invoke

LONG = ["--model", "llama-3.1-70b", "--gpu", "h100", "--seq-len", "131072", "--global-batch", "8"]


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 2, (result.output, result.stderr, result.exception)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(("error", "Error:")), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


def test_estimate_shows_cp_in_the_parallel_line_and_json():
    args = ["estimate", *LONG, "--gpus", "16", "--tp", "8", "--cp", "2", "--zero", "3", "--checkpoint", "full", "--sequence-parallel"]
    table = invoke(args)
    assert table.exit_code == 0, table.stderr
    assert "parallel  tp=8 cp=2 pp=1 dp=1," in table.stdout
    assert "context-parallel KV ring (exposed)" in table.stdout
    data = json.loads(invoke([*args, "--format", "json"]).stdout)
    assert data["plan"]["context_parallel"] == 2 and data["plan"]["data_parallel"] == 1
    assert data["throughput"]["context_parallel_s"] >= 0.0
    # The long spelling is the same option.
    same = json.loads(invoke(["estimate", *LONG, "--gpus", "16", "--tp", "8", "--context-parallel", "2", "--zero", "3",
                              "--checkpoint", "full", "--sequence-parallel", "--format", "json"]).stdout)
    assert same == data


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["estimate", *LONG, "--gpus", "16", "--tp", "8", "--cp", "4"],
         ["tensor_parallel x context_parallel x pipeline_parallel = 8 x 4 x 1 = 32 does not divide the 16 GPUs"]),
        (["estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", "--cp", "2", "--seq-len", "1000", "--global-batch", "1"],
         ["2 x context_parallel chunks of whole 128-token attention tiles", "seq_len 1000 / (2 x 2) = 250 tokens"]),
        (["estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", "--cp", "2", "--seq-len", "8192",
          "--global-batch", "1", "--no-flash-attention"], ["context_parallel > 1 needs flash_attention"]),
        (["estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--workload", "infer", "--cp", "2"], ["--cp does not apply"]),
        (["estimate", *LONG, "--cp", "0"], ["--cp"]),
        (["solve", *LONG, "--max-gpus", "16", "--pin", "context_parallel=two"], ["context_parallel value 'two' is not an integer"]),
        (["solve", *LONG, "--max-gpus", "16", "--pin", "cp=2"], ["did you mean context_parallel?"]),
    ],
    ids=["product", "tiles", "no-flash", "serving", "zero", "not-integer", "short-name"],
)
def test_bad_context_parallel_input_is_one_line(args, fragments):
    assert_one_line_error(invoke(args), *fragments)


def test_a_pinned_degree_that_cannot_split_the_sequence_is_named_with_its_fix():
    result = invoke(["solve", "--model", "llama-3.1-8b", "--gpu", "h100", "--seq-len", "4096", "--global-batch", "64",
                     "--max-gpus", "16", "--pin", "context_parallel=32"])
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        "error: context_parallel has no value left to search: 32 (pinned) is not a split of seq_len 4,096 into "
        "2 x context_parallel chunks of whole 128-token attention tiles (valid: 1, 2, 4, 8, 16); "
        "smallest fix: --pin context_parallel=16"), result.stderr


def test_solve_with_a_pinned_degree_reports_it(tmp_path):
    config = tmp_path / "ds.json"
    # --framework generic: the physics-only plan, whose cp DeepSpeed's config can only note (issue 15).
    result = invoke(["solve", *LONG, "--max-gpus", "32", "--pin", "context_parallel=4", "--framework", "generic",
                     "--export", "deepspeed", str(config)])
    assert result.exit_code == 0, result.stderr
    assert " cp=4 " in result.stdout
    assert "cp=4" in result.stdout.split("parallel  ", 1)[1].splitlines()[0]
    notes = (tmp_path / "ds.json").read_text() + result.stdout + result.stderr
    assert "DeepSpeed-Ulysses is a different scheme" in notes, notes


def test_solve_json_has_the_field_and_allow_lists_work():
    result = invoke(["solve", *LONG, "--max-gpus", "32", "--allow", "context_parallel=1,2", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)["plan"]
    assert plan["context_parallel"] in (1, 2)
    assert plan["tensor_parallel"] * plan["context_parallel"] * plan["pipeline_parallel"] * plan["data_parallel"] == plan["gpus"]
