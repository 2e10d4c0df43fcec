"""The CP-SAT objective of one training model: the primary objective, then the tie-breaks
that make the answer unique (fewer GPUs, less memory, then the fixed order of techniques).

The last tie-break is also the model's symmetry breaking: plans that are equal in every
measured quantity (say two ZeRO stages with the same memory and time) are ordered by their
rank in the fixed order, the same rank the exhaustive oracle uses, so CP-SAT and the oracle
return the same plan (DESIGN.md section 4: determinism).
"""

from __future__ import annotations

from functools import partial

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
    group_of = {literal.index: "key" for _, literal in key_terms}
    group_of.update({literal.index: "state" for _, literal in state_terms})
    group_of.update({literal.index: "activation" for _, literal in activation_terms})
    tie_breaks = partial(_tie_breaks, group_of=group_of)
    objective = problem.space.objective
    if objective in cost_objective.COST_OBJECTIVES:
        ticks_with_keys = [(coefficient, literal, key) for (coefficient, literal), key in zip(ticks, item_keys)]
        return cost_objective.stage_terms(problem, key_terms, ticks_with_keys, gpus, memory, rank, _linear, tie_breaks)
    if objective == "throughput":
        return [_linear(ticks)] + tie_breaks([gpus, memory, rank])
    if objective == "per-gpu":
        scaled = [(int(problem.keys["gpus"][key]) * coefficient, literal) for (coefficient, literal), key in zip(ticks, item_keys)]
        return [_linear(scaled)] + tie_breaks([gpus, memory, rank])
    return [_linear(gpus), _linear(ticks)] + tie_breaks([memory, rank])


def _linear(terms: list) -> cp_model.LinearExpr:
    return cp_model.LinearExpr.weighted_sum([literal for _, literal in terms], [coefficient for coefficient, _ in terms])


def _value_spread(terms: list, group_of: dict[int, str]) -> int:
    """Largest minus smallest value the expression takes over plans. A plan sets exactly one
    literal of each group (its key, and one state and one activation item of that key:
    cp_capacity.add_one_plan), so its value is one coefficient per group (0 for a group whose
    literals the expression leaves out), not the sum of every coefficient."""
    highest: dict[str, int] = {}
    lowest: dict[str, int] = {}
    for coefficient, literal in terms:
        group = group_of[literal.index]
        highest[group] = max(highest.get(group, 0), coefficient)
        lowest[group] = min(lowest.get(group, 0), coefficient)
    return sum(highest.values()) - sum(lowest.values())


def _tie_breaks(term_lists: list[list], group_of: dict[int, str]) -> list:
    """One mixed-radix expression for all tie-breaks when CP-SAT can hold it, else one each.

    Each weight exceeds the spread of everything weighted below it, so minimizing the sum
    orders plans lexicographically. The spreads are per plan (``_value_spread``); CP-SAT's own
    limit is on the sum of |coefficient| over all literals, checked on the combined terms.
    """
    weights, weight = [], 1
    for terms in reversed(term_lists):
        weights.append(weight)
        weight *= _value_spread(terms, group_of) + 1
    weights.reverse()
    magnitude = sum(abs(coefficient) * factor for terms, factor in zip(term_lists, weights) for coefficient, _ in terms)
    if magnitude >= OBJECTIVE_MAGNITUDE_LIMIT:
        return [_linear(terms) for terms in term_lists]
    combined = [(coefficient * factor, literal) for terms, factor in zip(term_lists, weights) for coefficient, literal in terms]
    return [_linear(combined)]


def objective_of(problem: Problem, key: int, state: int, activation: int) -> tuple[int, ...]:
    """The oracle's objective tuple of one plan (same integers, same order)."""
    ticks = int(problem.state.time_ticks[key, state]) + int(problem.activation.time_ticks[key, activation])
    memory = int(constant_mib(problem)[key]) + int(problem.state.memory_mib[key, state]) + int(problem.activation.memory_mib[key, activation])
    rank = int(rank_of(problem, key, state, activation))
    return tuple(int(part) for part in components(problem, key, ticks, memory, rank))
