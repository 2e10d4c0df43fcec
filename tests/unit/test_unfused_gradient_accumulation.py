"""The separate gradient-accumulation pass (costs/optimizer_step.py), by hand: PyTorch autograd's
AccumulateGrad adds each micro-batch's gradient after the first to the accumulated one in place,
reading both and writing the sum (3 x 2 bytes per bf16/fp16 parameter), at the HBM bandwidth
(A100 80GB 2,039 GB/s x 0.8)."""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.costs.optimizer_step import unfused_accumulation_seconds
from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.hardware import load_gpu
from vramopt.plan import check_plan
from vramopt.types import TrainingPlan
from vramopt.validation.narayanan import gpt_model


def test_one_pass_per_micro_batch_after_the_first():
    gpu = load_gpu("a100-80gb")
    # 2e9 parameters, 2-byte gradients, 64 micro-batches: 63 passes of 12 GB at 1,631.2 GB/s.
    expected = 63 * 6 * 2e9 / (2.039e12 * 0.8)
    assert float(unfused_accumulation_seconds(gpu, 2e9, 2.0, np.array([64.0]))[0]) == pytest.approx(expected, rel=1e-9)
    assert float(unfused_accumulation_seconds(gpu, 2e9, 2.0, np.array([1.0]))[0]) == 0.0


def test_the_pass_is_in_the_step_time_only_when_asked_for():
    def step(unfused: bool) -> dict:
        case = TrainingCase(model=gpt_model(96, 12288, 96), gpu=load_gpu("a100-80gb"), seq_len=2048, global_batch=64,
                            unfused_gradient_accumulation=unfused)
        plan = TrainingPlan(gpu="a100-80gb", gpus=64, tensor_parallel=8, pipeline_parallel=8, virtual_stages=1, zero_stage=0,
                            checkpointing="every:1", precision="bf16", grad_comm_precision="bf16", offload="none",
                            flash_attention=False, sequence_parallel=False, micro_batch=1)
        values = evaluate_training(case, check_plan(case, plan))
        return {name: float(np.asarray(value).reshape(-1)[0]) for name, value in values.items()}

    fused, unfused = step(False), step(True)
    # GPT-3 175B over tp 8 x pp 8 (embedding on the first and last stage): about 2.7e9 parameters per GPU.
    extra = unfused["step_time_s"] - fused["step_time_s"]
    assert extra == pytest.approx(63 * 6 * 2.73e9 / (2.039e12 * 0.8), rel=0.03)
    assert unfused["optimizer_step_s"] - fused["optimizer_step_s"] == pytest.approx(extra, rel=1e-9)
