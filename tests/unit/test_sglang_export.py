"""The SGLang export (issue 15 item 2: "SGLang's server arguments as a second serving export").

Checked against SGLang 0.5.23's own argument parser: always against its record
(tests/fixtures/exporters/sglang_server_args.json, written from ``ServerArgs.add_cli_args``
by benchmarks/sglang_arguments_fixture.py), and against the parser itself where
``sglang.srt.server_args`` imports (it needs the sglang package; CI does not install its
GPU stack, so that test skips there).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from vramopt.errors import InputError
from vramopt.exporters import export
from vramopt.exporters.sglang import TRANSLATIONS, sglang_args
from vramopt.exporters.vllm import ARGUMENT_ORDER, vllm_args

from tests.unit.test_exporters import SERVING_NAMES, serving_response, training_response

FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "exporters" / "sglang_server_args.json").read_text())
BY_KEY = {}
for _argument in FIXTURE["arguments"]:
    for _option in _argument["options"]:
        if _option.startswith("--"):
            BY_KEY[_option[2:].replace("-", "_")] = _argument
CONVERTERS = {"int": int, "float": float, "str": str, "human_readable_int": int, None: str}


def read_yaml(text: str) -> dict:
    """The flat mapping the export writes ('key: JSON scalar' lines), read as SGLang's config
    merger reads it (yaml.safe_load of one mapping); compared with PyYAML where installed."""
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    mapping = {key: json.loads(value) for key, value in (line.split(": ", 1) for line in lines)}
    try:
        import yaml
    except ImportError:
        return mapping
    assert yaml.safe_load(text) == mapping
    return mapping


@pytest.mark.parametrize("name", SERVING_NAMES)
def test_every_argument_is_sglangs_with_a_value_its_parser_takes(name):
    result = sglang_args(serving_response(name))
    assert FIXTURE["release"] == "0.5.23"
    for key, value in result.content.items():
        argument = BY_KEY.get(key)
        assert argument is not None, f"{key} is not an SGLang 0.5.23 server argument"
        if argument["kind"] == "store_true":
            assert value is True, key  # a false store_true flag is left out, as the merger requires
            continue
        assert argument["kind"] == "store", (key, argument["kind"])
        text = str(value)
        CONVERTERS[argument["type"]](text)
        if argument["choices"] is not None:
            assert text in argument["choices"], (key, text)


@pytest.mark.parametrize("name", SERVING_NAMES)
def test_the_yaml_and_the_command_line_carry_the_same_arguments(name):
    result = sglang_args(serving_response(name))
    assert read_yaml(result.file_text("sglang.yaml")) == result.content
    assert json.loads(result.file_text("sglang.json")) == result.content
    tokens = result.cli_text().split()
    assert tokens[:3] == ["python", "-m", "sglang.launch_server"]
    assert "--model-path" in tokens and "--tp-size" in tokens


def test_the_real_parser_accepts_the_command_line():
    server_args = pytest.importorskip("sglang.srt.server_args", reason="sglang is not installed (its GPU stack is not a CI extra)")
    parser = argparse.ArgumentParser(allow_abbrev=False)
    server_args.ServerArgs.add_cli_args(parser)
    for name in SERVING_NAMES:
        result = sglang_args(serving_response(name))
        parsed = parser.parse_args(result.cli_text().split()[3:])
        assert parsed.tp_size == result.content["tp_size"]
        assert parsed.context_length == result.content["context_length"]


def test_every_vllm_argument_the_techniques_write_has_an_sglang_translation():
    assert set(ARGUMENT_ORDER) <= set(TRANSLATIONS)
    for name in SERVING_NAMES:
        assert set(vllm_args(serving_response(name)).content) <= set(TRANSLATIONS), name


def test_the_static_share_leaves_the_plans_activations_and_graphs_outside_it():
    """SGLang's mem_fraction_static covers the weights and the KV pool only (srt/arg_groups/
    fields/schedule.py), vLLM's gpu_memory_utilization the whole engine: the export takes
    the plan's own activation peak and CUDA graphs off the vLLM share."""
    response = serving_response("bf16-tp8")
    memory = response["memory"]
    utilization = vllm_args(response).content["gpu_memory_utilization"]
    expected = utilization - (memory["activations_bytes"] + memory["cuda_graphs_bytes"]) / memory["capacity_bytes"]
    assert sglang_args(response).content["mem_fraction_static"] == pytest.approx(expected, abs=1e-4)
    assert 0.0 < expected < utilization


def test_engine_names_that_differ_are_translated():
    speculative = sglang_args(serving_response("fp4-fp8kv-speculative")).content
    assert speculative["kv_cache_dtype"] == "fp8_e4m3"  # vLLM's fp8 KV cache is e4m3
    assert speculative["quantization"] == "modelopt_fp4"
    assert speculative["speculative_algorithm"] == "STANDALONE"
    assert speculative["speculative_num_draft_tokens"] == speculative["speculative_num_steps"] + 1
    assert speculative["speculative_eagle_topk"] == 1
    replicas = sglang_args(serving_response("int4-tp2-replicas"))
    assert replicas.content["dp_size"] == 4 and replicas.content["tp_size"] == 2
    assert replicas.content["quantization"] == "awq"
    assert replicas.content["page_size"] == vllm_args(serving_response("int4-tp2-replicas")).content["block_size"]


def test_a_shared_prefix_keeps_sglangs_radix_cache_on():
    from vramopt.estimate import estimate_serving
    from vramopt.types import ServingPlan, ServingWorkload

    workload = ServingWorkload(model="8b", input_tokens=1000, output_tokens=200, rate_per_s=2.0, shared_prefix_tokens=512)
    response = estimate_serving(workload, ServingPlan(gpu="h100", gpus=1, slots=32)).to_dict()
    assert vllm_args(response).content.get("enable_prefix_caching") is True
    result = sglang_args(response)
    assert "disable_radix_cache" not in result.content
    assert any("radix cache" in note for note in result.notes)


def test_what_sglang_cannot_say_is_a_note():
    contiguous = sglang_args(serving_response("contiguous"))
    assert any("paged_kv false" in note for note in contiguous.notes)
    mig = sglang_args(serving_response("mig"))
    assert any("MIG 3g.40gb" in note for note in mig.notes)
    assert any("catalog name" in note for note in mig.notes)


def test_a_training_response_is_refused_under_the_exporters_own_name():
    with pytest.raises(InputError, match="sglang_args takes a response of workload infer"):
        sglang_args(training_response("zero0-bf16"))
    assert export("sglang", serving_response("bf16-tp8")).content["tp_size"] == 8
