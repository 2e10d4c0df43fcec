"""The exhaustive reference enumerator: every key x state item x activation item.

It reads the same integer tables as the CP-SAT engine (``problem.Problem``) and applies the
same lexicographic objective (``objective.components``) with numpy, without any pruning,
so "CP-SAT equals brute force" is an exact comparison. Also reachable as
``vramopt solve --engine exhaustive``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vramopt.optimizer.interaction import grid_ticks, plan_ticks
from vramopt.optimizer.objective import components, constant_mib, rank_of

KEYS_PER_CHUNK = 256


@dataclass(frozen=True, slots=True)
class Choice:
    key: int
    state_item: int
    activation_item: int
    objective: tuple[int, ...]


def _lexicographic_min(parts: tuple[np.ndarray, ...]) -> int:
    """Index (into the flat arrays) of the lexicographically smallest tuple."""
    candidates = np.arange(parts[0].size)
    for part in parts:
        values = part[candidates]
        candidates = candidates[values == values.min()]
        if candidates.size == 1:
            break
    return int(candidates[0])


def feasible_mask(problem, keys: np.ndarray) -> np.ndarray:
    """[keys, state items, activation items] bool: well formed and inside the budget."""
    state, activation = problem.state, problem.activation
    valid = state.valid[keys][:, :, None] & activation.valid[keys][:, None, :]
    memory = state.memory_mib[keys][:, :, None] + activation.memory_mib[keys][:, None, :]
    fits = valid & (memory <= problem.budget_mib[keys][:, None, None])
    if problem.bound_ticks is not None:
        fits &= grid_ticks(problem, keys) <= problem.bound_ticks
    return fits


def best_in_keys(problem, keys: np.ndarray) -> Choice | None:
    """The optimum restricted to ``keys``, by enumeration."""
    if keys.size == 0:
        return None
    fits = feasible_mask(problem, keys)
    flat = np.flatnonzero(fits)
    if flat.size == 0:
        return None
    state_count, activation_count = problem.state.valid.shape[1], problem.activation.valid.shape[1]
    local_key, state_item, activation_item = np.unravel_index(flat, fits.shape)
    key = keys[local_key]
    ticks = plan_ticks(problem, key, state_item, activation_item)
    memory = constant_mib(problem)[key] + problem.state.memory_mib[key, state_item] + problem.activation.memory_mib[key, activation_item]
    rank = rank_of(problem, key, state_item, activation_item)
    parts = tuple(np.asarray(part, dtype=np.int64) for part in components(problem, key, ticks, memory, rank))
    best = _lexicographic_min(parts)
    return Choice(int(key[best]), int(state_item[best]), int(activation_item[best]), tuple(int(part[best]) for part in parts))


def solve_exhaustive(problem) -> Choice | None:
    best: Choice | None = None
    for start in range(0, problem.key_count, KEYS_PER_CHUNK):
        keys = np.arange(start, min(start + KEYS_PER_CHUNK, problem.key_count))
        choice = best_in_keys(problem, keys)
        if choice is not None and (best is None or choice.objective < best.objective):
            best = choice
    return best


def best_in_keys_by_bound(problem, keys: np.ndarray, lower: np.ndarray, chunk: int = 64) -> Choice | None:
    """``best_in_keys`` visiting keys in order of a lower bound of the primary objective and
    stopping once no remaining key can beat (or tie) the best found: exact, and fast when
    the bound is informative."""
    keys = keys[lower[keys] < np.iinfo(np.int64).max // 4]
    keys = keys[np.argsort(lower[keys], kind="stable")]
    best: Choice | None = None
    for start in range(0, keys.size, chunk):
        batch = keys[start : start + chunk]
        if best is not None and lower[batch[0]] > best.objective[0]:
            break
        choice = best_in_keys(problem, np.sort(batch))
        if choice is not None and (best is None or choice.objective < best.objective):
            best = choice
    return best
