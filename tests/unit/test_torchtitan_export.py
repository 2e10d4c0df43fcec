"""--export torchtitan (issue 15 item 2): torchtitan 0.3.0 reads no job TOML, so the export is
its command line, parsed and validated here by torchtitan's own ConfigManager and ParallelDims
where torchtitan installs (the 'frameworks' extra); the checks that need no torchtitan run always."""

from __future__ import annotations

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
    config = manager.ConfigManager().parse_args(result.content["arguments"])
    parallelism = config.parallelism
    assert parallelism.tensor_parallel_degree == plan.tensor_parallel
    assert parallelism.pipeline_parallel_degree == plan.pipeline_parallel
    assert parallelism.context_parallel_degree == plan.context_parallel
    assert config.training.global_batch_size == PLANS[name][0].global_batch
    assert config.training.seq_len == PLANS[name][0].seq_len
    # torchtitan's own check that the degrees multiply to the world size.
    ParallelDims.from_config(parallelism, world_size=plan.gpus)
    expected_ac = {"none": "NoneType", "selective": "SelectiveAC", "full": "FullAC"}[plan.checkpointing]
    assert expected_ac in type(config.activation_checkpoint).__qualname__ or (
        expected_ac == "NoneType" and "None" in type(config.activation_checkpoint).__qualname__)


def test_a_model_without_a_torchtitan_config_is_refused():
    response = estimate_training(TrainingWorkload(model="llama-2-7b", global_batch=64),
                                 TrainingPlan(gpu="h100", gpus=8, zero_stage=3, grad_comm_precision="fp32")).to_dict()
    with pytest.raises(InputError, match="torchtitan 0.3.0 has no config for llama-2-7b"):
        torchtitan_args(response)


def test_a_plan_torchtitan_cannot_run_is_refused_not_exported():
    response = estimate_training(TrainingWorkload(model="8b", global_batch=64), TrainingPlan(gpu="h100", gpus=8, zero_stage=1)).to_dict()
    with pytest.raises(InputError, match="cannot run under --framework torchtitan"):
        torchtitan_args(response)
