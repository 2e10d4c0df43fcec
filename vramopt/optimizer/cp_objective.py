"""The CP-SAT objective of one training model: the primary objective, then the tie-breaks
that make the answer unique (fewer GPUs, less memory, then the fixed order of techniques).

The last tie-break is also the model's symmetry breaking: plans that are equal in every
measured quantity (say two ZeRO stages with the same memory and time) are ordered by their
rank in the fixed order, the same rank the exhaustive oracle uses, so CP-SAT and the oracle
return the same plan (DESIGN.md section 4: determinism).
"""

from __future__ import annotations

from functools import partial

import numpy as np
from ortools.sat.python import cp_model

from vramopt.optimizer import cost_objective
from vramopt.optimizer.cp_variables import CpVariables
from vramopt.optimizer.interaction import plan_ticks
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
    # Each coefficient family read from the tables in one gather per group.
    keys = [key for key, _ in key_terms]
    key_literals = [literal for _, literal in key_terms]
    state_keys, state_items = [key for (key, _), _ in state_terms], [item for (_, item), _ in state_terms]
    activation_keys, activation_items = [key for (key, _), _ in activation_terms], [item for (_, item), _ in activation_terms]
    state_literals = [literal for _, literal in state_terms]
    activation_literals = [literal for _, literal in activation_terms]
    constants = constant_mib(problem)
    gpus = list(zip(problem.keys["gpus"][keys].tolist(), key_literals))
    memory = (
        list(zip(constants[keys].tolist(), key_literals))
        + list(zip(problem.state.memory_mib[state_keys, state_items].tolist(), state_literals))
        + list(zip(problem.activation.memory_mib[activation_keys, activation_items].tolist(), activation_literals))
    )
    activation_count = len(problem.activation.values)
    state_count = len(problem.state.values)
    rank = (
        [(index * state_count * activation_count, literal) for index, literal in enumerate(key_literals)]
        + [(item * activation_count, literal) for item, literal in zip(state_items, state_literals)]
        + list(zip(activation_items, activation_literals))
    )
    interaction = getattr(variables, "interaction_terms", [])  # optimizer/interaction.py (absent on hand-built models)
    item_keys = state_keys + activation_keys + [key for _, _, key in interaction]
    ticks = (list(zip(problem.state.time_ticks[state_keys, state_items].tolist(), state_literals))
             + list(zip(problem.activation.time_ticks[activation_keys, activation_items].tolist(), activation_literals))
             + [(coefficient, literal) for coefficient, literal, _ in interaction])
    group_of = {literal.index: "key" for _, literal in key_terms}
    group_of.update({literal.index: "state" for _, literal in state_terms})
    group_of.update({literal.index: "activation" for _, literal in activation_terms})
    group_of.update({literal.index: "interaction" for _, literal, _ in interaction})
    tie_breaks = partial(_tie_breaks, group_of=group_of)
    objective = problem.space.objective
    if objective in cost_objective.COST_OBJECTIVES:
        ticks_with_keys = [(coefficient, literal, key) for (coefficient, literal), key in zip(ticks, item_keys)]
        return cost_objective.stage_terms(problem, key_terms, ticks_with_keys, gpus, memory, rank, _linear, tie_breaks)
    if objective == "throughput":
        return [_linear(ticks)] + tie_breaks([gpus, memory, rank])
    if objective == "per-gpu":
        scaled = [(count * coefficient, literal) for (coefficient, literal), count in zip(ticks, problem.keys["gpus"][item_keys].tolist())]
        return [_linear(scaled)] + tie_breaks([gpus, memory, rank])
    return [_linear(gpus), _linear(ticks)] + tie_breaks([memory, rank])


class StageObjective:
    """One stage's linear expression over literals, flattened as CP-SAT flattens it (equal
    literals merged, zero coefficients dropped, literals in index order) and written into the
    proto in bulk: ``cp.minimize`` appended the literals one Python call each."""

    __slots__ = ("terms", "indices", "coefficients")

    def __init__(self, terms: list) -> None:
        self.terms = terms
        indices = np.array([literal.index for _, literal in terms], dtype=np.int64)
        coefficients = np.array([coefficient for coefficient, _ in terms], dtype=np.int64)
        merged, position = np.unique(indices, return_inverse=True)
        summed = np.zeros(len(merged), dtype=np.int64)
        np.add.at(summed, position.reshape(-1), coefficients)
        kept = summed != 0
        self.indices, self.coefficients = merged[kept].tolist(), summed[kept].tolist()

    def expression(self) -> cp_model.LinearExpr:
        return cp_model.LinearExpr.weighted_sum([literal for _, literal in self.terms], [coefficient for coefficient, _ in self.terms])

    def minimize_in(self, cp: cp_model.CpModel) -> None:
        """What ``cp.minimize(self.expression())`` writes."""
        cp.clear_objective()
        objective = cp.proto.objective
        objective.vars.extend(self.indices)
        objective.scaling_factor = 1.0
        objective.offset = 0
        objective.coeffs.extend(self.coefficients)

    def fix_in(self, cp: cp_model.CpModel, value: int) -> None:
        """Add ``expression == value`` (a later stage keeps this one's optimum)."""
        linear = cp.proto.constraints.add().linear
        linear.vars.extend(self.indices)
        linear.coeffs.extend(self.coefficients)
        linear.domain.extend([value, value])


def _linear(terms: list) -> StageObjective:
    return StageObjective(terms)


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
    ticks = int(plan_ticks(problem, key, state, activation))
    memory = int(constant_mib(problem)[key]) + int(problem.state.memory_mib[key, state]) + int(problem.activation.memory_mib[key, activation])
    rank = int(rank_of(problem, key, state, activation))
    return tuple(int(part) for part in components(problem, key, ticks, memory, rank))
