"""Issue 13 item 1 (operator-level time) at serving, issue 16 item 2 (each step's time from
the operator model: GEMMs with batch-dependent efficiency): serving steps are timed from
the GEMMs' shapes (costs/serving_operators.py), not one training-calibrated utilization."""

from __future__ import annotations

import numpy as np

from vramopt.costs.gemm import FITTED_H100
from vramopt.estimate import estimate_serving
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.types import ServingPlan, ServingWorkload


def test_a_thin_decode_step_runs_slower_per_flop_than_a_full_one():
    """Issue 13 item 1: the GEMM rate of a serving step rises with its tokens (decode GEMMs
    are thin): Llama 3.1 70B at tp 4 on H100, 16 / 256 / 8,192 tokens per step."""
    from vramopt.costs.serving_operators import serving_gemm_flops_per_s, serving_operator_terms

    model, gpu = load_model("llama-3.1-70b"), load_gpu("h100")
    terms = serving_operator_terms(model, gpu, np.zeros(3, dtype=int), 1.0, np.array([4, 4, 4]))
    rates = serving_gemm_flops_per_s(terms, np.array([16.0, 256.0, 8192.0]))
    assert rates[0] < rates[1] < rates[2] < 989e12 * FITTED_H100
    assert rates[2] > 0.9 * 989e12 * FITTED_H100 and rates[1] < 0.8 * rates[2]


def test_tpot_at_a_light_load_is_above_the_weight_streaming_bound_and_grows_with_the_batch():
    """Issue 16 item 2: a decode step cannot beat streaming the weights from HBM, and a
    heavier load (more decodes per step) makes each step longer."""
    gpu = load_gpu("h100")
    values = [estimate_serving(ServingWorkload(model="llama-3.1-70b", context=4096, input_tokens=1000, output_tokens=200,
                                               rate_per_s=rate),
                               ServingPlan(gpu="h100", gpus=4, tensor_parallel=4, slots=512)).values for rate in (0.1, 5.0)]
    weights_s = load_model("llama-3.1-70b").params_total * 2 / 4 / (gpu.hbm_bandwidth_bytes_per_s * 0.8)
    assert weights_s < values[0]["tpot_s"] < values[1]["tpot_s"]
