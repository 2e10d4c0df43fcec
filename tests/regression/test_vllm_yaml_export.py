"""Issue 15 item 2 (vLLM: a YAML file ``vllm serve --config`` accepts; it refuses .json):
``--export vllm FILE.yaml`` writes the flat mapping vLLM's own config-file reader turns into
the same flags as the exported ``vllm serve`` command line.

vLLM's reader is restated below from vllm-project/vllm vllm/utils/argparse_utils.py
(``FlexibleArgumentParser.load_config_file``, commit c836a6feca5511c326b4369f6fd11cf72090665b):
the extension must be yaml or yml, the file is ``yaml.safe_load``ed, and each key becomes
``--key``: a bool adds the bare flag when true and nothing when false, a list its items, any
other value ``str(value)``; then ``FlexibleArgumentParser.parse_args`` turns the underscores
of each flag name (up to its first '.') into dashes. vLLM itself is not installed in the
test environment."""

from __future__ import annotations

import re
import shlex

import pytest

from tests.cli_runner import invoke
from tests.unit.test_exporters import SERVING_NAMES, serving_response
from vramopt.exporters import vllm_args


def vllm_load_config_file(file_path: str, text: str) -> list[str]:
    """vLLM's ``load_config_file`` on ``text`` read from ``file_path`` (see the module docstring)."""
    yaml = pytest.importorskip("yaml")
    extension = file_path.split(".")[-1]
    if extension not in ("yaml", "yml"):
        raise ValueError(f"Config file must be of a yaml/yml type. {extension} supplied")
    processed: list[str] = []
    for key, value in yaml.safe_load(text).items():
        if isinstance(value, bool):
            if value:
                processed.append("--" + key)
        elif isinstance(value, list):
            if value:
                processed.append("--" + key)
                processed.extend(str(item) for item in value)
        else:
            processed += ["--" + key, str(value)]
    # parse_args: "Convert underscores to dashes ... in argument names" (the flags, not the values).
    name = re.compile(r"(?<=--)[^\.]*")
    return [name.sub(lambda match: match.group(0).replace("_", "-"), arg, count=1) if arg.startswith("--") else arg
            for arg in processed]


@pytest.mark.parametrize("name", SERVING_NAMES)
def test_the_yaml_gives_vllm_the_flags_of_the_command_line(name):
    """Issue 15 item 2: every exported YAML is one flat mapping of atomic values, and vLLM's
    reader turns it into exactly the flags of ``cli_text()`` (the model as ``--model``)."""
    yaml = pytest.importorskip("yaml")
    result = vllm_args(serving_response(name))
    text = result.file_text("vllm.yaml")
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict) and all(isinstance(value, (bool, int, float, str)) for value in loaded.values())
    tokens = shlex.split(result.cli_text())
    assert vllm_load_config_file("vllm.yaml", text) == ["--model", tokens[2], *tokens[3:]]


def test_a_json_path_keeps_the_engine_args_json_and_vllm_refuses_it():
    """Issue 15 item 2: the .json export stays the EngineArgs keywords; vLLM's --config refuses it."""
    result = vllm_args(serving_response("solved"))
    assert result.file_text("vllm.json") == result.text()
    with pytest.raises(ValueError, match="yaml/yml"):
        vllm_load_config_file("vllm.json", result.file_text("vllm.json"))


def test_numbers_and_switched_off_booleans_survive_the_yaml():
    """Issue 15 item 2: a float written without a decimal exponent (PyYAML reads '1e-05' as a
    string), a false boolean as its ``no_`` flag (vLLM drops ``key: false``), and strings that
    YAML would read as something else quoted."""
    yaml = pytest.importorskip("yaml")
    result = vllm_args(serving_response("solved"))
    content = dict(result.content, gpu_memory_utilization=1e-05, enable_chunked_prefill=False, model="on", dtype="2.5")
    loaded = yaml.safe_load(type(result)(content=content, notes=()).yaml_text())
    assert loaded["gpu_memory_utilization"] == 1e-05
    assert loaded["model"] == "on" and loaded["dtype"] == "2.5"  # YAML would read them plain as a boolean and a number
    assert loaded["no_enable_chunked_prefill"] is True and "enable_chunked_prefill" not in loaded


def test_the_cli_writes_yaml_for_a_yaml_path(tmp_path):
    """Issue 15 item 2: ``solve --export vllm FILE.yaml`` writes the YAML."""
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "vllm.yaml"
    outcome = invoke(["solve", "--workload", "infer", "--model", "8b", "--gpu", "h100", "--max-gpus", "1", "--export", "vllm", str(path)])
    assert outcome.exit_code == 0, outcome.output
    loaded = yaml.safe_load(path.read_text())
    assert loaded["model"] == "llama-3.1-8b" and loaded["tensor_parallel_size"] == 1
