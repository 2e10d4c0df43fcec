"""The p99 TPOT over requests (issue 16 item 1: "TTFT and TPOT, p50 and p99, or mean where the
model cannot give tails; say which"): the lifetime-load variances against a simulation of
Poisson arrivals, the formula by hand on a linear step, and the figures of a plan."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vramopt.costs.tpot_tail import Z_99, lifetime_variance, p99_step
from vramopt.disaggregated import DisaggregatedPlan, estimate_disaggregated
from vramopt.estimate import estimate_serving
from vramopt.types import ServingPlan, ServingWorkload


def test_lifetime_variances_match_a_simulation_of_poisson_arrivals():
    """Arrivals at 50/s, lifetimes of 2 s (m = 100): the lifetime-average count of the others
    decoding has variance 2m/3 = 66.7, the arrivals during the lifetime m = 100, their
    covariance m/2 = 50 (simulated directly, not through the module)."""
    rng = np.random.default_rng(7)
    rate, lifetime, trials = 50.0, 2.0, 20000
    averages, during = np.empty(trials), np.empty(trials)
    for trial in range(trials):
        times = rng.uniform(-lifetime, lifetime, rng.poisson(rate * 2 * lifetime))
        averages[trial] = np.sum((lifetime - np.abs(times)) / lifetime)
        during[trial] = np.sum(times > 0)
    m = rate * lifetime
    assert np.var(averages) == pytest.approx(2 * m / 3, rel=0.05)
    assert np.var(during) == pytest.approx(m, rel=0.05)
    assert np.cov(averages, during)[0, 1] == pytest.approx(m / 2, rel=0.05)
    # The module's variance of a n + b Q / steps with those moments (fixed prompts of I tokens).
    a, b, steps, prompt = 2e-4, 3e-6, 50.0, 800.0
    simulated = np.var(a * averages + b * prompt * during / steps)
    assert lifetime_variance(rate, lifetime, steps, prompt, prompt**2, a, b) == pytest.approx(simulated, rel=0.05)


class _LinearStep:
    """A step of 5 ms + 0.1 ms per decode + 10 us per prompt token (a test double)."""

    def step(self, decodes, prompt_tokens):
        return 5e-3 + 1e-4 * np.asarray(decodes, dtype=float) + 1e-5 * np.asarray(prompt_tokens, dtype=float)


def test_p99_step_by_hand_on_a_linear_step():
    """10 requests/s, T = 20 ms, 100 steps: L = 2 s, m = 20; fixed 1,000-token prompts.
    Variance = 1e-8 x 2 x 20 / 3 + 1e-10 x 20 x 1e6 / 1e4 + 1e-4 x 1e-5 x 20 x 1000 / 100
    = 1.3333e-7 + 2e-7 + 2e-7 = 5.3333e-7 s^2; p99 = 20 ms + 2.3263 x 0.7303 ms = 21.699 ms."""
    value = p99_step(_LinearStep(), np.array([10.0]), np.array([0.02]), 100.0, np.array([20.0]), np.array([100.0]), 1000.0, 1e6)
    assert float(value[0]) == pytest.approx(0.02 + Z_99 * math.sqrt(5.333333e-7), rel=1e-6)
    assert float(value[0]) == pytest.approx(0.021699, abs=1e-6)
    # No arrivals during a lifetime: no spread.
    assert float(p99_step(_LinearStep(), np.array([0.0]), np.array([0.02]), 100.0, np.array([0.0]), np.array([0.0]), 1000.0, 1e6)[0]) == 0.02


def test_the_p99_is_reported_at_a_rate_and_above_the_mean():
    workload = ServingWorkload(model="70b", input_tokens=1000, output_tokens=1000, rate_per_s=10.0)
    plan = ServingPlan(gpu="h100", gpus=6, tensor_parallel=2, quantization="fp8", kv_cache_dtype="fp8", slots=279)
    values = estimate_serving(workload, plan).values
    assert values["tpot_s"] < values["tpot_p99_s"] < 1.5 * values["tpot_s"]
    closed = estimate_serving(ServingWorkload(model="70b", input_tokens=1000, output_tokens=1000, concurrency=64), plan)
    assert math.isnan(closed.values["tpot_p99_s"]) and closed.to_dict()["requests"]["tpot_p99_ms"] is None
    disaggregated = estimate_disaggregated(workload, DisaggregatedPlan(gpu="h100", prefill_replicas=1, prefill_tensor_parallel=2,
                                                                      decode_replicas=2, decode_tensor_parallel=2, quantization="fp8",
                                                                      kv_cache_dtype="fp8", decode_slots=279))
    assert disaggregated["tpot_s"] < disaggregated["tpot_p99_s"] < 1.5 * disaggregated["tpot_s"]
