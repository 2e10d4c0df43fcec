"""Solving the exact pack model in stages: the objective, then fewest whole GPUs at that
objective, then one canonical answer among the ties (the same on every run and worker
count). A greedy answer is the floor."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from vramopt.errors import InputError
from vramopt.optimizer.pack_model import PackModel, build_model, read, run_solver
from vramopt.optimizer.pack_value import Values, objective_of
from vramopt.optimizer.solve import STATUS_NAMES

PRIMARY_SHARE = 0.7
"""Share of the remaining time the first stage may use; the rest is for the tie-breaks."""


@dataclass(frozen=True, slots=True)
class Result:
    assignment: dict
    """{job: (option, [node indices])}"""
    bound: float | None
    """An upper bound of the integer objective over the built options (None: none known)."""
    proven: bool
    """The assignment is optimal over the built options."""
    cut: bool = False
    """The time limit stopped the search (rather than a proof or an exhausted choice)."""


def solve_exact(jobs, nodes, options, values: Values, floor: dict, deadline: float, workers: int) -> Result:
    if deadline <= time.perf_counter():
        return Result(floor, None, False, cut=True)
    # The greedy floor is not a hint: measured, a hint of it made CP-SAT slower on the
    # decomposition's relaxation and no better here; it bounds the answer from below.
    model = build_model(jobs, nodes, options, values)
    remaining = deadline - time.perf_counter()
    if remaining <= 0:
        return Result(floor, None, False, cut=True)
    status, solver = run_solver(model.cp, remaining * PRIMARY_SHARE, workers)
    if status == cp_model.UNKNOWN:
        return Result(floor, None, False, cut=True)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise InputError(f"pack: the solver found no assignment ({STATUS_NAMES.get(status, 'unknown')})")
    value, bound = int(round(solver.objective_value)), solver.best_objective_bound
    assignment = read(model, solver)
    if objective_of(values, options, floor)[0] > value:
        return Result(floor, bound, False, cut=True)
    if status != cp_model.OPTIMAL:
        return Result(assignment, bound, False, cut=True)
    remaining = deadline - time.perf_counter()
    if remaining <= 0.01:
        return Result(assignment, bound, True)
    # Fewest whole GPUs among the answers of this value.
    model.cp.add(model.value == value)
    model.cp.clear_hints()
    for literal in list(model.admitted.values()) + list(model.placements.values()):
        model.cp.add_hint(literal, solver.boolean_value(literal))
    model.cp.minimize(model.gpus_used)
    second, solver = run_solver(model.cp, remaining, workers)
    if second == cp_model.OPTIMAL:
        return Result(_canonical(model, read(model, solver), int(round(solver.objective_value)), deadline), bound, True)
    if second == cp_model.FEASIBLE:
        return Result(read(model, solver), bound, True)
    return Result(assignment, bound, True)


def _canonical(model: PackModel, assignment: dict, gpus: int, deadline: float) -> dict:
    """Among the optimal answers (several whenever nodes or options tie), the one that
    prefers low-numbered nodes and options, found by one single-threaded search on a model
    without hints: the same request gives the same placement on every run and worker count."""
    model.cp.add(model.gpus_used == gpus)
    model.cp.clear_hints()
    model.cp.minimize(sum((index + 1) * literal for index, literal in enumerate(model.placements.values())))
    status, solver = run_solver(model.cp, max(deadline - time.perf_counter(), 0.01), 1)
    return read(model, solver) if status == cp_model.OPTIMAL else assignment
