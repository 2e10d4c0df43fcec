"""Issue 15 build item 2 / must-show (vLLM exports load in EngineArgs): vLLM does not install
on CPU here, so the serving export of a quantized checkpoint is checked against checked-in
copies of vLLM's argument names and choices: ``vllm_documented_args.json`` (EngineArgs fields,
vllm/engine/arg_utils.py at commit 99d7eb5d) for every key and value, and
``vllm_quantization_methods.json`` (QuantizationMethods at commit 05d90956, the first stored
copy with ``mxfp4``) for the ``quantization`` value a checkpoint's quantization_config gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runner import invoke
from vramopt.models import load_config_json
from vramopt.models.checkpoint_quantization import SUPPORTED_METHODS

ROOT = Path(__file__).resolve().parents[1] / "fixtures"
ENGINE_ARGS = json.loads((ROOT / "exporters" / "vllm_documented_args.json").read_text())["args"]
METHODS = json.loads((ROOT / "exporters" / "vllm_quantization_methods.json").read_text())
LLAMA = json.loads((ROOT / "hf_configs" / "llama-3.1-8b" / "config.json").read_text())

REPRESENTATIVE = {
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 128},
    "gptq": {"quant_method": "gptq", "bits": 8, "group_size": 128},
    "fp8": {"quant_method": "fp8", "weight_block_size": [128, 128]},
    "fbgemm_fp8": {"quant_method": "fbgemm_fp8"},
    "mxfp4": {"quant_method": "mxfp4"},
    "modelopt": {"quant_method": "modelopt", "quant_algo": "FP8"},
    "bitsandbytes": {"quant_method": "bitsandbytes", "load_in_8bit": True},
    "compressed-tensors": {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {
        "num_bits": 8, "type": "float", "group_size": None}}}},
}


def test_every_supported_method_is_represented():
    assert set(REPRESENTATIVE) == set(SUPPORTED_METHODS)


@pytest.mark.parametrize("method", sorted(REPRESENTATIVE))
def test_each_checkpoint_method_is_a_vllm_quantization_choice(tmp_path, method):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "quantization_config": REPRESENTATIVE[method]}))
    vllm = load_config_json(path).checkpoint_quantization.vllm_quantization
    assert vllm in METHODS["methods"]
    # fbgemm_fp8 checkpoints still load, but vLLM lists the method as deprecated.
    assert vllm not in METHODS["deprecated"] or method == "fbgemm_fp8"


def read_config(text: str) -> dict:
    """The exported `vllm serve --config` file: JSON (which is YAML) today, YAML proper later."""
    try:
        return json.loads(text)
    except ValueError:
        return pytest.importorskip("yaml").safe_load(text)


@pytest.mark.parametrize("folder, gpu", [("gpt-oss-20b", "b200"), ("qwen2.5-7b-instruct-awq", "h100"),
                                         ("llama-2-7b-gptq", "h100")])
def test_the_export_of_a_quantized_checkpoint_uses_only_engine_args(tmp_path, folder, gpu):
    export = tmp_path / "vllm.yaml"
    result = invoke(["solve", "--workload", "infer", "--model", str(ROOT / "hf_configs" / folder), "--gpu", gpu,
                     "--max-gpus", "8", "--context", "4096", "--format", "json", "--export", "vllm", str(export)])
    assert result.exit_code == 0, result.stderr
    args = read_config(export.read_text())
    stored = json.loads(result.stdout)["model"]["checkpoint_quantization"]
    assert args["quantization"] == stored["vllm_quantization"] in METHODS["methods"]
    for key, value in args.items():
        assert key in ENGINE_ARGS, key
        if key != "quantization" and "enum" in ENGINE_ARGS[key]:
            assert value in ENGINE_ARGS[key]["enum"], (key, value)
