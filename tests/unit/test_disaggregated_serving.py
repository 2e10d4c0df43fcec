"""Disaggregated prefill/decode serving (issue 16 item 4): the KV transfer from datasheet
figures, the prefill queue against M/D/1 by hand, the decode replicas without prefill
interference, the TTFT composition, the capacity as the smaller side, and bad input."""

from __future__ import annotations

import math

import pytest

from vramopt.disaggregated import DisaggregatedPlan, estimate_disaggregated
from vramopt.errors import InputError
from vramopt.estimate import estimate_serving
from vramopt.types import ServingPlan, ServingWorkload

LOAD = dict(model="llama-3.1-70b", input_tokens=1000, output_tokens=1000, rate_per_s=10.0, ttft_p99_ms=2000.0, tpot_ms=50.0)


def _plan(**changes) -> DisaggregatedPlan:
    fields = dict(gpu="h100", prefill_replicas=1, prefill_tensor_parallel=2, decode_replicas=2, decode_tensor_parallel=2,
                  quantization="fp8", kv_cache_dtype="fp8", decode_slots=279)
    fields.update(changes)
    return DisaggregatedPlan(**fields)


def test_kv_transfer_from_the_datasheets():
    """Llama 3.1 70B (80 layers, 8 KV heads of 128): 2 x 80 x 8 x 128 = 163,840 one-byte fp8
    elements per token, 163.84 MB for a 1,000-token prompt. tp 2 to tp 2 moves half of it per
    GPU: inside one DGX H100 over NVLink4 (450 GB/s per direction, NVIDIA H100 datasheet) at
    the 0.80 large-message efficiency, 81.92 MB / 360 GB/s = 0.2276 ms; across nodes over one
    400 Gb/s ConnectX-7 per GPU (DGX H100 datasheet), 81.92 MB / 40 GB/s = 2.048 ms."""
    inside = estimate_disaggregated(ServingWorkload(**LOAD), _plan())
    assert inside["transfer_bytes_per_request"] == 163_840_000
    assert inside["inside_one_node"] and inside["transfer_s"] == pytest.approx(81.92e6 / 360e9, rel=1e-12)
    across = estimate_disaggregated(ServingWorkload(**LOAD), _plan(prefill_replicas=2, decode_replicas=3))  # 10 GPUs
    assert not across["inside_one_node"] and across["transfer_s"] == pytest.approx(81.92e6 / 40e9, rel=1e-12)
    # bf16 KV doubles the bytes; tp 4 prefill to tp 1 decode: the one decode GPU receives it all.
    wide = estimate_disaggregated(ServingWorkload(**LOAD), _plan(kv_cache_dtype="bf16", prefill_tensor_parallel=4, decode_tensor_parallel=1,
                                                                   decode_replicas=2, quantization="fp8"))
    assert wide["transfer_bytes_per_request"] == 327_680_000 and wide["transfer_s"] == pytest.approx(327.68e6 / 360e9, rel=1e-12)


def test_the_prefill_queue_is_m_d_1_by_hand():
    """Fixed prompts: S = I / prompt rate is deterministic, so the Pollaczek-Khinchine mean wait
    is rho S / (2 (1 - rho)) (Kleinrock 1975, M/D/1); the p99 wait W / rho x ln(rho / 0.01);
    utilization rho = (rate / P) x S."""
    figures = estimate_disaggregated(ServingWorkload(**LOAD), _plan())
    prefill = figures["prefill"]
    service = 1000 / prefill["prompt_tokens_per_s"]
    rho = 10.0 * service
    assert prefill["prefill_utilization"] == pytest.approx(rho)
    wait = rho * service / (2 * (1 - rho))
    assert prefill["wait_mean_s"] == pytest.approx(wait)
    assert prefill["wait_tail_s"] == pytest.approx(wait / rho * math.log(rho / 0.01))
    # A 1,000-token prompt is one step of the 8,192-token budget, alone on the replica.
    assert prefill["prefill_s"] < 8192 / prefill["prompt_tokens_per_s"]
    # Two prefill replicas halve the arrivals each sees: the same prefill, a shorter wait.
    two = estimate_disaggregated(ServingWorkload(**LOAD), _plan(prefill_replicas=2))["prefill"]
    assert two["prefill_s"] == prefill["prefill_s"] and two["prefill_utilization"] == pytest.approx(rho / 2)
    assert two["wait_mean_s"] == pytest.approx((rho / 2) * service / (2 * (1 - rho / 2)))


def test_ttft_tpot_and_capacity_compose_as_documented():
    figures = estimate_disaggregated(ServingWorkload(**LOAD), _plan())
    prefill, decode = figures["prefill"], figures["decode"]
    assert figures["ttft_p99_s"] == pytest.approx(prefill["prefill_tail_s"] + prefill["wait_tail_s"] + figures["transfer_s"] + decode["decode_step_s"])
    assert figures["ttft_mean_s"] == pytest.approx(prefill["prefill_mean_s"] + prefill["wait_mean_s"] + figures["transfer_s"] + decode["decode_step_s"])
    assert figures["tpot_s"] == decode["tpot_s"] == decode["decode_step_s"]  # no speculative decoding: one token per step
    # Little's law on each decode replica: 5 requests/s x 1,000 tokens x T sequences running.
    assert decode["running_per_replica"] == pytest.approx(5.0 * 1000 * decode["decode_step_s"])
    assert figures["capacity_requests_per_s"] == min(prefill["capacity_requests_per_s"], decode["capacity_requests_per_s"])
    assert figures["capacity_tokens_per_s"] == pytest.approx(1000 * figures["capacity_requests_per_s"])
    # The prefill capacity is its prompt rate over the prompt length.
    assert prefill["capacity_requests_per_s"] == pytest.approx(prefill["prompt_tokens_per_s"] / 1000)


def test_decode_steps_without_prefill_are_shorter_than_colocated_ones():
    """The colocated replica at the same load per replica (5 requests/s on tp 2, 279 slots) carries
    5 x 1,000 prompt tokens/s in its steps; the decode replica carries none, so its step (the
    TPOT) is shorter, and its KV pool is the same (both hold every slot at its actual length)."""
    colocated = estimate_serving(ServingWorkload(**dict(LOAD, rate_per_s=5.0)),
                                 ServingPlan(gpu="h100", gpus=2, tensor_parallel=2, quantization="fp8", kv_cache_dtype="fp8", slots=279))
    decode = estimate_disaggregated(ServingWorkload(**LOAD), _plan())
    assert decode["tpot_s"] < colocated.values["tpot_s"]
    assert decode["prefill"]["prompt_tokens_per_s"] > colocated.values["prompt_tokens_per_step"] / colocated.values["load_step_s"]
    assert decode["decode"]["memory"]["kv_cache_bytes"] == pytest.approx(colocated.values["kv_cache_bytes"])
    assert decode["decode"]["memory"]["total_bytes"] == pytest.approx(colocated.values["total_bytes"])


def test_the_prefill_pool_holds_two_steps_of_prompts():
    """ceil(2 x 8,192 / 1,000) = 17 prompts of 1,001 tokens (63 blocks of 16) at 163,840 bytes
    a token, split over tp 2: 17 x 1,008 x 163,840 / 2 bytes of KV cache per GPU."""
    prefill = estimate_disaggregated(ServingWorkload(**LOAD), _plan())["prefill"]
    assert prefill["slots"] == 17
    assert prefill["memory"]["kv_cache_bytes"] == pytest.approx(17 * 1008 * 163_840 / 2)


@pytest.mark.parametrize("changes, message", [
    ({"prefill_replicas": 0}, "prefill_replicas must be an integer"),
    ({"decode_tensor_parallel": 3}, "decode replicas"),
    ({"decode_slots": True}, "decode_slots must be an integer"),
])
def test_bad_plans_are_one_clear_error(changes, message):
    with pytest.raises(InputError, match=message):
        estimate_disaggregated(ServingWorkload(**LOAD), _plan(**changes))


def test_a_disaggregated_plan_needs_a_rate_and_the_switch_is_checked():
    with pytest.raises(InputError, match="at a request rate"):
        estimate_disaggregated(ServingWorkload(**dict(LOAD, rate_per_s=None, concurrency=8)), _plan())
    with pytest.raises(InputError, match="disaggregation must be 'auto' or 'off'"):
        estimate_disaggregated(ServingWorkload(**LOAD, disaggregation="maybe"), _plan())
