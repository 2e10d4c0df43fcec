"""The lexicographic objective both engines minimize, over the integer tables.

For a candidate (key k, state item s, activation item a):
- step ticks T = state ticks + activation ticks; GPUs N; memory M (MiB) = constant + parts;
  rank = the fixed order of choices (keys, then state items, then activation items, each in
  its declared order) -- the last tie-break, which makes the optimum unique.
- objective "throughput": minimize (T, N, M, rank)   (max tokens/s, then fewer GPUs,
  then more headroom, then the fixed order)
- "per-gpu": minimize (N*T, N, M, rank)              (max tokens/s per GPU)
- "min-gpus": minimize (N, T, M, rank) with T <= the bound that reaches min_tokens_per_s.
- "cost", "cost-per-token": minimize (price x N x T, T, N, M, rank) (optimizer/cost_objective.py).
"""

from __future__ import annotations

import numpy as np

from vramopt.optimizer import cost_objective
from vramopt.units import mib_ceil_array


def constant_mib(problem) -> np.ndarray:
    return mib_ceil_array(problem.constant_bytes)


def components(problem, key, step_ticks, memory_mib, rank):
    """The objective tuple's arrays (broadcast over whatever shape the inputs have)."""
    gpus = problem.keys["gpus"][key]
    objective = problem.space.objective
    if objective in cost_objective.COST_OBJECTIVES:
        return cost_objective.components(problem, key, step_ticks, memory_mib, rank)
    if objective == "throughput":
        return (step_ticks, np.broadcast_to(gpus, np.shape(step_ticks)), memory_mib, rank)
    if objective == "per-gpu":
        return (gpus * step_ticks, np.broadcast_to(gpus, np.shape(step_ticks)), memory_mib, rank)
    return (np.broadcast_to(gpus, np.shape(step_ticks)), step_ticks, memory_mib, rank)


def rank_of(problem, key, state_item, activation_item):
    state_count = len(problem.state.values)
    activation_count = len(problem.activation.values)
    return (np.asarray(key, dtype=np.int64) * state_count + state_item) * activation_count + activation_item


def describe(problem) -> str:
    """The lexicographic objective in words, for reports."""
    space = problem.space
    if space.objective in cost_objective.COST_OBJECTIVES:
        return cost_objective.describe(space)
    if space.objective == "throughput":
        return "throughput: max tokens/s, then fewer GPUs, more headroom, a fixed order of choices"
    if space.objective == "per-gpu":
        return "per-gpu: max tokens/s per GPU, then fewer GPUs, more headroom, a fixed order of choices"
    if space.min_tokens_per_s is None:
        return "min-gpus: fewest GPUs serving the request load within its targets, then max tokens/s, more headroom, a fixed order of choices"
    return (f"min-gpus: fewest GPUs reaching {space.min_tokens_per_s:,.0f} tokens/s, then max tokens/s, more headroom, "
            "a fixed order of choices")
