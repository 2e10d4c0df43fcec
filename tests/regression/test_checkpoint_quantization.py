"""Issue 15 build item 3 (read ``quantization_config``) and item 2 (vLLM: an AWQ checkpoint
must not be exported as fp8): a quantized checkpoint is reported as such, served in its own
format, and exported with its own method."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runner import invoke
from vramopt.errors import CatalogError
from vramopt.models import load_config_json

FIXTURES = Path(__file__).parent.parent / "fixtures" / "hf_configs"
LLAMA = json.loads((FIXTURES / "llama-3.1-8b" / "config.json").read_text())


@pytest.mark.parametrize(
    "folder, method, bits, weight_format, group, vllm",
    [
        ("qwen2.5-7b-instruct-awq", "awq", 4, "int4", 128, "awq"),
        ("llama-2-7b-gptq", "gptq", 4, "int4", 128, "gptq"),
        ("gpt-oss-20b", "mxfp4", 4, "fp4", 32, "mxfp4"),
    ],
)
def test_published_quantized_checkpoints_are_read(folder, method, bits, weight_format, group, vllm):
    quantization = load_config_json(FIXTURES / folder / "config.json").checkpoint_quantization
    assert (quantization.method, quantization.weight_bits, quantization.weight_format) == (method, bits, weight_format)
    assert (quantization.group_size, quantization.vllm_quantization) == (group, vllm)


def write(tmp_path: Path, quantization: dict) -> Path:
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({**LLAMA, "quantization_config": quantization}))
    return path


@pytest.mark.parametrize(
    "quantization, expected",
    [
        # DeepSeek-V3's own config.json: block-wise FP8 (128 x 128 weights per scale).
        ({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]},
         ("fp8", 8, "fp8", 16384, "fp8")),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
         ("bitsandbytes", 4, "int4", 64, "bitsandbytes")),
        ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 4, "type": "int", "group_size": 128, "strategy": "group"}}}},
         ("compressed-tensors", 4, "int4", 128, "compressed-tensors")),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, ("modelopt", 4, "fp4", 16, "modelopt_fp4")),
    ],
)
def test_other_methods_are_read(tmp_path, quantization, expected):
    stored = load_config_json(write(tmp_path, quantization)).checkpoint_quantization
    assert (stored.method, stored.weight_bits, stored.weight_format, stored.group_size, stored.vllm_quantization) == expected


@pytest.mark.parametrize(
    "quantization, phrase",
    [
        ({"quant_method": "aqlm"}, "quant_method 'aqlm' is not supported"),
        ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "3-bit weights is not supported"),
        ({"quant_method": "gptq"}, "'bits' must be an integer"),
        ({"bits": 4}, "no 'quant_method'"),
        ("awq", "must be a JSON object"),
    ],
)
def test_unknown_or_malformed_quantization_is_refused_in_one_line(tmp_path, quantization, phrase):
    with pytest.raises(CatalogError) as caught:
        load_config_json(write(tmp_path, quantization))
    message = str(caught.value)
    assert "quantization_config" in message and phrase in message and "\n" not in message


@pytest.mark.parametrize("folder, method", [("qwen2.5-7b-instruct-awq", "awq"), ("llama-2-7b-gptq", "gptq")])
def test_serving_a_quantized_checkpoint_keeps_its_format_and_exports_its_method(tmp_path, folder, method):
    export = tmp_path / "vllm.yaml"
    result = invoke(["solve", "--workload", "infer", "--model", str(FIXTURES / folder), "--gpu", "h100",
                     "--max-gpus", "8", "--context", "4096", "--format", "json", "--export", "vllm", str(export)])
    assert result.exit_code == 0, result.stderr
    response = json.loads(result.stdout)
    assert response["plan"]["quantization"] == "int4"
    assert response["model"]["checkpoint_quantization"]["method"] == method
    assert f"quantization: {method}" in export.read_text() or f'"quantization": "{method}"' in export.read_text()
    assert "fp8" not in [line.split(":")[-1].strip().strip('",') for line in export.read_text().splitlines()
                         if "quantization" in line]


def test_pinning_another_format_than_the_checkpoints_is_refused():
    result = invoke(["solve", "--workload", "infer", "--model", str(FIXTURES / "qwen2.5-7b-instruct-awq"),
                     "--gpu", "h100", "--max-gpus", "8", "--context", "4096", "--pin", "quantization=fp8"])
    assert result.exit_code == 2
    message = result.stderr.strip()
    assert message.startswith("error: ") and "\n" not in message
    assert "awq 4-bit weights" in message and "quantization=int4" in message


def test_estimate_serves_a_quantized_checkpoint_in_its_format_and_refuses_another():
    args = ["estimate", "--workload", "infer", "--model", str(FIXTURES / "llama-2-7b-gptq"), "--gpu", "h100",
            "--gpus", "1", "--context", "4096", "--format", "json"]
    result = invoke(args)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["plan"]["quantization"] == "int4"
    refused = invoke([*args, "--quantization", "fp8"])
    assert refused.exit_code == 2
    assert "gptq 4-bit weights" in refused.stderr and "\n" not in refused.stderr.strip()


def test_a_checkpoint_format_no_searched_gpu_runs_is_refused_naming_what_is_missing():
    args = ["solve", "--workload", "infer", "--model", str(FIXTURES / "gpt-oss-20b"), "--max-gpus", "8", "--context", "4096"]
    refused = invoke([*args, "--gpu", "h100"])
    assert refused.exit_code == 2
    message = refused.stderr.strip()
    assert "mxfp4 4-bit weights" in message and "fp4 tensor cores" in message and "\n" not in message
    solved = invoke([*args, "--gpu", "b200", "--format", "json"])
    assert solved.exit_code == 0, solved.stderr
    assert json.loads(solved.stdout)["plan"]["quantization"] == "fp4"
