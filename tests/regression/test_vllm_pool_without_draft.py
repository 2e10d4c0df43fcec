"""Issue 16 item 3 (KV capacity as vLLM counts it): without speculative decoding the pool is
the memory vLLM may use less the weights, the profiling step's activations, the CUDA graphs
and the reserve. Before, 10% of the plan's own KV cache (the draft's KV share) was added back
to it, so a plan with more slots reported a larger pool."""

from __future__ import annotations

import math

import pytest

from vramopt.estimate import estimate_serving
from vramopt.types import ServingPlan, ServingWorkload


@pytest.mark.parametrize("slots", [64, 279, 1024])
def test_pool_is_what_the_weights_and_activations_leave(slots):
    """issue 16 item 3: pool tokens = floor((capacity x 0.9 - weights - activations - graphs -
    reserve) / KV bytes per token / 16) x 16, whatever the plan's own KV cache."""
    workload = ServingWorkload(model="70b", input_tokens=1000, output_tokens=1000)
    values = estimate_serving(workload, ServingPlan(gpu="h100", gpus=2, tensor_parallel=2, quantization="fp8",
                                                    kv_cache_dtype="fp8", slots=slots)).values
    free = (values["capacity_bytes"] * 0.9 - values["weights_bytes"] - values["activations_bytes"]
            - values["cuda_graphs_bytes"] - values["reserve_bytes"])
    expected = math.floor(free / values["kv_read_bytes_per_token"] / 16) * 16
    assert values["kv_capacity_tokens"] == expected
