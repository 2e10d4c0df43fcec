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
most the point's GPUs and memory must return the point's own objective values. That check
reads the front's own table, so it cannot see a plan the table lacks; ``verify_gpu_counts``
does not share it: per GPU count, the request pinned to that count is built and solved
afresh, and its fastest plan must be matched or dominated by a front point.

A serving front is built from a table that keeps every GPU count (``prune_counts=False``):
the pruning that keeps only each replica layout's largest count is exact for max tokens/s
but drops every smaller deployment from a front.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from vramopt.constraints.parallelism import gpu_counts
from vramopt.constraints.technique import DomainContext
from vramopt.errors import InputError
from vramopt.optimizer.domains import domain
from vramopt.optimizer.objective import constant_mib, rank_of
from vramopt.optimizer.oracle import Choice
from vramopt.optimizer.interaction import group_fronts, plan_seconds, plan_ticks
from vramopt.optimizer.prune import pareto_front
from vramopt.types import PRECISIONS, TrainingWorkload

MAX_VERIFIED_COUNTS = 1024
"""--verify solves once per GPU count; a space with more counts is refused rather than run
for hours (narrow it with --max-gpus or --allow gpus=...)."""


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
    ticks = plan_ticks(problem, key, s, a)
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
    state_front, activation_front = group_fronts(problem, keys, pareto_front)
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


def _time_s(problem, choice: Choice) -> float:
    """Seconds of the chosen candidate in floating point (the ticks' unrounded source)."""
    return float(plan_seconds(problem, choice.key, choice.state_item, choice.activation_item))


def searched_gpu_counts(problem) -> list[int]:
    """The GPU counts the request allows, from its GPU types, --max-gpus, --whole-nodes and
    any gpus pin/allow/forbid: the same domain the tables are built from, not the tables."""
    space, workload = problem.space, problem.workload
    counts: set[int] = set()
    for gpu in problem.gpus:
        context = DomainContext(
            layers=problem.model.layers, gpus_per_node=gpu.node.gpus_per_node, max_gpus=space.max_gpus,
            global_batch=workload.global_batch if isinstance(workload, TrainingWorkload) else 1,
            allow_tp_across_nodes=space.allow_tp_across_nodes, allow_fp4=space.allow_fp4,
            supported_precisions=tuple(name for name in PRECISIONS if gpu.supports(name)), kind=workload.kind,
        )
        default = gpu_counts(space.max_gpus, gpu.node.gpus_per_node, space.whole_nodes)
        counts.update(count for count in domain("gpus", context, problem.choices, default) if count <= space.max_gpus)
    return sorted(counts)


def verify_gpu_counts(problem, front: list[FrontPoint], workers: int = 1) -> list[str]:
    """Per GPU count N, the request pinned to N GPUs is built and solved on its own (its own
    tables and pruning, not the front's table); its fastest plan must be matched or
    dominated by a front point: no more GPUs, no more MiB per GPU, and no slower, up to one
    tick of each table's rounding. Returns what is not confirmed, one sentence per count."""
    from vramopt.optimizer.problem import build_problem
    from vramopt.optimizer.solve import solve_cp

    counts = searched_gpu_counts(problem)
    if len(counts) > MAX_VERIFIED_COUNTS:
        raise InputError(f"--verify solves once per GPU count: {len(counts):,} counts are more than {MAX_VERIFIED_COUNTS:,}; "
                         "narrow them with --max-gpus or --allow gpus=...")
    points = [(point.gpus, point.memory_mib, _time_s(problem, point.choice)) for point in front]
    front_counts = {point.gpus for point in front}
    problems = []
    for count in counts:
        space = replace(problem.space, pin={**problem.space.pin, "gpus": str(count)}, objective="throughput")
        try:
            pinned = build_problem(problem.workload, space)
        except InputError as error:
            # No layout uses exactly this many GPUs; a count the front holds must build.
            if count in front_counts:
                problems.append(f"{count} GPUs: the pinned request is refused ({error})")
            continue
        outcome = solve_cp(pinned, time_limit_s=problem.space.time_limit_s, workers=workers)
        if outcome.status not in ("optimal", "infeasible"):
            problems.append(f"{count} GPUs: the pinned solve ended {outcome.status}, not proven")
            continue
        if outcome.choice is None:
            continue
        seconds = _time_s(pinned, outcome.choice)
        memory_mib = outcome.choice.objective[2]
        slack_s = 2.0 * (problem.tick_s + pinned.tick_s)
        if not any(gpus <= count and memory <= memory_mib and time <= seconds + slack_s for gpus, memory, time in points):
            problems.append(f"{count} GPUs: a plan of {memory_mib:,} MiB per GPU at {seconds:.6g} s per step or token "
                            "is matched by no front point")
    return problems
