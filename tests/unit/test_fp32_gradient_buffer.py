"""bf16 Megatron-LM's optimizer step over an fp32 main_grad buffer (costs/optimizer_step.py), by
hand from megatron/optimizer/optimizer.py (7fccd6a): Adam reads the fp32 gradient (4), the fp32
master weight and both fp32 moments (12) and writes them back (12); the master-to-model copy reads
the master again (4) and writes bf16 (2); the norm reads the gradient (4); the buffer is zeroed (4):
42 bytes per parameter, against the generic 30 (bf16 gradient read twice, 2 + 2, no zeroing, the
bf16 copy written in the update)."""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.hardware import load_gpu
from vramopt.plan import check_plan
from vramopt.types import TrainingPlan
from vramopt.validation.narayanan import gpt_model


def optimizer_step_s(fp32_gradient_buffer: bool) -> float:
    case = TrainingCase(model=gpt_model(48, 6144, 64), gpu=load_gpu("a100-80gb"), seq_len=2048, global_batch=4,
                        fp32_gradient_buffer=fp32_gradient_buffer)
    plan = TrainingPlan(gpu="a100-80gb", gpus=8, tensor_parallel=8, pipeline_parallel=1, virtual_stages=1, zero_stage=0,
                        checkpointing="selective", precision="bf16", grad_comm_precision="bf16", offload="none",
                        flash_attention=False, sequence_parallel=True, micro_batch=4)
    return float(np.asarray(evaluate_training(case, check_plan(case, plan))["optimizer_step_s"]).reshape(-1)[0])


def test_megatron_step_moves_42_bytes_per_parameter_against_30():
    assert optimizer_step_s(True) / optimizer_step_s(False) == pytest.approx(42 / 30, rel=1e-12)


def test_generic_step_is_30_bytes_per_parameter_at_hbm_bandwidth():
    model = gpt_model(48, 6144, 64)
    params_per_gpu = (model.parameters.total) / 8  # tp 8, no ZeRO: every GPU steps its 1/8 (embedding included)
    seconds = 30 * params_per_gpu / (2.039e12 * 0.8)  # A100 80GB HBM2e 2,039 GB/s at 80%
    assert optimizer_step_s(False) == pytest.approx(seconds, rel=0.02)
