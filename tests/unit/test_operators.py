"""Unit tests of the operator-level compute model: costs/gemm.py, costs/operators.py,
costs/overlap.py and costs/optimizer_step.py. Expected values are hand arithmetic on the
documented formulas, not re-runs of the code."""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.costs import gemm, operators, overlap
from vramopt.costs.coefficients import coefficient
from vramopt.costs.columns import CHECKPOINT_EVERY, CHECKPOINT_NONE, CHECKPOINT_SELECTIVE, OFFLOAD_NONE, PlanColumns
from vramopt.costs.compute import micro_batch_operator_times
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.types import PRECISIONS

BF16 = PRECISIONS.index("bf16")


def columns(**values) -> PlanColumns:
    plan = dict(gpus=1, tensor_parallel=1, pipeline_parallel=1, data_parallel=1, sequence_parallel=0, virtual_stages=1,
                zero_stage=0, checkpoint_kind=CHECKPOINT_NONE, checkpoint_every=0, precision=BF16, grad_comm_precision=BF16,
                offload=OFFLOAD_NONE, flash_attention=1, micro_batch=1)
    plan.update(values)
    return PlanColumns.from_scalars(**plan)


def one(value) -> float:
    return float(np.asarray(value).reshape(-1)[0])


def test_gemm_efficiency_by_hand():
    a100 = load_gpu("a100-80gb")
    # 8192 x 2304 x 6144: 8192 * 2304 / (128 * 256) = 576 tiles on 108 SMs -> 576 / (576 + 54);
    # depth 6144 / (6144 + 128).
    expected = gemm.GENERATIONS["ampere"].large_gemm_fraction * (576 / 630) * (6144 / 6272)
    assert one(gemm.gemm_efficiency(a100, 8192, 2304, 6144)) == pytest.approx(expected, rel=1e-12)
    seconds = one(gemm.gemm_seconds(a100, 312e12, 8192, 2304, 6144))
    assert seconds == pytest.approx(2 * 8192 * 2304 * 6144 / (312e12 * expected), rel=1e-12)


def test_thin_gemms_run_at_a_lower_fraction_and_memory_bounds_the_thinnest():
    h100 = load_gpu("h100")
    wide = one(gemm.gemm_efficiency(h100, 8192, 4096, 4096))
    thin = one(gemm.gemm_efficiency(h100, 512, 4096, 4096))
    assert thin < wide < gemm.GENERATIONS["hopper"].large_gemm_fraction
    # A LoRA-like 4096 x 16 x 4096 GEMM never beats moving its operands through HBM once,
    # and a 64 x 64 x 64 one is bound by exactly that.
    bandwidth = h100.hbm_bandwidth_bytes_per_s * coefficient("hbm_bandwidth_efficiency")
    memory = 2 * (4096 * 4096 + 4096 * 16 + 16 * 4096) / bandwidth
    assert one(gemm.gemm_seconds(h100, 989.5e12, 4096, 16, 4096)) >= memory
    small = one(gemm.gemm_seconds(h100, 989.5e12, 64, 64, 64))
    assert small >= 2 * 3 * 64 * 64 / bandwidth


def test_every_catalog_gpu_has_a_generation_below_its_measured_ceiling():
    from vramopt.hardware import builtin_gpus

    for gpu in builtin_gpus():
        assert gpu.name in gemm.GPU_GENERATION, gpu.name
    for generation in gemm.GENERATIONS.values():
        assert 0 < generation.large_gemm_fraction < generation.max_achievable_fraction <= 1
        assert 0 < generation.flash_attention_fraction < 1 and generation.source


def test_calibration_override_restores_the_catalog_value():
    before = gemm.GENERATIONS["ampere"].large_gemm_fraction
    with gemm.large_gemm_fraction_set_to("ampere", 0.5):
        assert gemm.GENERATIONS["ampere"].large_gemm_fraction == 0.5
    assert gemm.GENERATIONS["ampere"].large_gemm_fraction == before


def test_elementwise_bytes_by_hand_for_a_gpt_layer():
    """GPT (plain GELU MLP f = 4h, learned positions: no rotary), tp 1: per token and layer,
    forward 22h (norms, residuals) + 4f = 38h bytes, backward 22h + 6f = 46h; the loss 16 V."""
    from vramopt.validation.narayanan import gpt_model

    model, gpu = gpt_model(24, 2304, 24), load_gpu("a100-80gb")
    tokens = 2048.0
    forward, backward = operators.elementwise_seconds(model, gpu, columns(), tokens)
    h, bandwidth = 2304, gpu.hbm_bandwidth_bytes_per_s * coefficient("hbm_bandwidth_efficiency")
    loss = 16 * 51200 / 2
    assert one(forward) == pytest.approx(tokens * (24 * 38 * h + loss) / bandwidth, rel=1e-12)
    assert one(backward) == pytest.approx(tokens * (24 * 46 * h + loss) / bandwidth, rel=1e-12)
    # Sequence parallelism splits the 22h part over tp; the 4f part is always split.
    tp4 = operators.elementwise_seconds(model, gpu, columns(tensor_parallel=4), tokens)[0]
    tp4_sp = operators.elementwise_seconds(model, gpu, columns(tensor_parallel=4, sequence_parallel=1), tokens)[0]
    assert one(tp4) - one(tp4_sp) == pytest.approx(tokens * 24 * 22 * h * (1 - 1 / 4) / bandwidth, rel=1e-9)


def test_recomputation_reruns_exactly_what_each_mode_discards():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100")
    base = micro_batch_operator_times(model, gpu, columns(), 4096)
    assert one(base["recompute_s"]) == 0
    # Selective under flash attention recomputes nothing; without flash, the attention core forward.
    assert one(micro_batch_operator_times(model, gpu, columns(checkpoint_kind=CHECKPOINT_SELECTIVE), 4096)["recompute_s"]) == 0
    unfused = micro_batch_operator_times(model, gpu, columns(checkpoint_kind=CHECKPOINT_SELECTIVE, flash_attention=0), 4096)
    attention_forward = operators.attention_core_seconds(model, gpu, columns(flash_attention=0), 4096)[0]
    assert one(unfused["recompute_s"]) == pytest.approx(one(attention_forward), rel=1e-12)
    # Full: the layers' forward (GEMMs, attention, memory-bound kernels), not the head.
    full = micro_batch_operator_times(model, gpu, columns(checkpoint_kind=CHECKPOINT_EVERY, checkpoint_every=1), 4096)
    assert one(full["recompute_s"]) < one(base["forward_s"])
    assert one(full["recompute_s"]) > 0.9 * one(base["forward_s"])
    assert one(full["compute_s"]) == pytest.approx(one(base["compute_s"]) + one(full["recompute_s"]), rel=1e-12)


def test_flash_attention_is_faster_than_the_unfused_core_at_long_sequences():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("a100-80gb")
    flash = operators.attention_core_seconds(model, gpu, columns(), 8192)
    unfused = operators.attention_core_seconds(model, gpu, columns(flash_attention=0), 8192)
    assert one(flash[0]) < one(unfused[0]) and one(flash[1]) < one(unfused[1])


def test_the_last_stage_carries_the_head():
    """Under pipeline parallelism the head and loss sit on the last stage, which sets the
    pace: pp = 2 takes more than half of pp = 1's time per micro-batch."""
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100")
    whole = one(micro_batch_operator_times(model, gpu, columns(), 4096)["compute_s"])
    stage = one(micro_batch_operator_times(model, gpu, columns(pipeline_parallel=2), 4096)["compute_s"])
    assert whole / 2 < stage < 0.6 * whole


def test_exposed_data_parallel_time_by_hand():
    bandwidth = 100e9
    tail = overlap.DDP_BUCKET_BYTES / bandwidth
    # ZeRO 0-2: 1.0 s of all-reduce beside 0.7 s of backward GEMMs: 0.3 s exposed.
    assert one(overlap.exposed_data_parallel_seconds(1.0, bandwidth, 0.7, 1.0, 4.0, 1, True)) == pytest.approx(0.3)
    # Fully hidden: the last bucket stays exposed.
    assert one(overlap.exposed_data_parallel_seconds(0.1, bandwidth, 0.7, 1.0, 4.0, 1, True)) == pytest.approx(tail)
    # ZeRO-3: 4 micro-batches of 0.5 s traffic over 0.4 s compute each: 4 x 0.1 s.
    assert one(overlap.exposed_data_parallel_seconds(2.0, bandwidth, 0.3, 0.4, 4.0, 3, True)) == pytest.approx(0.4)
    # A framework that does not overlap exposes everything.
    assert one(overlap.exposed_data_parallel_seconds(2.0, bandwidth, 0.3, 0.4, 4.0, 3, False)) == 2.0
    assert one(overlap.exposed_tensor_parallel_seconds(0.5, 0.4, True)) == pytest.approx(0.1)
    assert one(overlap.exposed_tensor_parallel_seconds(0.5, 0.4, False)) == 0.5
