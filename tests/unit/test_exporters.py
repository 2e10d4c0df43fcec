"""Framework export (issue 5 part 4): DeepSpeed configs and vLLM arguments from real plans.

The keys and allowed values come from the frameworks' documentation, recorded with their
sources in tests/fixtures/exporters/ (neither framework is installed): every exported key
must be documented there, every enumerated value allowed, and every plan choice the
framework cannot express must appear in the notes.
"""

from __future__ import annotations

import json
import math
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from vramopt.errors import InputError
from vramopt.estimate import estimate_serving, estimate_training
from vramopt.exporters import EXPORTERS, ExportResult, VllmExport, deepspeed_config, export, vllm_args
from vramopt.exporters.deepspeed import SETTINGS
from vramopt.optimizer.search import solve
from vramopt.types import SearchSpace, ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "exporters"
DEEPSPEED_KEYS = json.loads((FIXTURES / "deepspeed_documented_keys.json").read_text())
VLLM_ARGS = json.loads((FIXTURES / "vllm_documented_args.json").read_text())

JSON_TYPES = {
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "number": lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    "boolean": lambda value: isinstance(value, bool),
    "string": lambda value: isinstance(value, str),
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
}


def undocumented(content: dict[str, Any], documented: dict[str, Any], path: str = "") -> list[str]:
    """Every key of ``content`` (recursively) missing from ``documented``, of the wrong type,
    or with a value outside its documented enumeration."""
    problems = []
    for key, value in content.items():
        where = f"{path}{key}"
        spec = documented.get(key)
        if spec is None:
            problems.append(f"{where}: not a documented key")
            continue
        if not JSON_TYPES[spec["type"]](value):
            problems.append(f"{where}: {value!r} is not of type {spec['type']}")
        if "enum" in spec and value not in spec["enum"]:
            problems.append(f"{where}: {value!r} is not one of {spec['enum']}")
        if "minimum_exclusive" in spec and not value > spec["minimum_exclusive"]:
            problems.append(f"{where}: {value!r} <= {spec['minimum_exclusive']}")
        if "maximum" in spec and not value <= spec["maximum"]:
            problems.append(f"{where}: {value!r} > {spec['maximum']}")
        if isinstance(value, dict) and "keys" in spec:
            problems += undocumented(value, spec["keys"], where + ".")
    return problems


# ---------------------------------------------------------------------------------------
# Real plans


TRAINING_CASES = {
    "zero0-bf16": (TrainingWorkload(model="8b", seq_len=2048, global_batch=64), TrainingPlan(gpu="b200", gpus=8)),
    "zero1-cpu-fp16-selective": (
        TrainingWorkload(model="8b", seq_len=2048, global_batch=64),
        TrainingPlan(gpu="h100", gpus=8, zero_stage=1, offload="cpu", precision="fp16", grad_comm_precision="fp16", checkpointing="selective", micro_batch=2),
    ),
    "zero2-tp2-sp-every2-fp32-wire": (
        TrainingWorkload(model="8b", seq_len=4096, global_batch=64),
        TrainingPlan(gpu="h100", gpus=8, tensor_parallel=2, sequence_parallel=True, zero_stage=2, checkpointing="every:2", grad_comm_precision="fp32"),
    ),
    "zero3-nvme-every4": (
        TrainingWorkload(model="70b", seq_len=8192, global_batch=32),
        TrainingPlan(gpu="b200", gpus=4, zero_stage=3, offload="nvme", checkpointing="every:4"),
    ),
    "zero3-cpu-full-no-flash": (
        TrainingWorkload(model="8b", kind="finetune", seq_len=2048, global_batch=16),
        TrainingPlan(gpu="h100", gpus=2, zero_stage=3, offload="cpu", checkpointing="full", flash_attention=False),
    ),
    "fp8-pp2-interleaved-zero1": (
        TrainingWorkload(model="70b", seq_len=4096, global_batch=64),
        TrainingPlan(gpu="b200", gpus=8, pipeline_parallel=2, virtual_stages=2, zero_stage=1, offload="cpu", precision="fp8", grad_comm_precision="fp8", checkpointing="every:1"),
    ),
    "pp2-zero1": (
        TrainingWorkload(model="70b", seq_len=4096, global_batch=64),
        TrainingPlan(gpu="b200", gpus=8, pipeline_parallel=2, zero_stage=1, offload="cpu", checkpointing="every:1"),
    ),
    "fp32": (TrainingWorkload(model="8b", seq_len=1024, global_batch=16), TrainingPlan(gpu="h100", gpus=8, zero_stage=3, precision="fp32", grad_comm_precision="fp32", checkpointing="every:1")),
    "lora": (TrainingWorkload(model="8b", kind="lora", seq_len=2048, global_batch=16), TrainingPlan(gpu="h100", gpus=1, checkpointing="every:1")),
}

SERVING_CASES = {
    "bf16-tp8": (ServingWorkload(model="70b", context=8192), ServingPlan(gpu="h100", gpus=8, tensor_parallel=8, slots=32)),
    "int4-tp2-replicas": (ServingWorkload(model="70b", context=8192), ServingPlan(gpu="h100", gpus=8, tensor_parallel=2, quantization="int4", slots=16)),
    "int8-pp2": (ServingWorkload(model="70b", context=4096), ServingPlan(gpu="h100", gpus=4, tensor_parallel=2, pipeline_parallel=2, quantization="int8", slots=8)),
    "fp4-fp8kv-speculative": (ServingWorkload(model="70b", context=8192), ServingPlan(gpu="b200", gpus=1, quantization="fp4", kv_cache_dtype="fp8", speculative_decoding=True, slots=64)),
    "mig": (ServingWorkload(model="8b", context=4096, headroom_fraction=0.15), ServingPlan(gpu="h100", gpus=2, quantization="fp8", mig_profile="3g.40gb", slots=8)),
    "contiguous": (ServingWorkload(model="8b", context=4096), ServingPlan(gpu="h100", gpus=1, paged_kv=False, slots=4)),
    # Expert-parallel serving (issue 14 item 2): two replicas of ep 16 = tp 4 x 4 attention groups.
    "ep16-dp-attention": (ServingWorkload(model="deepseek-v3", context=8192),
                          ServingPlan(gpu="h200", gpus=32, tensor_parallel=4, expert_parallel=16, quantization="fp8", slots=256)),
}


@lru_cache(maxsize=None)
def solved_training() -> dict[str, Any]:
    # Under DeepSpeed's rules (issue 15): the generic optimum, pp2 + ZeRO-2, is one DeepSpeed refuses.
    return solve(TrainingWorkload(model="70b"), SearchSpace(gpus=("b200",), max_gpus=8, framework="deepspeed")).to_dict()


@lru_cache(maxsize=None)
def solved_serving() -> dict[str, Any]:
    return solve(ServingWorkload(model="70b"), SearchSpace(gpus=("b200",), max_gpus=8)).to_dict()


def training_response(name: str) -> dict[str, Any]:
    if name == "solved":
        return solved_training()
    workload, plan = TRAINING_CASES[name]
    return estimate_training(workload, plan).to_dict()


def serving_response(name: str) -> dict[str, Any]:
    if name == "solved":
        return solved_serving()
    workload, plan = SERVING_CASES[name]
    return estimate_serving(workload, plan).to_dict()


TRAINING_NAMES = sorted(TRAINING_CASES) + ["solved"]
SERVING_NAMES = sorted(SERVING_CASES) + ["solved"]


def notes_of(result: ExportResult) -> str:
    return "\n".join(result.notes)


# ---------------------------------------------------------------------------------------
# DeepSpeed


@pytest.mark.parametrize("name", TRAINING_NAMES)
def test_deepspeed_keys_and_values_are_documented(name):
    result = deepspeed_config(training_response(name))
    assert undocumented(result.content, DEEPSPEED_KEYS["keys"]) == []
    assert json.loads(result.text()) == result.content


@pytest.mark.parametrize("name", TRAINING_NAMES)
def test_deepspeed_batch_satisfies_deepspeeds_rule(name):
    response = training_response(name)
    plan, content = response["plan"], deepspeed_config(response).content
    assert content["train_batch_size"] == plan["global_batch"]
    assert content["train_micro_batch_size_per_gpu"] == plan["micro_batch"]
    assert content["gradient_accumulation_steps"] == plan["grad_accumulation"]
    assert content["train_batch_size"] == (
        content["train_micro_batch_size_per_gpu"] * content["gradient_accumulation_steps"] * plan["data_parallel"]
    )


@pytest.mark.parametrize("name", TRAINING_NAMES)
def test_deepspeed_expresses_zero_offload_and_precision(name):
    response = training_response(name)
    plan, content = response["plan"], deepspeed_config(response).content
    zero = content["zero_optimization"]
    assert zero["stage"] == plan["zero_stage"]
    devices = {"none": (None, None), "cpu": ("cpu", None), "nvme": ("nvme", "nvme")}[plan["offload"]]
    assert (zero.get("offload_optimizer", {}).get("device"), zero.get("offload_param", {}).get("device")) == devices
    bf16 = content.get("bf16", {}).get("enabled", False)
    fp16 = content.get("fp16", {}).get("enabled", False)
    assert (bf16, fp16) == {"bf16": (True, False), "fp16": (False, True), "fp32": (False, False), "fp8": (True, False), "fp4": (True, False)}[plan["precision"]]


def test_deepspeed_nvme_offload_has_a_placeholder_path_and_says_so():
    result = deepspeed_config(training_response("zero3-nvme-every4"))
    zero = result.content["zero_optimization"]
    assert zero["offload_optimizer"]["nvme_path"] == zero["offload_param"]["nvme_path"] == "/local_nvme"
    assert "aio" in result.content
    assert "nvme_path" in notes_of(result) and "/local_nvme" in notes_of(result)


def test_deepspeed_every_k_sets_the_checkpoint_count_and_says_the_model_must_call_the_api():
    response = training_response("zero3-nvme-every4")
    result = deepspeed_config(response)
    section = result.content["activation_checkpointing"]
    assert section["number_checkpoints"] == math.ceil(response["model"]["layers"] / 4)  # 80 layers, one stage: 20
    assert section["partition_activations"] is False
    assert "deepspeed.checkpointing.checkpoint" in notes_of(result)
    # With pipeline stages each GPU holds its stage's checkpoints: 80 layers / 2 stages / every:1.
    assert deepspeed_config(training_response("pp2-zero1")).content["activation_checkpointing"]["number_checkpoints"] == 40
    # Sequence parallelism shards the checkpointed inputs over the tensor-parallel group.
    assert deepspeed_config(training_response("zero2-tp2-sp-every2-fp32-wire")).content["activation_checkpointing"]["partition_activations"] is True


def test_deepspeed_selective_and_none_have_no_checkpointing_section():
    selective = deepspeed_config(training_response("zero1-cpu-fp16-selective"))
    assert "activation_checkpointing" not in selective.content
    assert "selective" in notes_of(selective) and "Megatron" in notes_of(selective)
    assert "activation_checkpointing" not in deepspeed_config(training_response("zero0-bf16")).content


def test_deepspeed_notes_name_every_choice_the_config_cannot_express():
    fp8_pipeline = notes_of(deepspeed_config(training_response("fp8-pp2-interleaved-zero1")))
    assert "precision fp8" in fp8_pipeline and "Transformer Engine" in fp8_pipeline
    assert "grad_comm_precision fp8" in fp8_pipeline
    assert "pipeline parallel 2" in fp8_pipeline and "PipelineModule" in fp8_pipeline and "num_stages=2" in fp8_pipeline
    assert "interleaved pipeline (2 virtual stages" in fp8_pipeline
    assert "incompatible with pipeline parallelism" not in fp8_pipeline  # ZeRO-1 works with DeepSpeed's pipeline

    # ZeRO-2 with a pipeline is refused, never exported (issue 15: DeepSpeed's PipelineEngine asserts on it).
    pp2_zero2 = estimate_training(TrainingWorkload(model="70b", seq_len=4096, global_batch=64),
                                  TrainingPlan(gpu="b200", gpus=8, pipeline_parallel=2, zero_stage=2, offload="cpu", checkpointing="every:1"))
    with pytest.raises(InputError, match="incompatible with pipeline parallelism"):
        deepspeed_config(pp2_zero2.to_dict())

    tensor = deepspeed_config(training_response("zero2-tp2-sp-every2-fp32-wire"))
    assert "tensor parallel 2" in notes_of(tensor) and "autotp_size" in notes_of(tensor)
    assert "sequence parallel" in notes_of(tensor)
    assert tensor.content["communication_data_type"] == "fp32"  # expressible: no note about the wire
    assert "grad_comm_precision" not in notes_of(tensor)

    plain = deepspeed_config(training_response("zero0-bf16"))
    assert "communication_data_type" not in plain.content
    assert not any(word in notes_of(plain) for word in ("tensor parallel", "pipeline parallel", "sequence parallel"))
    assert "FlashAttention" in notes_of(plain)
    assert "no FlashAttention" in notes_of(deepspeed_config(training_response("zero3-cpu-full-no-flash")))
    assert "lora" in notes_of(deepspeed_config(training_response("lora"))) and "PEFT" in notes_of(deepspeed_config(training_response("lora")))


def test_deepspeed_solved_plan_notes_its_fp8_and_pipeline():
    response = solved_training()
    notes = notes_of(deepspeed_config(response))
    plan = response["plan"]
    if plan["precision"] == "fp8":
        assert "precision fp8" in notes
    if plan["pipeline_parallel"] > 1:
        assert f"pipeline parallel {plan['pipeline_parallel']}" in notes
    assert not (plan["pipeline_parallel"] > 1 and plan["zero_stage"] >= 2)  # DeepSpeed's PipelineEngine refuses it


def test_the_test_plans_are_feasible_so_no_fit_note_appears():
    for name in TRAINING_NAMES:
        assert "does not fit" not in notes_of(deepspeed_config(training_response(name))), name
    for name in SERVING_NAMES:
        assert "does not fit" not in notes_of(vllm_args(serving_response(name))), name


def test_deepspeed_notes_a_plan_that_does_not_fit():
    response = estimate_training(TrainingWorkload(model="70b", seq_len=4096, global_batch=8), TrainingPlan(gpu="h100", gpus=1)).to_dict()
    assert response["memory"]["fits"] is False
    assert "does not fit" in notes_of(deepspeed_config(response))


def test_every_deepspeed_setting_has_a_source():
    assert all(isinstance(source, str) and len(source) > 10 for _, source in SETTINGS.values())


# ---------------------------------------------------------------------------------------
# vLLM


@pytest.mark.parametrize("name", SERVING_NAMES)
def test_vllm_args_are_documented_and_follow_the_plan(name):
    response = serving_response(name)
    plan, memory = response["plan"], response["memory"]
    result = vllm_args(response)
    args = result.content
    assert undocumented(args, VLLM_ARGS["args"]) == []
    assert args["gpu_memory_utilization"] == 1.0 - memory["required_headroom_fraction"]
    groups = plan["expert_parallel"] // plan["tensor_parallel"] if plan["expert_parallel"] > 1 else 1
    assert args["max_num_seqs"] == -(-plan["slots"] // groups)  # per data-parallel engine
    assert args["max_model_len"] == plan["context"]
    assert args["tensor_parallel_size"] == plan["tensor_parallel"]
    assert args["pipeline_parallel_size"] == plan["pipeline_parallel"]
    assert args["kv_cache_dtype"] == {"bf16": "auto", "fp8": "fp8"}[plan["kv_cache_dtype"]]
    assert ("speculative_config" in args) == plan["speculative_decoding"]
    several_engines = plan["replicas"] > 1 and plan["mig_profile"] == "none"
    if plan["expert_parallel"] > 1:  # one launch per replica; its data-parallel engines are the attention groups
        groups = plan["expert_parallel"] // plan["tensor_parallel"]
        assert args["enable_expert_parallel"] is True
        assert args.get("data_parallel_size") == (groups if groups > 1 else None)
    else:
        assert "enable_expert_parallel" not in args
        assert args.get("data_parallel_size") == (plan["replicas"] if several_engines else None)
    assert json.loads(result.text()) == args


@pytest.mark.parametrize("name", SERVING_NAMES)
def test_vllm_cli_text_round_trips_the_args(name):
    result = vllm_args(serving_response(name))
    tokens = shlex.split(result.cli_text())
    assert tokens[:3] == ["vllm", "serve", result.content["model"]]
    parsed: dict[str, Any] = {"model": tokens[2]}
    rest = tokens[3:]
    while rest:
        flag = rest.pop(0)
        assert flag.startswith("--")
        name = flag[2:].replace("-", "_")
        if name.startswith("no_") and name[3:] in VLLM_ARGS["args"]:
            parsed[name[3:]] = False
            continue
        spec = VLLM_ARGS["args"][name]
        if spec["type"] == "boolean":
            parsed[name] = True
            continue
        text = rest.pop(0)
        parsed[name] = {"integer": int, "number": float, "string": str, "object": json.loads}[spec["type"]](text)
    assert parsed == result.content


def test_vllm_quantization_methods_and_their_notes():
    expected = {
        "bf16-tp8": (None, None),
        "int4-tp2-replicas": ("awq", "AWQ"),
        "int8-pp2": ("gptq", "GPTQ"),
        "fp4-fp8kv-speculative": ("modelopt_fp4", "NVFP4"),
        "mig": ("fp8", "FP8"),
    }
    for name, (method, word) in expected.items():
        result = vllm_args(serving_response(name))
        assert result.content.get("quantization") == method, name
        if word is not None:
            assert word in notes_of(result), name


def test_vllm_replicas_mig_speculative_and_contiguous_are_noted():
    replicas = vllm_args(serving_response("int4-tp2-replicas"))
    assert replicas.content["data_parallel_size"] == 4
    assert "replicas 4" in notes_of(replicas)

    mig_response = serving_response("mig")
    mig = vllm_args(mig_response)
    assert "data_parallel_size" not in mig.content
    assert mig.content["gpu_memory_utilization"] == pytest.approx(0.85)
    assert "CUDA_VISIBLE_DEVICES=MIG-" in notes_of(mig) and f"{mig_response['plan']['replicas']} instances" in notes_of(mig)

    speculative = vllm_args(serving_response("fp4-fp8kv-speculative"))
    assert speculative.content["speculative_config"]["num_speculative_tokens"] == 4
    assert "draft" in notes_of(speculative)

    contiguous = vllm_args(serving_response("contiguous"))
    assert "block_size" not in contiguous.content and "paged_kv false" in notes_of(contiguous)
    assert vllm_args(serving_response("bf16-tp8")).content["block_size"] == 16
    assert "catalog name" in notes_of(contiguous)


# ---------------------------------------------------------------------------------------
# Errors


def test_wrong_workload_is_an_input_error():
    with pytest.raises(InputError, match="use vllm_args"):
        deepspeed_config(serving_response("bf16-tp8"))
    with pytest.raises(InputError, match="use deepspeed_config"):
        vllm_args(training_response("zero0-bf16"))


def test_missing_keys_are_named():
    response = training_response("zero0-bf16")
    broken = {**response, "plan": {key: value for key, value in response["plan"].items() if key != "zero_stage"}}
    with pytest.raises(InputError, match="plan.zero_stage"):
        deepspeed_config(broken)
    with pytest.raises(InputError, match="'workload'"):
        deepspeed_config({key: value for key, value in response.items() if key != "workload"})
    serving = serving_response("bf16-tp8")
    with pytest.raises(InputError, match="memory.required_headroom_fraction"):
        vllm_args({**serving, "memory": {}})
    with pytest.raises(InputError, match="plan.slots"):
        vllm_args({**serving, "plan": {key: value for key, value in serving["plan"].items() if key != "slots"}})


def test_inconsistent_or_empty_responses_are_refused():
    response = training_response("zero0-bf16")
    with pytest.raises(InputError, match="train_batch_size"):
        deepspeed_config({**response, "plan": {**response["plan"], "global_batch": response["plan"]["global_batch"] + 1}})
    with pytest.raises(InputError, match="no plan"):
        deepspeed_config({**response, "plan": None})
    with pytest.raises(InputError, match="zero_stage"):
        deepspeed_config({**response, "plan": {**response["plan"], "zero_stage": 4}})


def test_export_dispatches_by_target():
    assert set(EXPORTERS) == {"deepspeed", "megatron", "torchtitan", "vllm", "sglang"}
    assert isinstance(export("vllm", serving_response("bf16-tp8")), VllmExport)
    assert export("deepspeed", training_response("zero0-bf16")).content["zero_optimization"] == {"stage": 0}
    assert "pretrain_gpt.py" in export("megatron", training_response("zero0-bf16")).content["launch"]
    with pytest.raises(InputError, match="not one of"):
        export("nemo", training_response("zero0-bf16"))
