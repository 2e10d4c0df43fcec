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
3. Exact key optima. Among the survivors, each key's best primary objective is computed
   exactly (``fitting_min_ticks``: its fastest state and activation pair within its budget,
   by a sorted scan of its activation items per state item; every primary objective is a
   non-decreasing function of the key and the step ticks). Only the keys reaching the best
   of them (``Reduced.ties``) can hold the optimum; CP-SAT decides the tie-breaks among them.

With the declared state x activation term (optimizer/interaction.py) the fronts are taken
under both values of the other group's factor, the greedy plans carry their term, and the
exact scan takes the fastest fitting activation item with and without recomputation apart,
adding the state item's term to the recomputing one; the lower bound needs no change (the
term is never negative).
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
    """Key indices left by the key bounds (step 2): the candidates the answer reports."""
    ties: np.ndarray
    """Key indices whose exact best primary objective is ``primary`` (step 3): the only keys
    that can hold the optimum, in the fixed order."""
    state_front: np.ndarray
    """[ties, state items] bool: each tie key's Pareto front."""
    activation_front: np.ndarray
    hint: tuple[int, int, int] | None
    """(key, state item, activation item) of a plan reaching ``primary`` (the first tie
    key's fastest fitting pair), for the solver's hint; None without ties."""
    primary: int | None = None
    """The optimum's primary objective (the first component of ``objective.components``)."""


EXACT_PROBE_KEYS = 64
"""Keys of least lower bound whose exact optima are computed first: the best of them bounds
the optimum from above, tighter than the greedy pairs, so that the exact scan runs on the
keys whose lower bound reaches it only (assumption: a few dozen, the keys the lower bound
ranks first, usually hold or nearly reach the optimum; any count is exact)."""


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


def fitting_min_ticks(problem, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per key of ``keys``: (the fewest step ticks of a well-formed state and activation
    pair within the key's memory budget, UNREACHABLE where none fits; the state item of that
    pair). With the interaction term, the fastest fitting recomputing and non-recomputing
    activation items are found apart and the state item's term added to the first."""
    state, activation = problem.state, problem.activation
    valid = activation.valid[keys]
    term = getattr(problem, "interaction", None)
    if term is None:
        best_activation = _fastest_fitting_activation(problem, keys, valid)
    else:
        plain = _fastest_fitting_activation(problem, keys, valid & ~term.recomputes[None, :])
        recomputing = _fastest_fitting_activation(problem, keys, valid & term.recomputes[None, :])
        recomputing = np.where(recomputing < UNREACHABLE, recomputing + term.time_ticks[keys], UNREACHABLE)
        best_activation = np.minimum(plain, recomputing)
    total = np.where(state.valid[keys] & (best_activation < UNREACHABLE), state.time_ticks[keys] + best_activation, UNREACHABLE)
    state_item = total.argmin(axis=1)
    return total[np.arange(len(keys)), state_item], state_item


def _fastest_fitting_activation(problem, keys: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """[keys, state items]: the fewest ticks of an activation item of ``valid`` within each
    state item's leftover budget (UNREACHABLE where none fits).

    Exact, without the [keys, states, activations] product: each key's activation items are
    sorted by memory with a running minimum of their ticks, so the fastest activation item
    within a state item's leftover budget is the running minimum at the count of items whose
    memory fits, found for every (key, state item) by one ``searchsorted`` over the keys' rows
    laid end to end (each row offset past the previous one's largest value)."""
    state, activation = problem.state, problem.activation
    count = len(keys)
    leftover = problem.budget_mib[keys][:, None] - state.memory_mib[keys]
    cap = max(int(leftover.max(initial=0)), 0) + 1  # above every leftover budget: never fits
    memory = np.where(valid, np.minimum(activation.memory_mib[keys], cap), cap)
    low = min(int(memory.min(initial=0)), 0)
    order = np.argsort(memory, axis=1, kind="stable")
    sorted_memory = np.take_along_axis(memory, order, axis=1)
    fastest = np.minimum.accumulate(np.take_along_axis(np.where(valid, activation.time_ticks[keys], UNREACHABLE), order, axis=1), axis=1)
    width = cap - low + 2
    offset = (np.arange(count, dtype=np.int64) * width - low)[:, None]
    leftover = np.maximum(leftover, low - 1)  # below every item: none fits, and the row stays inside its offset band
    items = activation.valid.shape[1]
    fitting = np.searchsorted((sorted_memory + offset).ravel(), (leftover + offset).ravel(), side="right").reshape(leftover.shape)
    fitting -= np.arange(count, dtype=np.int64)[:, None] * items
    best_activation = np.take_along_axis(fastest, np.maximum(fitting - 1, 0), axis=1)
    return np.where(fitting > 0, best_activation, UNREACHABLE)


def primary_of_ticks(problem, keys: np.ndarray, ticks: np.ndarray) -> np.ndarray:
    """Per key: the primary objective of a plan of ``ticks`` step ticks (UNREACHABLE where
    ``ticks`` is, or breaks the step-time bound); non-decreasing in ``ticks``, so at a key's
    ``fitting_min_ticks`` it is the key's exact best."""
    feasible = ticks < UNREACHABLE
    if problem.bound_ticks is not None:
        feasible &= ticks <= problem.bound_ticks
    objective = problem.space.objective
    reached = np.where(feasible, ticks, 0)
    if objective in cost_objective.COST_OBJECTIVES:
        primary = cost_objective.cost_per_tick(problem, keys) * reached
    elif objective == "throughput":
        primary = reached
    elif objective == "per-gpu":
        primary = problem.keys["gpus"][keys] * reached
    else:
        primary = problem.keys["gpus"][keys]
    return np.where(feasible, primary, UNREACHABLE)


def _fastest_fitting_pair(problem, key: int, state_item: int) -> tuple[int, int, int]:
    """(key, state item, the first fastest activation item that fits beside it)."""
    activation = problem.activation
    leftover = problem.budget_mib[key] - problem.state.memory_mib[key, state_item]
    allowed = activation.valid[key] & (activation.memory_mib[key] <= leftover)
    ticks = activation.time_ticks[key] + extra_ticks(problem, key, state_item, np.arange(activation.valid.shape[1]))
    return key, state_item, int(np.where(allowed, ticks, UNREACHABLE).argmin())


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

    items = (state.valid.shape[1], activation.valid.shape[1])
    if not feasible.any():
        return _without_ties(keys[:0], items)
    best_upper = upper_primary.min()
    survivors = keys[feasible & (lower_primary <= best_upper)]

    # The exact optima of the keys the lower bound ranks first bound the optimum from above;
    # only the keys whose lower bound reaches that need their own.
    ranked = survivors[np.argsort(lower_primary[survivors], kind="stable")]
    probe = ranked[:EXACT_PROBE_KEYS]
    probe_best = int(primary_of_ticks(problem, probe, fitting_min_ticks(problem, probe)[0]).min())
    if probe_best < UNREACHABLE:
        ranked = ranked[lower_primary[ranked] <= probe_best]
    scanned = np.sort(ranked)
    ticks, best_state = fitting_min_ticks(problem, scanned)
    primary = primary_of_ticks(problem, scanned, ticks)
    best = int(primary.min())
    if best >= UNREACHABLE:  # every fitting plan breaks the step-time bound
        return _without_ties(survivors, items)
    reaching = np.flatnonzero(primary == best)
    ties = scanned[reaching]
    hint = _fastest_fitting_pair(problem, int(ties[0]), int(best_state[reaching[0]]))
    return Reduced(survivors, ties, *group_fronts(problem, ties, pareto_front), hint, best)


def _without_ties(survivors: np.ndarray, items: tuple[int, int]) -> Reduced:
    """No key reaches a plan: an infeasible problem."""
    return Reduced(survivors, survivors[:0], np.zeros((0, items[0]), bool), np.zeros((0, items[1]), bool), None)
