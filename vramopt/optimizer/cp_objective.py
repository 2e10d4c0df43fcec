"""The CP-SAT objective of one training model: the primary objective, then the tie-breaks
that make the answer unique (fewer GPUs, less memory, then the fixed order of techniques).

The last tie-break is also the model's symmetry breaking: plans that are equal in every
measured quantity (say two ZeRO stages with the same memory and time) are ordered by their
rank in the fixed order, the same rank the exhaustive oracle uses, so CP-SAT and the oracle
return the same plan (DESIGN.md section 4: determinism).
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from vramopt.optimizer import cost_objective
from vramopt.optimizer.cp_variables import CpVariables
from vramopt.optimizer.objective import components, constant_mib, rank_of
from vramopt.optimizer.problem import Problem

OBJECTIVE_MAGNITUDE_LIMIT = 2**60
"""CP-SAT rejects objectives whose sum of |coefficient| could overflow int64."""


def stage_expressions(variables: CpVariables) -> list:
    """The objective's components as linear expressions, in lexicographic order.

    The rank tie-break uses each survivor's position in the fixed order (keys are kept
    in that order), which orders plans exactly as the oracle's global rank does.
    """
    problem = variables.problem
    key_terms = list(variables.key_literals.items())
    state_terms = list(variables.state_literals.items())
    activation_terms = list(variables.activation_literals.items())
    constants = constant_mib(problem)
    gpus = [(int(problem.keys["gpus"][key]), literal) for key, literal in key_terms]
    memory = (
        [(int(constants[key]), literal) for key, literal in key_terms]
        + [(int(problem.state.memory_mib[key, item]), literal) for (key, item), literal in state_terms]
        + [(int(problem.activation.memory_mib[key, item]), literal) for (key, item), literal in activation_terms]
    )
    activation_count = len(problem.activation.values)
    state_count = len(problem.state.values)
    position = {key: index for index, (key, _) in enumerate(key_terms)}
    rank = (
        [(position[key] * state_count * activation_count, literal) for key, literal in key_terms]
        + [(item * activation_count, literal) for (key, item), literal in state_terms]
        + [(item, literal) for (key, item), literal in activation_terms]
    )
    item_keys = [key for (key, _) in variables.state_literals] + [key for (key, _) in variables.activation_literals]
    ticks = [(int(problem.state.time_ticks[key, item]), literal) for (key, item), literal in state_terms] + [
        (int(problem.activation.time_ticks[key, item]), literal) for (key, item), literal in activation_terms
    ]
    objective = problem.space.objective
    if objective in cost_objective.COST_OBJECTIVES:
        ticks_with_keys = [(coefficient, literal, key) for (coefficient, literal), key in zip(ticks, item_keys)]
        return cost_objective.stage_terms(problem, key_terms, ticks_with_keys, gpus, memory, rank, _linear, _tie_breaks)
    if objective == "throughput":
        return [_linear(ticks)] + _tie_breaks([gpus, memory, rank])
    if objective == "per-gpu":
        scaled = [(int(problem.keys["gpus"][key]) * coefficient, literal) for (coefficient, literal), key in zip(ticks, item_keys)]
        return [_linear(scaled)] + _tie_breaks([gpus, memory, rank])
    return [_linear(gpus), _linear(ticks)] + _tie_breaks([memory, rank])


def _linear(terms: list) -> cp_model.LinearExpr:
    return cp_model.LinearExpr.weighted_sum([literal for _, literal in terms], [coefficient for coefficient, _ in terms])


def _tie_breaks(term_lists: list[list]) -> list:
    """One mixed-radix expression for all tie-breaks when it cannot overflow, else one each."""
    radices = [sum(abs(coefficient) for coefficient, _ in terms) + 1 for terms in term_lists]
    weights, weight = [], 1
    for radix in reversed(radices):
        weights.append(weight)
        weight *= radix
    weights.reverse()
    if weight >= OBJECTIVE_MAGNITUDE_LIMIT:
        return [_linear(terms) for terms in term_lists]
    combined = [(coefficient * factor, literal) for terms, factor in zip(term_lists, weights) for coefficient, literal in terms]
    return [_linear(combined)]


def objective_of(problem: Problem, key: int, state: int, activation: int) -> tuple[int, ...]:
    """The oracle's objective tuple of one plan (same integers, same order)."""
    ticks = int(problem.state.time_ticks[key, state]) + int(problem.activation.time_ticks[key, activation])
    memory = int(constant_mib(problem)[key]) + int(problem.state.memory_mib[key, state]) + int(problem.activation.memory_mib[key, activation])
    rank = int(rank_of(problem, key, state, activation))
    return tuple(int(part) for part in components(problem, key, ticks, memory, rank))
