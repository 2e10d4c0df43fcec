"""Bad input never ends in a traceback: one line on stderr and exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_runner import invoke
from vramopt import cli




def assert_one_line_error(result, *fragments):
    assert result.exit_code == 2, (result.output, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    stderr = result.stderr
    assert "Traceback" not in stderr
    assert stderr.count("\n") == 1 and stderr.endswith("\n"), stderr
    assert stderr.startswith(("error", "Error:")), stderr
    for fragment in fragments:
        assert fragment in stderr, (fragment, stderr)


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--model", "llama-3.1-7b"], ["unknown model 'llama-3.1-7b'", "did you mean", "llama-3.1-70b"]),
        (["--gpu", "h10"], ["unknown GPU 'h10'", "h100"]),
        (["--gpus", "6", "--tp", "3"], ["tensor_parallel must divide the attention heads", "64 heads"]),
        (["--gpus", "3", "--pp", "3"], ["pipeline_parallel must divide the layers", "80 layers"]),
        (["--gpus", "4", "--tp", "8"], ["does not divide the 4 GPUs"]),
        (["--gpus", "8", "--tp", "2", "--pp", "3"], ["does not divide the 8 GPUs"]),
        (["--zero", "5"], ["--zero"]),
        (["--gpus", "-1"], ["--gpus"]),
        (["--gpus", "0"], ["--gpus"]),
        (["--headroom", "1.5"], ["--headroom"]),
        (["--headroom", "nan"], ["--headroom"]),
        (["--headroom", "inf"], ["--headroom"]),
        (["--headroom", "-0.1"], ["--headroom"]),
        (["--headroom", "100%"], ["--headroom"]),
        (["--headroom", "ten"], ["--headroom"]),
        (["--checkpoint", "every:0"], ["every:0"]),
        (["--checkpoint", "every:x"], ["every:x"]),
        (["--checkpoint", "every:81"], ["checkpointing every k"]),
        (["--gpu", "a100-40gb", "--precision", "fp8"], ["a100-40gb does not support fp8"]),
        (["--precision", "fp6"], ["--precision"]),
        (["--seq-len", "200000"], ["seq_len 200000", "context of 131072"]),
        (["--seq-len", "0"], ["--seq-len"]),
        (["--global-batch", "3", "--gpus", "2"], ["global_batch must be a multiple"]),
        (["--offload", "cpu"], ["offload=cpu needs zero_stage >= 1"]),
        (["--offload", "nvme", "--zero", "2"], ["offload=nvme needs zero_stage 3"]),
        (["--sequence-parallel"], ["sequence_parallel needs tensor_parallel > 1"]),
        (["--virtual-stages", "2"], ["virtual_stages > 1 needs pipeline_parallel > 1"]),
        (["--format", "xml"], ["--format"]),
        (["--no-such-flag"], ["--no-such-flag"]),
    ],
)
def test_bad_estimate_flags(args, fragments):
    assert_one_line_error(invoke(["estimate", *args]), *fragments)


def test_unknown_command():
    assert_one_line_error(invoke(["estimat"]), "estimat")


def test_config_that_is_not_json(tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    assert_one_line_error(invoke(["estimate", "--model", str(path)]), str(path), "not valid JSON")


def test_config_missing_a_key(tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32}')
    assert_one_line_error(invoke(["estimate", "--model", str(path)]), str(path), "is missing")


def test_config_folder_without_the_key(tmp_path: Path):
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    assert_one_line_error(invoke(["estimate", "--model", str(tmp_path)]), "is missing")


def test_config_of_an_unsupported_architecture(tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "not-a-transformer"}')
    assert_one_line_error(invoke(["estimate", "--model", str(path)]), str(path))


def test_config_path_that_does_not_exist(tmp_path: Path):
    path = tmp_path / "missing" / "config.json"
    assert_one_line_error(invoke(["estimate", "--model", str(path)]), str(path))


def test_model_folder_that_does_not_exist(tmp_path: Path):
    assert_one_line_error(invoke(["estimate", "--model", str(tmp_path / "nothing-here")]), "unknown model")
