"""Issue 13 (torchtitan's H100 rows within 10% tokens/s per GPU): the rows were about 60% fast
because they were evaluated on the catalog DGX H100 with generic accounting. They ran on
Meta Grand Teton H100s (96 GB HBM2e at 2.4 TB/s, 500 W; torchtitan
benchmarks/llama3_h100_202412_torchtitan.md "Hardware" and footnote 2), with torchtitan's
per-op selective recomputation and torch SDPA's FlashAttention-2-class attention."""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.costs.gemm import GENERATIONS
from vramopt.costs.operators import sdpa_attention_extra_seconds
from vramopt.costs.training import TrainingCase
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.plan import check_plan
from vramopt.types import TrainingPlan
from vramopt.validation.calibration import GRID_STEP, fit
from vramopt.validation.grand_teton import SUSTAINED_RATE_FRACTION, grand_teton_h100
from vramopt.validation.published import calibration_runs


def _runs():
    return {run.case_id: run for run in calibration_runs()}


def test_sdpa_attention_extra_of_llama_8b_by_hand():
    """Issue 13 item 1 (attention core per implementation): Llama 3.1 8B, 2 x 8,192 tokens on one
    H100 under flash attention with torchtitan's selective AC (no attention recomputation).
    Causal forward FLOPs per layer 4 x 16,384 x 8,192 x 128 x 32 x 0.5 = 1.0995e12, backward
    2.5 x that, 32 layers: 1.2315e14 FLOPs, at 0.45 of 989.5 TFLOP/s in the Hopper
    fraction; FlashAttention-2 at 335 TFLOP/s takes 0.45 x 989.5 / 335 - 1 = 32.9% longer."""
    gpu = load_gpu("h100")
    case = TrainingCase(model=load_model("llama-3.1-8b"), gpu=gpu, seq_len=8192, global_batch=16, framework="torchtitan")
    plan = TrainingPlan(gpu="h100", gpus=8, tensor_parallel=1, pipeline_parallel=1, virtual_stages=1, zero_stage=3,
                        checkpointing="selective", precision="bf16", grad_comm_precision="bf16", offload="none",
                        flash_attention=True, sequence_parallel=False, micro_batch=2)
    extra = float(np.asarray(sdpa_attention_extra_seconds(case.model, gpu, check_plan(case, plan), 8192)).reshape(-1)[0])
    flops = 32 * 3.5 * 4.0 * 16384 * 8192 * 128 * 32 * 0.5
    by_hand = flops / (0.45 * 989.5e12) * (0.45 * 989.5 / 335.0 - 1.0)
    assert extra == pytest.approx(by_hand, rel=1e-9)


def test_ampere_sdpa_is_the_same_flash_attention_2():
    """Issue 13 item 1: on A100 the flash fraction already is FlashAttention-2's: no extra time."""
    assert GENERATIONS["ampere"].sdpa_attention_fraction == GENERATIONS["ampere"].flash_attention_fraction


def test_grand_teton_gpu_takes_the_published_memory_and_scales_only_the_compute_rates():
    """Issue 13 item 4: the published figures as they are (2.4 TB/s, 96 GB); the power cap scales
    the compute rates by the fitted fraction, not the HBM rate or the links."""
    base, part = load_gpu("h100"), grand_teton_h100()
    assert part.hbm_bandwidth_bytes_per_s == 2.4e12 and part.memory_bytes == 96_000_000_000
    assert part.nvlink_bandwidth_bytes_per_s == base.nvlink_bandwidth_bytes_per_s
    for precision, peak in base.peak_flops_per_s.items():
        assert part.peak_flops_per_s[precision] == pytest.approx(peak * SUSTAINED_RATE_FRACTION)


def test_grand_teton_fraction_is_the_fit_on_the_8b_rows_and_held_out_within_5_percent():
    """Issue 13 item 4 (fit on one part, report the rest): the catalog value is the fit, and each
    of the four rows predicted with the value fitted on the other three is within 5%."""
    result = fit("grand_teton")
    assert abs(result.fitted - SUSTAINED_RATE_FRACTION) <= GRID_STEP + 1e-12
    assert len(result.case_ids) == 4
    assert max(abs(error) for error in result.held_out_errors) <= 0.05


@pytest.mark.parametrize("case_id", ["tto_405b_tp8_fsdp16_bf16_128h100", "tto_405b_tp8_fsdp16_fp8_128h100",
                                     "tt24_t4_70b_fsdp32_tp8", "tt24_t5_405b_fsdp8_tp8_pp8_1f1b"])
def test_out_of_sample_torchtitan_h100_rows_within_10_percent(case_id):
    """Issue 13 must-show (torchtitan's H100 rows within 10% tokens/s per GPU), out of sample:
    405B FSDP 16 x TP 8 (109 and 177 tokens/s per GPU, docs/performance.md), 70B FSDP 32 x TP 8
    (829) and 405B 3-D 1F1B (100, Dec 2024 Tables 4 and 5); none is in the fit."""
    run = _runs()[case_id]
    assert abs(run.relative_error()) <= 0.10, run.relative_error()


def test_interleaved_schedule_is_faster_than_1f1b():
    """Issue 13 must-show, direction only (Table 5: 100 -> 128 tokens/s per GPU). The size is not
    reproduced: vramopt gives about +53% (docs/published-runs-validation.md says why)."""
    runs = _runs()
    one_f_one_b, interleaved = runs["tt24_t5_405b_fsdp8_tp8_pp8_1f1b"], runs["tt24_t5_405b_fsdp8_tp8_pp8_interleaved"]
    assert interleaved.predicted() > one_f_one_b.predicted()
