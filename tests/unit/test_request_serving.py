"""The request-level serving model (costs/request_serving.py), issue 16 items 1-2: the
fixed point of the step, Little's law, TTFT/TPOT monotone in the load, the saturation
capacity against a hand-written roofline, and the input checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vramopt.costs.coefficients import coefficient
from vramopt.costs.gemm import FITTED_A100
from vramopt.costs.request_serving import _affine_fixed_point
from vramopt.errors import InputError
from vramopt.estimate import estimate_serving
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.types import ServingPlan, ServingWorkload


def _values(plan_slots=64, gpus=4, tp=4, **load):
    workload = ServingWorkload(model="llama-3.1-70b", context=4096, input_tokens=1000, output_tokens=1000, **load)
    return estimate_serving(workload, ServingPlan(gpu="h100", gpus=gpus, tensor_parallel=tp, slots=plan_slots)).values


def test_affine_fixed_point_by_hand():
    # T = 1 + 0.5 T -> 2; T = max(1 + 0.2 T, 0.9 T) -> max(1.25, 0) = 1.25; a slope of 1 never settles.
    assert _affine_fixed_point([[(np.array(1.0), np.array(0.5))]]) == pytest.approx(2.0)
    assert _affine_fixed_point([[(np.array(1.0), np.array(0.2)), (np.array(0.0), np.array(0.9))]]) == pytest.approx(1.25)
    assert _affine_fixed_point([[(np.array(1.0), np.array(0.5))], [(np.array(0.5), np.array(0.5))]]) == math.inf
    # A compute piece alone growing faster than T (no intercept) is an overload, not T = 0.
    assert _affine_fixed_point([[(np.array(1.0), np.array(0.0)), (np.array(0.0), np.array(1.5))]]) == math.inf
    # Two groups: T = (1 + 0.1 T) + max(0.5 + 0.2 T, 0.4 T) -> max(1.5 / 0.7, 1 / 0.5) = 2.142857
    value = _affine_fixed_point([[(np.array(1.0), np.array(0.1))], [(np.array(0.5), np.array(0.2)), (np.array(0.0), np.array(0.4))]])
    assert value == pytest.approx(1.5 / 0.7)


def test_littles_law_holds_at_the_fixed_point():
    values = _values(rate_per_s=2.0)
    # One replica (tp 4 on 4 GPUs): sequences decoding = rate x output tokens x step.
    assert values["running_per_replica"] == pytest.approx(2.0 * 1000 * values["load_step_s"])
    assert values["tpot_s"] == pytest.approx(values["load_step_s"])
    assert values["requests_per_s"] == pytest.approx(2.0)


def test_latency_grows_with_the_rate_and_the_tail_is_above_the_mean():
    low, high = _values(rate_per_s=0.5), _values(rate_per_s=2.5)
    assert high["tpot_s"] > low["tpot_s"]
    assert high["ttft_p99_s"] > low["ttft_p99_s"]
    for values in (low, high):
        assert values["ttft_p99_s"] >= values["ttft_mean_s"] >= values["prefill_alone_s"] > 0


def test_a_compute_bound_rate_above_the_capacity_is_not_served():
    """A pipeline-parallel replica whose prompts and decodes at 5 requests/s need more FLOPs
    per second than it has: a served load never exceeds the capacity (issue 16 item 2)."""
    workload = ServingWorkload(model="llama-3.1-70b", input_tokens=1000, output_tokens=1000, rate_per_s=10.0)
    values = estimate_serving(workload, ServingPlan(gpu="h100", gpus=4, pipeline_parallel=2, quantization="fp8",
                                                    kv_cache_dtype="fp8", slots=256)).values
    assert values["capacity_requests_per_s"] < 10 and not values["sustainable"]


def test_a_rate_above_the_capacity_is_not_served():
    saturation = _values()
    assert saturation["sustainable"]
    over = _values(rate_per_s=1.2 * saturation["capacity_requests_per_s"])
    assert not over["sustainable"] and over["tpot_s"] == math.inf and over["requests_per_s"] == 0


def test_saturation_step_is_the_roofline_of_each_operator_group():
    """Llama 3.1 8B on one A100 80GB, 4 slots of 500 + 100 tokens, bf16: every term by hand
    (issue 16 item 2; operator-level GEMMs, issue 13 item 1: costs/serving_operators.py).

    GEMMs per layer (n, k): QKV (6,144, 4,096), attention output (4,096, 4,096), gate + up
    (28,672, 4,096), down (4,096, 14,336); 32 layers; head (128,256, 4,096). Each runs at the
    Ampere large-GEMM fraction x depth k / (k + 128) of the 312 TFLOP/s peak; the half-empty
    wave is 108 / 2 tiles of 128 x 256 x k, scaled by min(M / 128, 1) for M = 24 tokens."""
    model, gpu = load_model("llama-3.1-8b"), load_gpu("a100-80gb")
    workload = ServingWorkload(model="llama-3.1-8b", context=4096, input_tokens=500, output_tokens=100)
    values = estimate_serving(workload, ServingPlan(gpu="a100-80gb", gpus=1, slots=4)).values
    decodes, prompt_tokens = 4.0, 4.0 * 500 / 100
    tokens, logits = decodes + prompt_tokens, decodes + prompt_tokens / 500
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * coefficient("hbm_bandwidth_efficiency")
    rate = 312e12 * FITTED_A100

    def depth(k):
        return k / (k + 128)

    shapes = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
    shape_parameters = 32 * sum(n * k for n, k in shapes)
    non_embedding = model.parameters.active - model.parameters.embedding
    body = 32 * sum(2 * n * k / (rate * depth(k)) for n, k in shapes) * non_embedding / shape_parameters
    head = 2 * 128_256 * 4096 / (rate * depth(4096))
    wave = (32 * sum(54 * 128 * 256 * 2 * k / (rate * depth(k)) for _, k in shapes) + 54 * 128 * 256 * 2 * 4096 / (rate * depth(4096)))
    kv_per_token = 2 * 32 * 8 * 128 * 2
    gemm = max(model.params_total * 2 / bandwidth, wave * tokens / 128 + tokens * body + logits * head)
    context = 500 + 101 / 2
    attention = max((decodes * context + prompt_tokens) * kv_per_token / bandwidth,
                    (decodes * context + prompt_tokens * 250) * 4 * 32 * 32 * 128 / (312e12 * 0.60))
    # Norms 16h, SiLU-and-mul 6f, rotary 4 (32 + 8) 128, KV write 4 x 2 x 8 x 128 bytes per layer; logits 10 V.
    elementwise = (tokens * 32 * (16 * 4096 + 6 * 14336 + 4 * 40 * 128 + 8 * 8 * 128) + logits * 10 * 128_256) / bandwidth
    assert values["saturation_step_s"] == pytest.approx(gemm + attention + elementwise, rel=1e-9)
    assert values["capacity_tokens_per_s"] == pytest.approx(decodes / (gemm + attention + elementwise), rel=1e-9)


def test_closed_loop_clients_beyond_the_batch_wait():
    inside, beyond = _values(plan_slots=16, concurrency=8), _values(plan_slots=16, concurrency=64)
    assert inside["running_per_replica"] == 8 and beyond["running_per_replica"] == 16
    assert beyond["ttft_mean_s"] > inside["ttft_mean_s"]


def test_paged_kv_holds_the_actual_lengths_in_blocks():
    values = _values(plan_slots=10)
    # 1000 + k tokens for k = 1..1000 in 16-token blocks: mean 1508.8 slots (not half the context).
    held = np.mean(-(-(1000 + np.arange(1, 1001)) // 16) * 16)
    assert values["kv_cache_bytes"] == pytest.approx(10 * held * 327_680 / 4)


@pytest.mark.parametrize(("fields", "message"), [
    ({"input_tokens": 1000}, "need both"),
    ({"input_tokens": 100_000, "output_tokens": 100_000}, "exceed llama-3.1-70b's context"),
    ({"input_tokens": 4000, "output_tokens": 1000}, "raise --context"),
    ({"input_tokens": 10, "output_tokens": 10, "rate_per_s": 0.0}, "rate_per_s must be a positive"),
    ({"input_tokens": 10, "output_tokens": 10, "rate_per_s": -3.0}, "rate_per_s must be a positive"),
    ({"input_tokens": 10, "output_tokens": 10, "rate_per_s": 1.0, "concurrency": 4}, "not both"),
    ({"input_tokens": 0, "output_tokens": 10}, "input_tokens must be a positive integer"),
    ({"input_tokens": 10, "output_tokens": 10, "tpot_ms": float("nan")}, "tpot_ms must be a positive"),
])
def test_bad_request_fields_are_one_clear_error(fields, message):
    workload = ServingWorkload(model="llama-3.1-70b", context=4096, **fields)
    with pytest.raises(InputError, match=message):
        estimate_serving(workload, ServingPlan(gpu="h100", gpus=4, tensor_parallel=4))


# --- a length mix (issue 16 item 1: lengths as a distribution) --------------------------

MIX = ((100, 10), (1000, 300), (40, 2000), (300, 1))


def _mix_values(samples=MIX, **load):
    workload = ServingWorkload(model="llama-3.1-8b", context=4096, length_samples=samples, **load)
    return estimate_serving(workload, ServingPlan(gpu="a100-80gb", gpus=1, slots=32)).values


def test_one_sample_is_the_fixed_length_model():
    fixed = estimate_serving(ServingWorkload(model="llama-3.1-8b", context=4096, input_tokens=700, output_tokens=90, rate_per_s=3.0),
                             ServingPlan(gpu="a100-80gb", gpus=1, slots=32)).values
    mix = _mix_values(((700, 90),), rate_per_s=3.0)
    for name in ("ttft_p99_s", "ttft_mean_s", "tpot_s", "kv_cache_bytes", "capacity_tokens_per_s"):
        assert mix[name] == pytest.approx(fixed[name], rel=1e-12), name


def test_a_mix_holds_each_request_at_its_own_length_weighted_by_its_decode_steps():
    from vramopt.costs.request_serving import RequestLoad, mix_contexts, request_kv_tokens_per_slot

    load = RequestLoad(input_tokens=0, output_tokens=0, inputs=tuple(p for p, _ in MIX), outputs=tuple(o for _, o in MIX))
    # Brute force over every decode step of every request.
    held = [math.ceil((prompt + k) / 16) * 16 for prompt, output in MIX for k in range(1, output + 1)]
    contexts = [prompt + k for prompt, output in MIX for k in range(1, output + 1)]
    assert request_kv_tokens_per_slot(load, 16) == pytest.approx(np.mean(held), rel=1e-12)
    decode, prefill = mix_contexts(load)
    assert decode == pytest.approx(np.mean(contexts), rel=1e-12)
    # A prompt token at position x attends to x tokens: mean over every prompt token, ~ I^2 / 2 / I.
    assert prefill == pytest.approx(sum(p * p / 2 for p, _ in MIX) / sum(p for p, _ in MIX))


def test_a_mix_uses_its_means_for_the_rates_and_its_tail_for_the_p99():
    values = _mix_values(rate_per_s=2.0)
    mean_output = np.mean([o for _, o in MIX])
    assert values["running_per_replica"] == pytest.approx(2.0 * mean_output * values["load_step_s"])
    # The p99 is set by the longest prompts: above a fixed mix of the same mean prompt.
    mean_input = int(np.mean([p for p, _ in MIX]))
    fixed = estimate_serving(ServingWorkload(model="llama-3.1-8b", context=4096, input_tokens=mean_input, output_tokens=int(mean_output),
                                             rate_per_s=2.0), ServingPlan(gpu="a100-80gb", gpus=1, slots=32)).values
    assert values["prefill_tail_s"] > fixed["prefill_alone_s"]
    assert values["ttft_p99_s"] > fixed["ttft_p99_s"]


@pytest.mark.parametrize(("samples", "message"), [
    ((), "1 to 1,000,000"),
    (((1, 2, 3),), r"length_samples\[0\]"),
    (((0, 5),), r"length_samples\[0\]"),
    (((3000, 3000),), "the longest request's input \\+ output tokens"),
])
def test_bad_length_samples_are_one_clear_error(samples, message):
    with pytest.raises(InputError, match=message):
        _mix_values(samples)


def test_fixed_lengths_and_a_mix_together_are_refused():
    workload = ServingWorkload(model="llama-3.1-8b", input_tokens=10, output_tokens=10, length_samples=((1, 2),))
    with pytest.raises(InputError, match="not both"):
        estimate_serving(workload, ServingPlan(gpu="a100-80gb", gpus=1))


def test_the_lengths_csv_reader(tmp_path):
    from vramopt.length_samples_file import read_length_samples

    good = tmp_path / "lengths.csv"
    good.write_text("input_tokens,output_tokens\n100,10\n\n2000, 7\n")
    assert read_length_samples(str(good)) == ((100, 10), (2000, 7))
    for text, message in (("in,out\n1,2\n", "header"), ("input_tokens,output_tokens\n", "no request rows"),
                          ("input_tokens,output_tokens\n1,x\n", "line 2"), ("input_tokens,output_tokens\n1,0\n", "positive")):
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        with pytest.raises(InputError, match=message):
            read_length_samples(str(bad))
