"""Issue 16 item 1 (lengths as mean/percentiles): ``input_tokens_p99`` / ``output_tokens_p99``
(``--input-tokens-p99``, ``--output-tokens-p99``) beside the means give a lognormal length mix."""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest

from tests.cli_runner import invoke
from vramopt.costs.length_distribution import LENGTH_QUANTILES, length_quantiles, lognormal_sigma
from vramopt.errors import InputError
from vramopt.estimate import estimate_serving
from vramopt.types import ServingPlan, ServingWorkload

PLAN = ServingPlan(gpu="h100", gpus=2, tensor_parallel=2, quantization="fp8", kv_cache_dtype="fp8", slots=256)


def test_the_lognormal_has_the_mean_and_the_p99():
    """issue 16 item 1: sigma from m = exp(mu + s^2/2), p = exp(mu + 2.326 s), checked by the
    closed forms, and the quantile mix keeps the mean within 0.2% and the p99 within 2%."""
    sigma = lognormal_sigma(1000, 4000)
    mu = math.log(1000) - sigma**2 / 2
    assert math.exp(mu + sigma**2 / 2) == pytest.approx(1000)
    assert math.exp(mu + NormalDist().inv_cdf(0.99) * sigma) == pytest.approx(4000)
    lengths = length_quantiles(1000, 4000)
    assert len(lengths) == LENGTH_QUANTILES and lengths.min() >= 1
    assert lengths.mean() == pytest.approx(1000, rel=2e-3)
    assert np.quantile(lengths, 0.99) == pytest.approx(4000, rel=0.02)


@pytest.mark.parametrize("p99", [1000, 900, 15_000])
def test_a_p99_outside_the_lognormal_is_refused(p99):
    """issue 16 item 1: the p99 must exceed the mean and be at most exp(z^2/2) = 14.97 x it."""
    with pytest.raises(ValueError, match="at most"):
        lognormal_sigma(1000, p99)
    with pytest.raises(InputError, match="input_tokens_p99"):
        estimate_serving(ServingWorkload(model="70b", input_tokens=1000, output_tokens=100, input_tokens_p99=p99, context=131072), PLAN)


def test_a_tail_raises_the_ttft_tail_and_the_kv_held():
    """issue 16 item 1: the same means with a long prompt tail: the p99 TTFT counts the
    99.5th-percentile prompt (longer than the mean one), and long outputs hold more KV blocks
    per running sequence (they decode for more steps)."""
    fixed = estimate_serving(ServingWorkload(model="70b", input_tokens=1000, output_tokens=200, rate_per_s=4.0, context=16384), PLAN)
    tailed = estimate_serving(ServingWorkload(model="70b", input_tokens=1000, output_tokens=200, rate_per_s=4.0, context=16384,
                                              input_tokens_p99=5000, output_tokens_p99=1000), PLAN)
    assert tailed.values["ttft_p99_s"] > 1.5 * fixed.values["ttft_p99_s"]
    assert tailed.values["kv_cache_bytes"] > fixed.values["kv_cache_bytes"]
    response = tailed.to_dict()["requests"]
    assert response["lengths_from"] == "lognormal" and response["length_samples"] == LENGTH_QUANTILES
    assert fixed.to_dict()["requests"]["lengths_from"] == "fixed"


def test_cli_flags_and_conflicts():
    """issue 16 item 1: the flags on the CLI (max-model-len grows to the longest request of the
    mix); with --lengths, or a p99 below its mean, one error line and exit status 2."""
    common = ["estimate", "--workload", "infer", "--model", "70b", "--gpu", "h100", "--gpus", "2", "--tp", "2",
              "--quantization", "fp8", "--kv-cache-dtype", "fp8", "--slots", "64", "--output-tokens", "200"]
    result = invoke([*common, "--input-tokens", "1000", "--input-tokens-p99", "8000", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["requests"]["lengths_from"] == "lognormal" and body["plan"]["context"] > 8192
    result = invoke([*common, "--input-tokens", "1000", "--input-tokens-p99", "500"])
    assert result.exit_code == 2 and result.stderr.startswith("error: input_tokens_p99"), result.stderr
