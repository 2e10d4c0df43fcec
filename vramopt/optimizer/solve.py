"""Build the CP-SAT model over the reduced problem, solve it, and return the choice.

The model is built in four parts, each in its own module: the variables and the channelling
of each technique's choice literals (cp_variables.py), the constraints that make one plan
and keep its memory within the headroom (cp_capacity.py), and the lexicographic objective
with the tie-breaks that also break symmetry between equal plans (cp_objective.py). The
objective is solved in stages: the primary objective first, then each tie-break with the
previous stages' optima fixed (DESIGN.md section 4: determinism).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from vramopt.optimizer.cancel import check_cancelled, run_solver
from vramopt.optimizer.cp_capacity import add_memory_headroom, add_one_plan, add_throughput_target
from vramopt.optimizer.cp_objective import objective_of, stage_expressions
from vramopt.optimizer.cp_variables import CpVariables
from vramopt.optimizer.oracle import Choice
from vramopt.optimizer.problem import Problem
from vramopt.optimizer.prune import reduce

STATUS_NAMES = {
    cp_model.OPTIMAL: "optimal",
    cp_model.FEASIBLE: "feasible",
    cp_model.INFEASIBLE: "infeasible",
    cp_model.MODEL_INVALID: "model_invalid",
    cp_model.UNKNOWN: "timed_out",
}


@dataclass(frozen=True, slots=True)
class CpOutcome:
    choice: Choice | None
    status: str
    gap: float
    """Relative gap of the primary objective (0 when proven optimal)."""
    candidates: int
    """Keys left after exact pruning (what CP-SAT searched over)."""
    variables: int


def build_model(problem: Problem, reduced) -> CpVariables:
    """The CP model of one reduced problem: variables, constraint families, the hint."""
    model = CpVariables(problem, reduced.keys, reduced.state_front, reduced.activation_front)
    add_one_plan(model)
    add_memory_headroom(model)
    add_throughput_target(model)
    model.add_hint(reduced.hint)
    return model


def solve_cp(problem: Problem, time_limit_s: float, workers: int) -> CpOutcome:
    started = time.perf_counter()
    reduced = reduce(problem)
    check_cancelled()
    if reduced.keys.size == 0:
        return CpOutcome(None, "infeasible", 0.0, 0, 0)
    model = build_model(problem, reduced)
    stages = stage_expressions(model)
    status = "optimal"
    gap = 0.0
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    # Probing (presolve's tentative fixing of each Boolean) proves nothing here that the
    # exactly-one structure and the per-key budgets do not already give, and it was most of
    # the solve: measured by benchmarks/cp_sat_parameters.py, best of 3, 2 cores: primary solve
    # 2t/256 GPUs 617 -> 109 ms, 2t/1,024 332 -> 69 ms, 70b/16 89 -> 33 ms, same optima.
    solver.parameters.cp_model_probing_level = 0
    for index, expression in enumerate(stages):
        check_cancelled()
        remaining = time_limit_s - (time.perf_counter() - started)
        if remaining <= 0:
            if index == 0:
                return CpOutcome(None, "timed_out", 1.0, len(reduced.keys), model.count())
            status = "feasible" if status == "optimal" else status
            break
        model.cp.minimize(expression)
        solver.parameters.max_time_in_seconds = remaining
        result = run_solver(solver, model.cp)  # raises Interrupted rather than report a stopped search
        if result not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if index == 0:
                return CpOutcome(None, STATUS_NAMES.get(result, "unknown"), 0.0 if result == cp_model.INFEASIBLE else 1.0, len(reduced.keys), model.count())
            status = "feasible"
            break
        value = int(round(solver.objective_value))
        if result == cp_model.FEASIBLE:
            status = "feasible"
            if index == 0:
                bound = solver.best_objective_bound
                gap = abs(value - bound) / max(abs(value), 1)
        key, state, activation = model.chosen(solver)
        choice = Choice(key, state, activation, objective_of(problem, key, state, activation))
        # Fix this stage's optimum, then hint the solution for the next stage.
        model.cp.add(expression == value)
        model.hint_solution(solver)
        if result == cp_model.FEASIBLE:
            break
    return CpOutcome(choice, status, gap, len(reduced.keys), model.count())
