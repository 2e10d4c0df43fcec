"""Golden: published layouts with uneven pipeline stages (issue 14 item 3 must-shows), out
of sample (no coefficient was fitted on these runs).

Tolerance kind "regression bound" (as tests/golden/test_out_of_sample.py): the error
recorded when the test was added, plus or minus 3 points. It is NOT an accuracy claim: the
differences are explained in docs/cost-model.md ("Uneven pipeline stages").

- Llama 3 405B, Dubey et al. 2024 (arXiv 2407.21783) Table 4: 8,192 H100 at TP8 CP1 PP16
  DP64 and 16,384 at DP128, sequence 8,192, 16M-token batches (2,048 sequences), 430 and
  400 TFLOP/s per GPU (BF16 MFU 43% and 41%); section 3.3.2: one layer fewer on the first
  and the last stage, so 126 layers as 7 + 14 x 8 + 7 (with an interleaved schedule:
  Megatron-Core's embedding and loss slots, 128 = 16 stages x chunks).
- DeepSeek-V3 technical report (arXiv 2412.19437) section 3.1-3.2: 2,048 H800, 16-way
  pipeline (DualPipe), 64-way expert parallelism, ZeRO-1 data parallelism, no tensor
  parallelism, FP8; section 4.2: sequence 4K, batch 15,360 sequences; 180K H800 GPU-hours per
  trillion tokens (section 1 and Table 1). The report does not give its stage split; vramopt
  takes 3 + 14 x 4 + 2.
"""

from __future__ import annotations

import pytest

from vramopt import api
from vramopt.estimate import estimate_training
from vramopt.types import TrainingPlan, TrainingWorkload

H100_BF16_PEAK_TFLOPS = 989.5
"""NVIDIA H100 SXM datasheet, dense BF16 (the catalog's figure; Table 4's MFU uses it)."""

LLAMA3_TABLE4 = [
    # (GPUs, data parallel, published TFLOP/s per GPU, error recorded %)
    (8192, 64, 430.0, -18.3),
    (16384, 128, 400.0, -21.2),
]
"""Recorded -36.9% / -48.8% while the split could only run plain 1F1B (its 7-layer ends are
odd); with Megatron-Core's embedding/loss slots (--account-for-embedding/loss-in-pipeline-split,
costs/pipeline_stages.embedding_loss_slots) the search interleaves it: 4 chunks, a bubble of
(p - 1) / 4 micro-batch slots instead of p - 1 (at 2 chunks, the issue's reading of section
3.3.2: -25.4% / -33.0%). Still short: the plan recomputes every layer (every:1), the only
recomputation that fits in vramopt's activation model at 16 micro-batches in flight."""
TOLERANCE_POINTS = 3.0


@pytest.mark.parametrize(("gpus", "data_parallel", "published", "recorded"), LLAMA3_TABLE4, ids=["8192", "16384"])
def test_llama3_405b_table4_rows_are_expressible_and_stay_at_their_recorded_error(gpus, data_parallel, published, recorded):
    pins = {"gpus": str(gpus), "tensor_parallel": "8", "pipeline_parallel": "16", "first_stage_layers": "7",
            "last_stage_layers": "7", "context_parallel": "1", "precision": "bf16"}
    response = api.solve({"workload": {"model": "llama-3.1-405b", "seq_len": 8192, "global_batch": 2048},
                          "space": {"gpus": ["h100"], "max_gpus": gpus, "pin": pins, "workers": 1}}).to_dict()
    plan = response["plan"]
    assert response["solver"]["status"] == "optimal" and response["memory"]["fits"]
    assert (plan["data_parallel"], plan["first_stage_layers"], plan["last_stage_layers"]) == (data_parallel, 7, 7)
    assert plan["virtual_stages"] == 4
    model_tflops = response["throughput"]["mfu"] * H100_BF16_PEAK_TFLOPS
    error = (model_tflops - published) / published * 100
    assert abs(error - recorded) <= TOLERANCE_POINTS, f"{gpus} GPUs: {model_tflops:.0f} TFLOP/s, {error:+.1f}% (recorded {recorded:+.1f}%)"


DEEPSEEK_V3_PUBLISHED_GPU_HOURS_PER_TRILLION = 180_000
DEEPSEEK_RECORDED_ERROR_PCT = 162.3
"""vramopt's GPU-hours per trillion tokens for the published layout with full recomputation
(every:1), the only activation choice with which it fits in vramopt's model: +196.5% when
uneven stages landed, +162.3% once the expert GEMMs were timed in their expert-parallel
shapes (256/64 experts per GPU, 64 times the tokens each: fatter grouped GEMMs)."""


def _deepseek_plan(checkpointing: str) -> tuple[TrainingWorkload, TrainingPlan]:
    workload = TrainingWorkload(model="deepseek-v3", seq_len=4096, global_batch=15360)
    plan = TrainingPlan(gpu="h800", gpus=2048, tensor_parallel=1, pipeline_parallel=16, expert_parallel=64,
                        first_stage_layers=3, last_stage_layers=2, zero_stage=1, precision="fp8", checkpointing=checkpointing)
    return workload, plan


def test_deepseek_v3_published_layout_fits_with_full_recomputation():
    workload, plan = _deepseek_plan("every:1")
    estimate = estimate_training(workload, plan)
    memory = estimate.memory_dict()
    assert memory["fits"] and memory["total_bytes"] <= 0.9 * memory["capacity_bytes"]
    gpu_hours_per_trillion = plan.gpus * 1e12 / estimate.values["tokens_per_s"] / 3600
    error = (gpu_hours_per_trillion - DEEPSEEK_V3_PUBLISHED_GPU_HOURS_PER_TRILLION) / DEEPSEEK_V3_PUBLISHED_GPU_HOURS_PER_TRILLION * 100
    assert abs(error - DEEPSEEK_RECORDED_ERROR_PCT) <= TOLERANCE_POINTS, f"{gpu_hours_per_trillion:,.0f} GPU-hours per 1T tokens"


def test_deepseek_v3_published_layout_keeps_too_many_activations_without_recomputation():
    """Recorded limitation: DeepSeek trained without full recomputation (it recomputes only
    RMSNorm and the MLA up-projections and caches some activations in FP8, report section
    3.2.3); vramopt's bf16 activation model of 16 micro-batches in flight on 4-layer stages
    exceeds the H800's 80 GB. The test fails the day the activation model fits it."""
    workload, plan = _deepseek_plan("none")
    memory = estimate_training(workload, plan).memory_dict()
    assert not memory["fits"] and memory["activations_bytes"] > 80e9
