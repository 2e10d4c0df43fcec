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


INCUMBENT_BOUNDED = ("throughput", "per-gpu")
"""Objectives whose only constraints are the plan's and the memory's, which the pruning's
greedy plan keeps: its value bounds the optimum (min-gpus' target and the cost objectives'
deadlines are constraints it is not checked against here)."""


def hint_value(model: CpVariables, hint) -> int | None:
    """The current objective's value at the pruning's greedy plan (None without one)."""
    if hint is None:
        return None
    key, state, activation = hint
    literals = (model.key_literals.get(key), model.state_literals.get((key, state)), model.activation_literals.get((key, activation)))
    if any(literal is None for literal in literals):
        return None
    objective = model.cp.proto.objective
    coefficient = dict(zip(objective.vars, objective.coeffs))
    recomputes = model.problem.interaction is not None and model.problem.interaction.recomputes[activation]
    if recomputes and (key, state) in model.interaction_literals:  # the hint's own interaction term
        literals += (model.interaction_literals[(key, state)],)
    return int(objective.offset) + sum(coefficient.get(literal.index, 0) for literal in literals)


def fix_unreachable(model: CpVariables, value: int) -> None:
    """Fix to 0 every literal that is in no plan reaching the stage's optimum ``value``.

    A plan sets one key literal and one state and one activation literal of that key
    (cp_capacity.add_one_plan), so the least the objective (read back from the proto) takes
    through a literal is its coefficient plus the least coefficients of the plan's other two
    groups; above ``value``, the literal is 0 in every solution of the later stages (bound
    fixing: exact, and it leaves the tie-break stages only the plans of the optimum)."""
    objective = model.cp.proto.objective
    coefficient = dict(zip(objective.vars, objective.coeffs))
    literals = {literal.index for literal in model.all_literals()}
    if not coefficient.keys() <= literals:
        return  # an objective over other variables (or negated literals): no bound from the groups alone
    reachable = value - int(objective.offset)
    variables = model.cp.proto.variables
    for key, literal in model.key_literals.items():
        states, activations = model.items_of_key[key]
        key_part = coefficient.get(literal.index, 0)
        state_parts = [coefficient.get(state.index, 0) for _, state in states]
        activation_parts = [coefficient.get(activation.index, 0) for _, activation in activations]
        least_state, least_activation = min(state_parts, default=0), min(activation_parts, default=0)
        unreachable = []
        if key_part + least_state + least_activation > reachable:
            unreachable = [literal] + [state for _, state in states] + [activation for _, activation in activations]
        else:
            unreachable = [state for (_, state), part in zip(states, state_parts) if key_part + part + least_activation > reachable]
            unreachable += [activation for (_, activation), part in zip(activations, activation_parts)
                            if key_part + least_state + part > reachable]
        for fixed in unreachable:
            domain = variables[fixed.index].domain
            domain.clear()
            domain.extend([0, 0])


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
        expression.minimize_in(model.cp)
        if index == 0 and problem.space.objective in INCUMBENT_BOUNDED:
            incumbent = hint_value(model, reduced.hint)
            if incumbent is not None:
                fix_unreachable(model, incumbent)
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
        expression.fix_in(model.cp, value)
        if index + 1 < len(stages):
            fix_unreachable(model, value)
        model.hint_solution(solver)
        if result == cp_model.FEASIBLE:
            break
    return CpOutcome(choice, status, gap, len(reduced.keys), model.count())
