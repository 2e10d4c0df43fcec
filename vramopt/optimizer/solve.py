"""Assemble the CP-SAT model over the reduced problem, solve it, and return the choice.

Variables (named after what they mean):
- ``key[gpus=..,tp=..,...]``: the layout/precision/micro-batch row in use (exactly one);
- ``state[k,zero=..,offload=..,grad=..]`` and ``activation[k,ckpt=..,...]``: one item of each
  group for the key in use (each sums to its key's literal);
- ``choice[field=value]``: one per technique value, channelled by the technique modules;
- the headroom rule per key (``constraints.headroom``).
The lexicographic objective is solved in stages: the primary objective first, then each
tie-break with the previous stages' optima fixed (DESIGN.md section 4: determinism).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from vramopt.constraints import registry
from vramopt.constraints.headroom import encode_memory_budget
from vramopt.constraints.technique import ChoiceVariables, encode_choices
from vramopt.optimizer import cost_objective
from vramopt.optimizer.cancel import check_cancelled, run_solver
from vramopt.optimizer.objective import components, constant_mib, rank_of
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
    choices: ChoiceVariables | None = None


class _Model:
    """The CP model of one reduced problem and the literals needed to read it back."""

    def __init__(self, problem: Problem, keys: np.ndarray, state_front: np.ndarray, activation_front: np.ndarray) -> None:
        self.problem = problem
        self.cp = cp_model.CpModel()
        self.key_literals: dict[int, cp_model.IntVar] = {}
        self.state_literals: dict[tuple[int, int], cp_model.IntVar] = {}
        self.activation_literals: dict[tuple[int, int], cp_model.IntVar] = {}
        cp = self.cp
        for row, key in enumerate(keys):
            key = int(key)
            values = problem.key_values(key)
            literal = cp.new_bool_var("key[" + ",".join(f"{name}={value}" for name, value in values.items()) + "]")
            self.key_literals[key] = literal
            states = [
                (item, cp.new_bool_var(f"state[{key},{_label(problem.state.values[item])}]"))
                for item in np.flatnonzero(state_front[row])
            ]
            activations = [
                (item, cp.new_bool_var(f"activation[{key},{_label(problem.activation.values[item])}]"))
                for item in np.flatnonzero(activation_front[row])
            ]
            for item, state_literal in states:
                self.state_literals[key, int(item)] = state_literal
            for item, activation_literal in activations:
                self.activation_literals[key, int(item)] = activation_literal
            cp.add(sum(state for _, state in states) == literal)
            cp.add(sum(activation for _, activation in activations) == literal)
            encode_memory_budget(
                cp,
                literal,
                [(state, int(problem.state.memory_mib[key, item])) for item, state in states],
                [(activation, int(problem.activation.memory_mib[key, item])) for item, activation in activations],
                int(problem.budget_mib[key]),
                name=str(key),
            )
        cp.add_exactly_one(list(self.key_literals.values()))
        self.choices = self._channel_techniques()
        if problem.bound_ticks is not None:
            step_ticks = sum(
                int(problem.state.time_ticks[key, item]) * literal for (key, item), literal in self.state_literals.items()
            ) + sum(int(problem.activation.time_ticks[key, item]) * literal for (key, item), literal in self.activation_literals.items())
            cp.add(step_ticks <= problem.bound_ticks).with_name("throughput_target")

    def _channel_techniques(self) -> ChoiceVariables:
        problem = self.problem
        variables = ChoiceVariables()
        key_groups: dict[str, dict] = defaultdict(lambda: defaultdict(list))
        for key, literal in self.key_literals.items():
            for field, value in problem.key_values(key).items():
                key_groups[field][value].append(literal)
        state_groups: dict[str, dict] = defaultdict(lambda: defaultdict(list))
        for (key, item), literal in self.state_literals.items():
            values = dict(problem.state.values[item])
            if values.get("grad_comm_precision") == "same":
                values["grad_comm_precision"] = problem.key_values(key)["precision"]
            for field, value in values.items():
                state_groups[field][value].append(literal)
        activation_groups: dict[str, dict] = defaultdict(lambda: defaultdict(list))
        for (key, item), literal in self.activation_literals.items():
            for field, value in problem.activation.values[item].items():
                activation_groups[field][value].append(literal)
        for technique in registry.TECHNIQUES:
            groups = {"key": key_groups, "state": state_groups, "activation": activation_groups}[technique.group]
            encode_choices(self.cp, technique, groups[technique.field], variables)
        return variables

    def stage_expressions(self) -> list:
        """The objective's components as linear expressions, in lexicographic order.

        The rank tie-break uses each survivor's position in the fixed order (keys are kept
        in that order), which orders plans exactly as the oracle's global rank does.
        """
        problem = self.problem
        key_terms = list(self.key_literals.items())
        state_terms = list(self.state_literals.items())
        activation_terms = list(self.activation_literals.items())
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
        item_keys = [key for (key, _) in self.state_literals] + [key for (key, _) in self.activation_literals]
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

    def read(self, solver: cp_model.CpSolver) -> Choice:
        key = next(key for key, literal in self.key_literals.items() if solver.boolean_value(literal))
        state = next(item for (k, item), literal in self.state_literals.items() if k == key and solver.boolean_value(literal))
        activation = next(item for (k, item), literal in self.activation_literals.items() if k == key and solver.boolean_value(literal))
        return Choice(key, state, activation, objective_of(self.problem, key, state, activation))

    def add_hint(self, hint: tuple[int, int, int] | None) -> None:
        if hint is None or hint[0] not in self.key_literals:
            return
        key, state, activation = hint
        if (key, state) not in self.state_literals or (key, activation) not in self.activation_literals:
            return
        for literal_key, literal in self.key_literals.items():
            self.cp.add_hint(literal, literal_key == key)


OBJECTIVE_MAGNITUDE_LIMIT = 2**60
"""CP-SAT rejects objectives whose sum of |coefficient| could overflow int64."""


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


def _label(values: dict) -> str:
    return ",".join(f"{name}={value}" for name, value in values.items())


def objective_of(problem: Problem, key: int, state: int, activation: int) -> tuple[int, ...]:
    """The oracle's objective tuple of one plan (same integers, same order)."""
    ticks = int(problem.state.time_ticks[key, state]) + int(problem.activation.time_ticks[key, activation])
    memory = int(constant_mib(problem)[key]) + int(problem.state.memory_mib[key, state]) + int(problem.activation.memory_mib[key, activation])
    rank = int(rank_of(problem, key, state, activation))
    return tuple(int(part) for part in components(problem, key, ticks, memory, rank))


def solve_cp(problem: Problem, time_limit_s: float, workers: int) -> CpOutcome:
    started = time.perf_counter()
    reduced = reduce(problem)
    check_cancelled()
    if reduced.keys.size == 0:
        return CpOutcome(None, "infeasible", 0.0, 0, 0)
    model = _Model(problem, reduced.keys, reduced.state_front, reduced.activation_front)
    model.add_hint(reduced.hint)
    stages = model.stage_expressions()
    status = "optimal"
    gap = 0.0
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    for index, expression in enumerate(stages):
        check_cancelled()
        remaining = time_limit_s - (time.perf_counter() - started)
        if remaining <= 0:
            if index == 0:
                return CpOutcome(None, "timed_out", 1.0, len(reduced.keys), _variable_count(model))
            status = "feasible" if status == "optimal" else status
            break
        model.cp.minimize(expression)
        solver.parameters.max_time_in_seconds = remaining
        result = run_solver(solver, model.cp)  # raises Interrupted rather than report a stopped search
        if result not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if index == 0:
                return CpOutcome(None, STATUS_NAMES.get(result, "unknown"), 0.0 if result == cp_model.INFEASIBLE else 1.0, len(reduced.keys), _variable_count(model))
            status = "feasible"
            break
        value = int(round(solver.objective_value))
        if result == cp_model.FEASIBLE:
            status = "feasible"
            if index == 0:
                bound = solver.best_objective_bound
                gap = abs(value - bound) / max(abs(value), 1)
        choice = model.read(solver)
        # Fix this stage's optimum, then hint the solution for the next stage.
        model.cp.add(expression == value)
        model.cp.clear_hints()
        for literal in list(model.key_literals.values()) + list(model.state_literals.values()) + list(model.activation_literals.values()):
            model.cp.add_hint(literal, solver.boolean_value(literal))
        if result == cp_model.FEASIBLE:
            break
    return CpOutcome(choice, status, gap, len(reduced.keys), _variable_count(model), model.choices)


def _variable_count(model: _Model) -> int:
    return len(model.key_literals) + len(model.state_literals) + len(model.activation_literals) + len(model.choices.literals)
