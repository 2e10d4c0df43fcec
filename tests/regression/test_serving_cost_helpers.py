"""Issue 11, test section: "Test the code production runs: ``evaluate_serving`` re-implements
the KV and quantized-weight bytes that the tested helpers compute (with a different int4
size); one implementation, tested."

``evaluate_serving`` now calls ``costs.kv_cache.kv_cache_bytes`` and
``quantized_weight_bytes``. These tests go through ``estimate_serving`` (the production
path of estimate, solve and pareto) and check its bytes against numbers worked out by hand
from the formats' layouts: int4 is AWQ as vLLM allocates it (awq.py,
AWQLinearMethod.create_weights: 4-bit weights, per group of 128 input rows one fp16 scale
and one 4-bit zero point, 4 + 20/128 bits), int8 GPTQ at 8 bits (8 + 24/128), fp4 NVFP4
(4 + 8/16), fp8 8, bf16 16.
"""

from __future__ import annotations

import math

import pytest

from vramopt.costs.coefficients import coefficient
from vramopt.costs.kv_cache import kv_cache_bytes
from vramopt.estimate import estimate_serving
from vramopt.models import load_model
from vramopt.optimizer.search import solve
from vramopt.types import SearchSpace, ServingPlan, ServingWorkload

BITS_BY_HAND = {"bf16": 16, "fp8": 8, "int8": 8 + 24 / 128, "int4": 4 + 20 / 128, "fp4": 4 + 8 / 16}


@pytest.mark.parametrize("quantization, gpu", [("bf16", "h100"), ("fp8", "h100"), ("int8", "a100-80gb"), ("int4", "rtx4090"),
                                                ("fp4", "b200")])
@pytest.mark.parametrize("tensor_parallel, pipeline_parallel", [(1, 1), (2, 1), (1, 2)])
def test_weights_per_gpu_are_the_formats_bits_over_the_shards(quantization, gpu, tensor_parallel, pipeline_parallel):
    """issue 11 test section: the int4 size of the production path is AWQ's 4.156 bits, not 4.125."""
    model = load_model("8b")
    plan = ServingPlan(gpu=gpu, gpus=tensor_parallel * pipeline_parallel, tensor_parallel=tensor_parallel,
                       pipeline_parallel=pipeline_parallel, quantization=quantization, slots=2)
    weights = estimate_serving(ServingWorkload(model="8b", context=4096), plan).memory_dict()["weights_bytes"]
    expected = model.params_total * BITS_BY_HAND[quantization] / 8 / (tensor_parallel * pipeline_parallel)
    assert weights == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("paged", [True, False])
@pytest.mark.parametrize("kv_cache_dtype, bytes_per_element", [("bf16", 2), ("fp8", 1)])
def test_kv_cache_per_gpu_is_slots_times_tokens_times_bytes_per_token(paged, kv_cache_dtype, bytes_per_element):
    """issue 11 test section: the production KV bytes, by hand for Llama 3.1 70B (80 layers, 8 KV
    heads of 128): paged holds half of the 8,192-token context in 16-token blocks plus the
    paged-KV waste; tp=4 splits the 8 KV heads, pp=2 the layers."""
    slots, context = 24, 8192
    per_token = 2 * 80 * 8 * 128 * bytes_per_element
    tokens = math.ceil(context * 0.5 / 16) * 16 * (1 + coefficient("paged_kv_waste_fraction")) if paged else context
    plan = ServingPlan(gpu="h100", gpus=8, tensor_parallel=4, pipeline_parallel=2, quantization="fp8",
                       kv_cache_dtype=kv_cache_dtype, paged_kv=paged, slots=slots)
    estimate = estimate_serving(ServingWorkload(model="70b", context=context), plan)
    assert estimate.memory_dict()["kv_cache_bytes"] == pytest.approx(slots * tokens * per_token / (4 * 2), rel=1e-12)
    helper = kv_cache_bytes(load_model("70b"), slots, context, kv_cache_dtype, paged, 0.5, 16)
    assert estimate.memory_dict()["kv_cache_bytes"] * 8 == pytest.approx(helper, rel=1e-12)


def test_the_solver_prices_int4_as_estimate_does():
    """issue 11 test section: the solver's tables come from the same production path."""
    workload = ServingWorkload(model="8b", context=4096)
    result = solve(workload, SearchSpace(gpus=("rtx4090",), max_gpus=1, pin={"quantization": "int4"}), runner_up_count=0)
    weights = result.estimate.memory_dict()["weights_bytes"]
    assert weights == pytest.approx(load_model("8b").params_total * (4 + 20 / 128) / 8, rel=1e-12)
