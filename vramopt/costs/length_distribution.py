"""Request lengths given as a mean and a 99th percentile: the length mix the request model
averages over (``costs/request_serving.py``), drawn from a lognormal with those two figures.

Assumption: lengths are lognormal. Measured LLM request and response lengths are
right-skewed with a long tail (ShareGPT's outputs in vramopt/validation/data/sharegpt_lengths.csv:
mean 198, median 132, p99 773 tokens; Azure's production traces in Patel et al. 2024,
Splitwise, Figure 3); a lognormal is the two-parameter family with that shape, and a mean
with one percentile fixes it. With z the standard normal's 99th percentile (2.326), mean m and
p99 p:

    m = exp(mu + sigma^2 / 2),  p = exp(mu + z sigma)  =>  sigma = z - sqrt(z^2 - 2 ln(p / m))

(the less skewed of the two roots), which needs m < p <= exp(z^2 / 2) m = 14.96 m. The mix is
``LENGTH_QUANTILES`` equal-probability quantiles of each length, rounded to whole tokens (at
least 1), inputs and outputs paired by a fixed permutation (independent lengths: an
assumption; ShareGPT's are weakly negatively correlated, -0.27).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

LENGTH_QUANTILES = 1000
"""Equal-probability quantiles of each length in the mix."""
P99_Z = NormalDist().inv_cdf(0.99)
PAIRING_SEED = 0
"""Seed of the fixed permutation that pairs input and output quantiles."""


def lognormal_sigma(mean: float, p99: float) -> float:
    """The lognormal's sigma for that mean and 99th percentile; ValueError outside the family."""
    ratio = p99 / mean
    if not 1.0 < ratio <= math.exp(P99_Z**2 / 2.0):
        raise ValueError(f"a lognormal length with mean {mean:,.0f} has a p99 above the mean and at most "
                         f"{math.exp(P99_Z ** 2 / 2.0):.2f} x the mean ({mean * math.exp(P99_Z ** 2 / 2.0):,.0f}); got {p99:,.0f}")
    return P99_Z - math.sqrt(P99_Z**2 - 2.0 * math.log(ratio))


def length_quantiles(mean: float, p99: float | None) -> np.ndarray:
    """``LENGTH_QUANTILES`` lengths: the mean itself without a p99, else the lognormal's
    equal-probability quantiles (midpoints), whole tokens of at least 1."""
    if p99 is None:
        return np.full(LENGTH_QUANTILES, int(mean), dtype=np.int64)
    sigma = lognormal_sigma(mean, p99)
    mu = math.log(mean) - sigma**2 / 2.0
    probabilities = (np.arange(LENGTH_QUANTILES) + 0.5) / LENGTH_QUANTILES
    normal = np.array([NormalDist().inv_cdf(float(q)) for q in probabilities])
    return np.maximum(1, np.rint(np.exp(mu + sigma * normal))).astype(np.int64)


def lognormal_pairs(input_mean: int, input_p99: int | None, output_mean: int, output_p99: int | None) -> list[tuple[int, int]]:
    """(input, output) pairs of the mix: each length's quantiles, paired by a fixed permutation."""
    inputs = length_quantiles(input_mean, input_p99)
    outputs = length_quantiles(output_mean, output_p99)[np.random.default_rng(PAIRING_SEED).permutation(LENGTH_QUANTILES)]
    return [(int(i), int(o)) for i, o in zip(inputs, outputs)]


def percentile_pairs(workload) -> list[tuple[int, int]] | None:
    """The mix of a workload that gives ``input_tokens_p99`` or ``output_tokens_p99`` beside the
    means ``input_tokens`` and ``output_tokens`` (a length without its p99 stays fixed); None
    when it gives neither. InputError for a p99 that is not an integer above its mean and
    within the lognormal's reach."""
    from vramopt.errors import InputError
    from vramopt.types import MAX_COUNT

    percentiles = {"input_tokens": workload.input_tokens_p99, "output_tokens": workload.output_tokens_p99}
    if all(value is None for value in percentiles.values()):
        return None
    for name, value in percentiles.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT):
            raise InputError(f"{name}_p99 must be a positive integer, got {value!r}")
        if value is not None:
            try:
                lognormal_sigma(getattr(workload, name), value)
            except ValueError as error:
                raise InputError(f"{name}_p99: {error}") from None
    return lognormal_pairs(workload.input_tokens, workload.input_tokens_p99, workload.output_tokens, workload.output_tokens_p99)
