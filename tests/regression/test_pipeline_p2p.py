"""Issue 13 (throughput model v2), item 3: pipeline point-to-point activations between stages
are part of the step time; before, a pipelined step had no send/recv time at all, which
favoured deep pipelines."""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.hardware import load_gpu
from vramopt.plan import check_plan
from vramopt.types import TrainingPlan
from vramopt.validation.narayanan import gpt_model


def _evaluate(pipeline_parallel: int, virtual_stages: int, gpus: int):
    case = TrainingCase(model=gpt_model(96, 12288, 96), gpu=load_gpu("a100-80gb"), seq_len=2048, global_batch=64,
                        data_parallel_overlap=False)
    plan = TrainingPlan(gpu="a100-80gb", gpus=gpus, tensor_parallel=8, pipeline_parallel=pipeline_parallel,
                        virtual_stages=virtual_stages, zero_stage=0, checkpointing="selective", precision="bf16",
                        grad_comm_precision="bf16", offload="none", flash_attention=False, sequence_parallel=True, micro_batch=1)
    values = evaluate_training(case, check_plan(case, plan))
    return {name: float(np.asarray(value).reshape(-1)[0]) for name, value in values.items()}


def test_gpt3_pipeline_pays_its_stage_to_stage_messages():
    """Issue 13 item 3: Korthikanti et al. 2022's GPT-3 layout (tp 8, pp 8, 3 chunks, 64 micro-batches,
    sequence parallel): 2 x (3 x 64 + 7) = 398 messages of 2048 x 12288 x 2 / 8 bytes per rank over
    20 GB/s of InfiniBand (25 GB/s x 0.8) = 0.1252 s, in the step time."""
    values = _evaluate(8, 3, 64)
    expected = 398 * 2048 * 12288 * 2 / 8 / 20e9
    assert values["pipeline_parallel_s"] == pytest.approx(expected, rel=1e-9)
    parts = ("compute_s", "tensor_parallel_s", "context_parallel_s", "expert_parallel_s", "pipeline_parallel_s",
             "data_parallel_s", "offload_s", "optimizer_step_s")
    assert values["step_time_s"] == pytest.approx(sum(values[name] for name in parts), rel=1e-12)


def test_no_pipeline_no_point_to_point():
    """Issue 13 item 3: pp = 1 sends nothing."""
    assert _evaluate(1, 1, 8)["pipeline_parallel_s"] == 0.0
