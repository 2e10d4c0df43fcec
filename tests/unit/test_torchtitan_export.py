"""--export torchtitan (issue 15 item 2): torchtitan 0.3.0 reads no job TOML, so the export is
its command line, parsed and validated here by torchtitan's own ConfigManager and ParallelDims
where torchtitan installs (the 'frameworks' extra); the checks that need no torchtitan run always."""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from vramopt.errors import InputError
from vramopt.estimate import estimate_training
from vramopt.exporters.torchtitan import torchtitan_args
from vramopt.types import TrainingPlan, TrainingWorkload

PLANS = {
    "fsdp-zero3-8b": (TrainingWorkload(model="8b", global_batch=64), TrainingPlan(gpu="h100", gpus=8, zero_stage=3, grad_comm_precision="fp32")),
    "ddp-zero0-selective": (TrainingWorkload(model="8b", seq_len=2048, global_batch=64),
                            TrainingPlan(gpu="b200", gpus=8, zero_stage=0, grad_comm_precision="fp32", checkpointing="selective")),
    "tp4-sp-pp2-interleaved-70b": (TrainingWorkload(model="70b", global_batch=64),
                                   TrainingPlan(gpu="h100", gpus=16, tensor_parallel=4, sequence_parallel=True, pipeline_parallel=2,
                                                virtual_stages=2, zero_stage=3, grad_comm_precision="fp32", checkpointing="full", micro_batch=2)),
    "cp2-zero2-long": (TrainingWorkload(model="8b", seq_len=32768, global_batch=16),
                       TrainingPlan(gpu="h100", gpus=8, context_parallel=2, zero_stage=2, grad_comm_precision="fp32", checkpointing="full")),
    # The plans of torchtitan's published runs (benchmarks/data/torchtitan_peak_memory.csv).
    "tt24-8b-fsdp8-selective": (TrainingWorkload(model="8b", seq_len=8192, global_batch=16),
                                TrainingPlan(gpu="h100", gpus=8, zero_stage=3, grad_comm_precision="fp32", checkpointing="selective",
                                             micro_batch=2)),
    "tt24-8b-fsdp2-cp4-fp8": (TrainingWorkload(model="8b", seq_len=131072, global_batch=2),
                              TrainingPlan(gpu="h100", gpus=8, context_parallel=4, zero_stage=3, grad_comm_precision="fp32",
                                           checkpointing="full", precision="fp8")),
    "tt24-70b-fsdp32-tp8-fp8": (TrainingWorkload(model="70b", seq_len=8192, global_batch=512),
                                TrainingPlan(gpu="h100", gpus=256, tensor_parallel=8, sequence_parallel=True, zero_stage=3,
                                             grad_comm_precision="fp32", checkpointing="full", precision="fp8", micro_batch=16)),
    "tt24-405b-fsdp8-tp8-pp8-uneven": (TrainingWorkload(model="405b", seq_len=8192, global_batch=256),
                                       TrainingPlan(gpu="h100", gpus=512, tensor_parallel=8, sequence_parallel=True, pipeline_parallel=8,
                                                    zero_stage=3, grad_comm_precision="fp32", checkpointing="full", precision="fp8",
                                                    micro_batch=4, first_stage_layers=16, last_stage_layers=14)),
}


def _export(name):
    workload, plan = PLANS[name]
    return plan, torchtitan_args(estimate_training(workload, plan, framework="torchtitan").to_dict())


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_launch_line_is_torchrun_of_torchtitan_train(name):
    plan, result = _export(name)
    tokens = shlex.split(result.content["launch"])
    assert tokens[:2] == ["torchrun", "--nnodes"] and "torchtitan.train" in tokens
    assert tokens[tokens.index("torchtitan.train") + 1:] == result.content["arguments"]


@pytest.mark.parametrize("name", sorted(PLANS))
def test_torchtitans_config_manager_accepts_the_arguments(name):
    manager = pytest.importorskip("torchtitan.config.manager", reason="torchtitan is not installed (the 'frameworks' extra)")
    from torchtitan.distributed.parallel_dims import ParallelDims

    plan, result = _export(name)
    if plan.precision == "fp8" and "405b" in name:
        # llama3_405b's config function adds torchtitan's float8 converter, which imports torchao.
        pytest.importorskip("torchao", reason="torchtitan's llama3_405b config builds float8 linears, which need torchao")
    config = manager.ConfigManager().parse_args(result.content["arguments"])
    parallelism = config.parallelism
    assert parallelism.tensor_parallel_degree == plan.tensor_parallel
    assert parallelism.pipeline_parallel_degree == plan.pipeline_parallel
    assert parallelism.context_parallel_degree == plan.context_parallel
    assert config.training.global_batch_size == PLANS[name][0].global_batch
    assert config.training.seq_len == PLANS[name][0].seq_len
    # torchtitan's own check that the degrees multiply to the world size.
    ParallelDims.from_config(parallelism, world_size=plan.gpus)
    # ZeRO-3 runs under torchtitan's 'default' resharding policy, the one its memory rule counts.
    if plan.zero_stage >= 2:
        assert parallelism.fsdp_reshard_after_forward == ("default" if plan.zero_stage == 3 else "never")
    # Compiled model and loss, as the time model's fused kernels and the compiled loss assume; no async TP.
    assert config.compile.enable and set(config.compile.components) == {"model", "loss"}
    assert not config.compile.enable_async_tensor_parallel
    expected_ac = {"none": "NoneType", "selective": "SelectiveAC", "full": "FullAC"}[plan.checkpointing]
    assert expected_ac in type(config.activation_checkpoint).__qualname__ or (
        expected_ac == "NoneType" and "None" in type(config.activation_checkpoint).__qualname__)


def test_a_bf16_plan_on_the_float8_405b_config_says_so():
    """Issue 15 item 2: llama3_405b's config function converts its linears to float8 (a model
    converter, not an override), so a bf16 plan's export says the run needs another config."""
    workload, plan = PLANS["tt24-405b-fsdp8-tp8-pp8-uneven"]
    bf16 = dataclasses.replace(plan, precision="bf16")
    notes = torchtitan_args(estimate_training(workload, bf16, framework="torchtitan").to_dict()).notes
    assert any("llama3_405b converts every linear but lm_head to float8" in note for note in notes)
    _, fp8 = _export("tt24-405b-fsdp8-tp8-pp8-uneven")
    assert not any("float8" in note and "precision" in note for note in fp8.notes)


def test_a_model_without_a_torchtitan_config_is_refused():
    response = estimate_training(TrainingWorkload(model="llama-2-7b", global_batch=64),
                                 TrainingPlan(gpu="h100", gpus=8, zero_stage=3, grad_comm_precision="fp32")).to_dict()
    with pytest.raises(InputError, match="torchtitan 0.3.0 has no config for llama-2-7b"):
        torchtitan_args(response)


def test_a_plan_torchtitan_cannot_run_is_refused_not_exported():
    response = estimate_training(TrainingWorkload(model="8b", global_batch=64), TrainingPlan(gpu="h100", gpus=8, zero_stage=1)).to_dict()
    with pytest.raises(InputError, match="cannot run under --framework torchtitan"):
        torchtitan_args(response)


def test_uneven_stages_are_split_by_torchtitan_as_planned():
    """Issue 15 item 2: the 405B plan of torchtitan's runs (126 layers: 16 on the first stage,
    16 on each middle one, 14 on the last) exported as layers_per_stage and first/last
    'less layers', dealt by torchtitan's own split (distributed/pipeline_parallel.py)."""
    pipeline_parallel = pytest.importorskip("torchtitan.distributed.pipeline_parallel", reason="torchtitan is not installed")
    plan, result = _export("tt24-405b-fsdp8-tp8-pp8-uneven")
    arguments = result.content["arguments"]

    def value(flag):
        return int(arguments[arguments.index(flag) + 1])

    per_stage = value("--parallelism.pipeline_parallel_layers_per_stage")
    first_less, last_less = (value(f"--parallelism.pipeline_parallel_{end}_stage_less_layers") for end in ("first", "last"))
    stages = (126 + first_less + last_less) // per_stage  # torchtitan's num_stages from layers_per_stage
    parts = pipeline_parallel._generate_llm_fqn_per_model_part(stages, 126, first_less, last_less)
    counts = [sum(1 for fqn in part if fqn.startswith("layers.")) for part in parts]
    assert counts == [16] * 7 + [14]
