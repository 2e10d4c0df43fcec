"""The p99 TPOT at a request rate: the 99th percentile over requests of each request's mean
time per output token (what vLLM's ``benchmark_serving`` reports as P99 TPOT), from how
much load a request meets during its own decode.

A request decodes for ``steps = output / E`` steps, a lifetime ``L = steps x T`` seconds.
With Poisson arrivals at lambda per replica (``m = lambda L`` arrivals per lifetime, which is
also the mean number decoding, Little's law):

- the other decodes it shares its steps with: request j, arriving t_j from it, overlaps
  ``L - |t_j|`` of its lifetime, so the lifetime-average decode count is a sum over the
  arrivals in (-L, L) of the weights ``(L - |t|) / L``: mean ``m``, variance
  ``lambda int ((L - |t|) / L)^2 dt = 2 m / 3`` (a Poisson process's weighted count,
  Campbell's theorem; Kingman 1993, Poisson Processes, section 3.2);
- the prompt tokens prefilled in its steps: those of the arrivals during its lifetime
  (compound Poisson: mean ``m E[I]``, variance ``m E[I^2]``), per step ``/ steps``;
- their covariance: ``lambda int_0^L (L - t) / L dt x E[I] / steps = m E[I] / (2 steps)``.

The step is linearized at the load, ``dT = s_n dn + s_q dq`` (its slopes per decode and per
prompt token by central differences of the step model, 10% of the load each way), and the
request's mean step is taken as normal (a sum over many arrivals; the tail is
underestimated where m is small): ``p99 = T + z_0.99 sqrt(s_n^2 2m/3 + s_q^2 m E[I^2] /
steps^2 + s_n s_q m E[I] / steps)``, TPOT p99 = that / E. A length mix uses the mean output
for the lifetime (short requests, with fewer steps to average over, have wider tails: not
modelled). The disaggregated decode replica has no prompt term.
"""

from __future__ import annotations

import numpy as np

Z_99 = 2.3263478740408408
"""The standard normal distribution's 99th percentile."""
RELATIVE_STEP = 0.1
"""The finite differences' half-width, as a share of the load (at least 1 decode, 1 token)."""


def step_slopes(model, decodes, prompt_tokens) -> tuple[np.ndarray, np.ndarray]:
    """(seconds per extra decode, seconds per extra prompt token) of the step at the load."""
    decodes = np.asarray(decodes, dtype=float)
    prompt_tokens = np.asarray(prompt_tokens, dtype=float) + np.zeros_like(decodes)
    with np.errstate(invalid="ignore"):
        dn = np.maximum(RELATIVE_STEP * decodes, 1.0)
        dq = np.maximum(RELATIVE_STEP * prompt_tokens, 1.0)
        low_n, low_q = np.maximum(decodes - dn, 0.0), np.maximum(prompt_tokens - dq, 0.0)
        per_decode = (model.step(decodes + dn, prompt_tokens) - model.step(low_n, prompt_tokens)) / (decodes + dn - low_n)
        per_token = (model.step(decodes, prompt_tokens + dq) - model.step(decodes, low_q)) / (prompt_tokens + dq - low_q)
    return per_decode, per_token


def lifetime_variance(arrivals_per_s, lifetime_s, steps, mean_input: float, input_second_moment: float, per_decode, per_token):
    """Variance of a request's mean step (seconds squared) from the load of its lifetime."""
    m = np.asarray(arrivals_per_s, dtype=float) * np.asarray(lifetime_s, dtype=float)
    return (per_decode**2 * 2.0 * m / 3.0 + per_token**2 * m * input_second_moment / steps**2
            + per_decode * per_token * m * mean_input / steps)


def p99_step(model, arrivals_per_s, step_s, steps, running, prompt_tokens, mean_input: float, input_second_moment: float) -> np.ndarray:
    """The 99th-percentile over requests of their mean step at the load."""
    per_decode, per_token = step_slopes(model, running, prompt_tokens)
    with np.errstate(invalid="ignore", over="ignore"):
        variance = lifetime_variance(arrivals_per_s, steps * step_s, steps, mean_input, input_second_moment, per_decode, per_token)
        return np.where(np.isfinite(step_s), step_s + Z_99 * np.sqrt(np.maximum(variance, 0.0)), np.inf)
