"""DeepSpeed exports load in DeepSpeed's own parser (issue 15 item 2 and must-show): every
config ``--export deepspeed`` writes is accepted by ``deepspeed.runtime.config.DeepSpeedConfig``
(DeepSpeed installs on CPU with DS_BUILD_OPS=0: the 'frameworks' extra), its batch sizes agree
with the data-parallel world size given through an mpu (and, for pure data parallelism,
without one), and no plan breaks PipelineEngine's ZeRO rule. Skipped where DeepSpeed is absent."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from vramopt.errors import InputError
from vramopt.estimate import estimate_training
from vramopt.exporters.deepspeed import deepspeed_config
from vramopt.optimizer.search import solve
from vramopt.types import SearchSpace, TrainingPlan, TrainingWorkload

deepspeed_config_module = pytest.importorskip("deepspeed.runtime.config", reason="DeepSpeed is not installed (the 'frameworks' extra)")
from deepspeed.runtime.zero.config import ZeroStageEnum  # noqa: E402


@dataclass
class DataParallelMpu:
    """The one method DeepSpeedConfig asks of an mpu (runtime/config.py, DeepSpeedConfig.__init__)."""

    data_parallel: int

    def get_data_parallel_world_size(self) -> int:
        return self.data_parallel


def parse(content, monkeypatch, mpu=None, world_size=1):
    # Without torch.distributed, DeepSpeedConfig falls back to world size 1; these stand in
    # for an initialized process group of ``world_size`` ranks, rank 0.
    monkeypatch.setattr(deepspeed_config_module.dist, "get_rank", lambda *args, **kwargs: 0)
    monkeypatch.setattr(deepspeed_config_module.dist, "get_world_size", lambda *args, **kwargs: world_size)
    return deepspeed_config_module.DeepSpeedConfig(dict(content), mpu=mpu)


def check(response, monkeypatch):
    plan = response["plan"]
    content = deepspeed_config(response).content
    config = parse(content, monkeypatch, mpu=DataParallelMpu(plan["data_parallel"] * plan.get("context_parallel", 1)),
                   world_size=plan["gpus"])
    assert config.train_batch_size == plan["global_batch"]
    assert config.train_micro_batch_size_per_gpu == plan["micro_batch"]
    assert config.gradient_accumulation_steps == plan["grad_accumulation"]
    assert config.zero_optimization_stage == plan["zero_stage"]
    if plan["pipeline_parallel"] > 1:  # deepspeed/runtime/pipe/engine.py, PipelineEngine.__init__
        assert config.zero_optimization_stage < ZeroStageEnum.gradients
    if plan["offload"] != "none":
        device = config.zero_config.offload_optimizer.device
        assert getattr(device, "value", device) == plan["offload"]
    if plan["tensor_parallel"] == plan["pipeline_parallel"] == plan.get("context_parallel", 1) == 1:
        assert parse(content, monkeypatch, world_size=plan["gpus"]).train_batch_size == plan["global_batch"]
    return config


PLANS = {
    "zero3-nvme": (TrainingWorkload(model="70b", seq_len=8192, global_batch=32), TrainingPlan(gpu="b200", gpus=4, zero_stage=3, offload="nvme", checkpointing="every:4")),
    "zero1-cpu-fp16": (TrainingWorkload(model="8b", seq_len=2048, global_batch=64),
                       TrainingPlan(gpu="h100", gpus=8, zero_stage=1, offload="cpu", precision="fp16", grad_comm_precision="fp16", micro_batch=2)),
    "pp2-zero1-tp2": (TrainingWorkload(model="70b", global_batch=64),
                      TrainingPlan(gpu="b200", gpus=8, tensor_parallel=2, pipeline_parallel=2, zero_stage=1, checkpointing="every:1")),
    "zero2-fp32-wire": (TrainingWorkload(model="8b", global_batch=64), TrainingPlan(gpu="h100", gpus=8, zero_stage=2, grad_comm_precision="fp32")),
}


@pytest.mark.parametrize("name", sorted(PLANS))
def test_deepspeeds_parser_accepts_the_export(name, monkeypatch):
    workload, plan = PLANS[name]
    check(estimate_training(workload, plan, framework="deepspeed").to_dict(), monkeypatch)


def test_deepspeed_itself_refuses_the_old_answer_and_vramopt_no_longer_gives_it(monkeypatch):
    """issue 15: the default plan of `solve --model 70b --max-gpus 8 --export deepspeed` was pp2 + ZeRO-2."""
    response = solve(TrainingWorkload(model="70b"), SearchSpace(max_gpus=8, framework="deepspeed")).to_dict()
    check(response, monkeypatch)
    refused = estimate_training(TrainingWorkload(model="70b"), TrainingPlan(gpu="b200", gpus=8, pipeline_parallel=2, zero_stage=2, offload="cpu"))
    with pytest.raises(InputError, match="incompatible with pipeline parallelism"):
        deepspeed_config(refused.to_dict())


@st.composite
def requests(draw):
    workload = TrainingWorkload(
        model=draw(st.sampled_from(("llama-2-7b", "llama-3.1-8b", "llama-2-13b", "llama-3.1-70b", "mixtral-8x7b"))),
        seq_len=draw(st.sampled_from((1024, 2048, 4096))),
        global_batch=draw(st.sampled_from((8, 32, 128, 1024))),
        kind=draw(st.sampled_from(("train", "finetune", "lora"))),
    )
    pins = draw(st.dictionaries(st.sampled_from(("zero_stage", "offload", "precision", "pipeline_parallel")), st.none(), max_size=2))
    values = {"zero_stage": ("0", "1", "2", "3"), "offload": ("none", "cpu", "nvme"), "precision": ("bf16", "fp16"),
              "pipeline_parallel": ("1", "2", "4")}
    space = SearchSpace(gpus=(draw(st.sampled_from(("a100-80gb", "h100", "b200", "rtx4090"))),),
                        max_gpus=draw(st.sampled_from((1, 2, 8, 16, 32))),
                        pin={field: draw(st.sampled_from(values[field])) for field in pins}, framework="deepspeed", workers=1)
    return workload, space


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture], max_examples=30)
@given(case=requests())
def test_every_plan_solved_under_deepspeed_exports_a_config_deepspeed_accepts(case, monkeypatch):
    workload, space = case
    try:
        result = solve(workload, space)
    except InputError:
        assume(False)
    assume(result.estimate is not None)
    check(result.to_dict(), monkeypatch)
