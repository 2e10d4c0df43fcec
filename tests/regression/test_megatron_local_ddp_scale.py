"""Issue 13 item 2 (the rest of the step) and the Korthikanti Table 5 mean: Megatron-LM's local
DDP (megatron/model/distributed.py ``allreduce_gradients``, 2020-2022) divides its whole
gradient buffer by the data-parallel size in place before the all-reduce, every iteration and
also at dp = 1: one read and one write of every (fp32, under bf16) gradient element."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vramopt.costs.memory import parameters_per_gpu
from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.hardware import load_gpu
from vramopt.plan import check_plan
from vramopt.validation.published import table5_runs


def _step(case, plan):
    return float(np.asarray(evaluate_training(case, check_plan(case, plan))["step_time_s"]).reshape(-1)[0])


def test_22b_row_pays_the_scale_pass_of_its_fp32_gradient_buffer():
    """Korthikanti et al. 2022 Table 5, 22B (tp 8, dp 1, bf16 with fp32 main_grad): the local-DDP
    step is longer than the overlapped-DDP one (no data-parallel traffic at dp = 1 either way) by
    2 x 4 bytes per parameter on the GPU at 80% of the A100's 2,039 GB/s."""
    run = next(run for run in table5_runs() if run.case_id == "k22_t5_22b_present")
    gpu = load_gpu("a100-80gb")
    local = TrainingCase(model=run.model, gpu=gpu, seq_len=run.seq_len, global_batch=run.global_batch,
                         data_parallel_overlap=False, fp32_gradient_buffer=True)
    overlapped = dataclasses.replace(local, data_parallel_overlap=True)
    columns = check_plan(local, run.plan)
    params = float(np.asarray(parameters_per_gpu(run.model, columns)).reshape(-1)[0])
    expected = 8.0 * params / (2.039e12 * 0.8)
    assert _step(local, run.plan) - _step(overlapped, run.plan) == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(0.0135, abs=0.001)  # 22B / 8 GPUs: about 13.5 ms of a 1.10 s step
