"""The Pareto front over (tokens/s up, GPUs down, peak memory per GPU down).

Exact method (DESIGN.md section 4 asks for an exact front, not sampling): the search space
is the finite table of candidates ``problem.Problem`` holds, so its non-dominated subset is
computed exactly by enumeration over the same integer tables the solver reads:
1. per key, only the group-dominance fronts can contribute (a dominated state or activation
   item is weakly beaten by its dominator in every objective; ties keep the lower rank);
2. per key (fixed GPU count) the 2-D front of the feasible pairs over (ticks, memory);
3. across keys a 3-D sweep: points in order of ticks, GPUs, memory, rank; a point is kept
   unless an earlier one has no more GPUs and no more memory (a prefix minimum over GPU
   counts in a Fenwick tree).
``verify_with_cp_sat`` certifies every front point with CP-SAT: maximizing tokens/s with at
most the point's GPUs and memory must return the point's own objective values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from vramopt.optimizer.objective import constant_mib, rank_of
from vramopt.optimizer.oracle import Choice
from vramopt.optimizer.prune import pareto_front


@dataclass(frozen=True, slots=True)
class FrontPoint:
    choice: Choice
    ticks: int
    gpus: int
    memory_mib: int


def _key_front(problem, key: int, state_items: np.ndarray, activation_items: np.ndarray) -> list[FrontPoint]:
    state, activation = problem.state, problem.activation
    memory = state.memory_mib[key, state_items][:, None] + activation.memory_mib[key, activation_items][None, :]
    fits = memory <= problem.budget_mib[key]
    if not fits.any():
        return []
    state_index, activation_index = np.nonzero(fits)
    s, a = state_items[state_index], activation_items[activation_index]
    ticks = state.time_ticks[key, s] + activation.time_ticks[key, a]
    memory = memory[state_index, activation_index]
    rank = rank_of(problem, key, s, a)
    order = np.lexsort((rank, memory, ticks))
    kept, best_memory = [], None
    constant = int(constant_mib(problem)[key])
    gpus = int(problem.keys["gpus"][key])
    for index in order:
        if best_memory is None or memory[index] < best_memory:
            best_memory = memory[index]
            choice = Choice(key, int(s[index]), int(a[index]), (int(ticks[index]), gpus, int(memory[index]) + constant, int(rank[index])))
            kept.append(FrontPoint(choice, int(ticks[index]), gpus, int(memory[index]) + constant))
    return kept


def exact_front(problem) -> list[FrontPoint]:
    """Every non-dominated candidate, in order of GPUs, then tokens/s (best first)."""
    keys = np.arange(problem.key_count)
    state_front = pareto_front(problem.state, keys)
    activation_front = pareto_front(problem.activation, keys)
    candidates: list[FrontPoint] = []
    for key in keys:
        state_items = np.flatnonzero(state_front[key])
        activation_items = np.flatnonzero(activation_front[key])
        if state_items.size and activation_items.size:
            candidates.extend(_key_front(problem, int(key), state_items, activation_items))
    candidates.sort(key=lambda point: (point.ticks, point.gpus, point.memory_mib, point.choice.objective[3]))
    levels = sorted({point.gpus for point in candidates})
    position = {gpus: index + 1 for index, gpus in enumerate(levels)}
    tree = [np.iinfo(np.int64).max] * (len(levels) + 1)

    def prefix_min(index: int) -> int:
        best = np.iinfo(np.int64).max
        while index > 0:
            best = min(best, tree[index])
            index -= index & -index
        return best

    def update(index: int, value: int) -> None:
        while index < len(tree):
            tree[index] = min(tree[index], value)
            index += index & -index

    front = []
    for point in candidates:
        index = position[point.gpus]
        if prefix_min(index) <= point.memory_mib:
            continue
        front.append(point)
        update(index, point.memory_mib)
    front.sort(key=lambda point: (point.gpus, point.ticks, point.memory_mib))
    return front


def verify_with_cp_sat(problem, front: list[FrontPoint], workers: int = 1) -> list[FrontPoint]:
    """Front points CP-SAT does not confirm (empty when the front is exact)."""
    from vramopt.optimizer.solve import solve_cp

    mismatches = []
    for point in front:
        budget = np.minimum(problem.budget_mib, point.memory_mib - constant_mib(problem))
        keep = problem.keys["gpus"] <= point.gpus
        restricted = replace(problem, budget_mib=np.where(keep, budget, -1), space=replace(problem.space, objective="throughput"), bound_ticks=None)
        outcome = solve_cp(restricted, time_limit_s=30.0, workers=workers)
        found = outcome.choice
        if found is None or found.objective[:3] != (point.ticks, point.gpus, point.memory_mib):
            mismatches.append(point)
    return mismatches
