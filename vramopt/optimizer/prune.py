"""Exact reductions before CP-SAT: group dominance and key bounds.

1. Dominance inside a group. For a fixed key the cost model is separable, so a state item
   that needs at least as much memory and at least as many ticks as another (and comes
   later in the fixed order when both tie) can be swapped for the other in any plan without
   making it worse in any component of the lexicographic objective. Only each group's
   Pareto front of (memory, ticks) survives.
2. Key bounds. A key's primary objective is at least what its fastest state and activation
   items give together, memory ignored (the lower bound). A feasible pair found greedily
   gives an upper bound. Keys whose lower bound exceeds the best upper bound cannot hold
   the optimum (ties are kept, for the tie-break).

With the declared state x activation term (optimizer/interaction.py) the fronts are taken
under both values of the other group's factor, and the greedy plans carry their term; the
lower bound needs no change (the term is never negative).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vramopt.optimizer import cost_objective
from vramopt.optimizer.interaction import extra_ticks, group_fronts
from vramopt.optimizer.tables import ItemTable
from vramopt.optimizer.ticks import UNREACHABLE


@dataclass(frozen=True, slots=True)
class Reduced:
    keys: np.ndarray
    """Surviving key indices."""
    state_front: np.ndarray
    """[surviving keys, state items] bool."""
    activation_front: np.ndarray
    hint: tuple[int, int, int] | None
    """(key, state item, activation item) of the best greedy plan, for the solver's hint."""


def pareto_front(table: ItemTable, keys: np.ndarray) -> np.ndarray:
    valid = table.valid[keys]
    memory = np.where(valid, table.memory_mib[keys], UNREACHABLE)
    ticks = np.where(valid, table.time_ticks[keys], UNREACHABLE)
    item_order = np.broadcast_to(np.arange(valid.shape[1]), valid.shape)
    order = np.lexsort((item_order, ticks, memory), axis=1)
    sorted_ticks = np.take_along_axis(ticks, order, axis=1)
    sorted_valid = np.take_along_axis(valid, order, axis=1)
    best_before = np.minimum.accumulate(sorted_ticks, axis=1)
    best_before = np.concatenate([np.full((len(keys), 1), UNREACHABLE + 1), best_before[:, :-1]], axis=1)
    keep_sorted = sorted_valid & (sorted_ticks < best_before)
    keep = np.zeros_like(valid)
    np.put_along_axis(keep, order, keep_sorted, axis=1)
    return keep


def _best_under_budget(memory, ticks, valid, budget) -> tuple[np.ndarray, np.ndarray]:
    """Per key: the fewest ticks among valid items with memory <= budget, and which item."""
    allowed = valid & (memory <= budget[:, None])
    masked = np.where(allowed, ticks, UNREACHABLE)
    item = masked.argmin(axis=1)
    return masked[np.arange(len(item)), item], item


def lower_bounds(problem) -> np.ndarray:
    """Per key, a lower bound of the primary objective (UNREACHABLE where nothing fits)."""
    state, activation = problem.state, problem.activation
    state_memory = np.where(state.valid, state.memory_mib, UNREACHABLE).min(axis=1)
    activation_memory = np.where(activation.valid, activation.memory_mib, UNREACHABLE).min(axis=1)
    feasible = state_memory + activation_memory <= problem.budget_mib
    ticks = np.where(state.valid, state.time_ticks, UNREACHABLE).min(axis=1) + np.where(
        activation.valid, activation.time_ticks, UNREACHABLE
    ).min(axis=1)
    gpus = problem.keys["gpus"]
    objective = problem.space.objective
    if objective in cost_objective.COST_OBJECTIVES:
        feasible, primary, _ = cost_objective.primary_bounds(problem, ticks, ticks, feasible)
    elif objective == "throughput":
        primary = ticks
    elif objective == "per-gpu":
        primary = gpus * ticks
    else:
        feasible = feasible & (ticks <= problem.bound_ticks)
        primary = gpus
    return np.where(feasible, primary, UNREACHABLE)


def reduce(problem) -> Reduced:
    keys = np.arange(problem.key_count)
    state, activation = problem.state, problem.activation
    budget = problem.budget_mib
    gpus = problem.keys["gpus"]

    state_memory = np.where(state.valid, state.memory_mib, UNREACHABLE)
    activation_memory = np.where(activation.valid, activation.memory_mib, UNREACHABLE)
    state_min_item = state_memory.argmin(axis=1)
    activation_min_item = activation_memory.argmin(axis=1)
    state_min = state_memory[keys, state_min_item]
    activation_min = activation_memory[keys, activation_min_item]
    feasible = state_min + activation_min <= budget

    state_ticks = np.where(state.valid, state.time_ticks, UNREACHABLE)
    activation_ticks = np.where(activation.valid, activation.time_ticks, UNREACHABLE)
    lower = state_ticks.min(axis=1) + activation_ticks.min(axis=1)

    # Two greedy feasible plans per key: the leanest state item with the fastest activation
    # item that still fits, and the other way round.
    fast_activation, activation_item = _best_under_budget(activation.memory_mib, activation.time_ticks, activation.valid, budget - state_min)
    fast_state, state_item = _best_under_budget(state.memory_mib, state.time_ticks, state.valid, budget - activation_min)
    first = state_ticks[keys, state_min_item] + fast_activation
    second = fast_state + activation_ticks[keys, activation_min_item]
    # The greedy pairs' own interaction ticks (optimizer/interaction.py), where they are plans.
    first = first + np.where(first < UNREACHABLE, extra_ticks(problem, keys, state_min_item, activation_item), 0)
    second = second + np.where(second < UNREACHABLE, extra_ticks(problem, keys, state_item, activation_min_item), 0)
    upper = np.where(feasible, np.minimum(first, second), UNREACHABLE)
    use_first = first <= second

    objective = problem.space.objective
    if objective in cost_objective.COST_OBJECTIVES:
        feasible, lower_primary, upper_primary = cost_objective.primary_bounds(problem, lower, upper, feasible)
    elif objective == "throughput":
        lower_primary, upper_primary = lower, upper
    elif objective == "per-gpu":
        lower_primary, upper_primary = gpus * lower, np.where(feasible, gpus * upper, UNREACHABLE)
    else:
        bound = problem.bound_ticks
        feasible = feasible & (lower <= bound)
        lower_primary = gpus
        upper_primary = np.where(feasible & (upper <= bound), gpus, UNREACHABLE)

    if not feasible.any():
        return Reduced(keys[:0], np.zeros((0, state.valid.shape[1]), bool), np.zeros((0, activation.valid.shape[1]), bool), None)
    best_upper = upper_primary.min()
    survivors = keys[feasible & (lower_primary <= best_upper)]

    hint = None
    if best_upper < UNREACHABLE:
        # Among keys reaching the best greedy value, the first in the fixed order.
        key = int(keys[upper_primary == best_upper][0])
        if use_first[key]:
            hint = (key, int(state_min_item[key]), int(activation_item[key]))
        else:
            hint = (key, int(state_item[key]), int(activation_min_item[key]))
    return Reduced(survivors, *group_fronts(problem, survivors, pareto_front), hint)
