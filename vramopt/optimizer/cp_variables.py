"""The CP-SAT variables of one reduced training problem, named after what they mean, and
the channelling of each technique's ``choice[field=value]`` literals to them.

- ``key[gpus=..,tp=..,...]``: the layout/precision/micro-batch row in use (exactly one);
- ``state[k,zero=..,offload=..,...]`` and ``activation[k,ckpt=..,...]``: the item of each
  group chosen for key k (only the items on the group's exact Pareto front, optimizer/prune.py);
- ``choice[field=value]``: one per technique value, the sum of the literals that carry it, so
  pins and explanations talk about techniques by name.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from ortools.sat.python import cp_model

from vramopt.constraints import registry
from vramopt.constraints.precision import SAME_AS_PRECISION
from vramopt.constraints.technique import ChoiceVariables, encode_choices
from vramopt.optimizer.problem import Problem


class CpVariables:
    """The literals of one CP model over a reduced problem, and how to read a solution back."""

    def __init__(self, problem: Problem, keys: np.ndarray, state_front: np.ndarray, activation_front: np.ndarray) -> None:
        self.problem = problem
        self.cp = cp_model.CpModel()
        self.key_literals: dict[int, cp_model.IntVar] = {}
        self.state_literals: dict[tuple[int, int], cp_model.IntVar] = {}
        self.activation_literals: dict[tuple[int, int], cp_model.IntVar] = {}
        self.items_of_key: dict[int, tuple[list, list]] = {}
        """key -> ([(state item, literal)], [(activation item, literal)]), for the constraints."""
        cp = self.cp
        for row, key in enumerate(keys):
            key = int(key)
            values = problem.key_values(key)
            self.key_literals[key] = cp.new_bool_var("key[" + ",".join(f"{name}={value}" for name, value in values.items()) + "]")
            states = [(int(item), cp.new_bool_var(f"state[{key},{_label(problem.state.values[item])}]"))
                      for item in np.flatnonzero(state_front[row])]
            activations = [(int(item), cp.new_bool_var(f"activation[{key},{_label(problem.activation.values[item])}]"))
                           for item in np.flatnonzero(activation_front[row])]
            self.state_literals.update({(key, item): literal for item, literal in states})
            self.activation_literals.update({(key, item): literal for item, literal in activations})
            self.items_of_key[key] = (states, activations)
        self.choices = self._channel_techniques()

    def _channel_techniques(self) -> ChoiceVariables:
        problem = self.problem
        variables = ChoiceVariables()
        groups: dict[str, dict[str, dict]] = {group: defaultdict(lambda: defaultdict(list)) for group in ("key", "state", "activation")}
        for key, literal in self.key_literals.items():
            for field, value in problem.key_values(key).items():
                groups["key"][field][value].append(literal)
        for (key, item), literal in self.state_literals.items():
            for field, value in problem.state.values[item].items():
                if value == SAME_AS_PRECISION:  # gradients on the wire at the key's precision
                    value = problem.key_values(key)["precision"]
                groups["state"][field][value].append(literal)
        for (key, item), literal in self.activation_literals.items():
            for field, value in problem.activation.values[item].items():
                groups["activation"][field][value].append(literal)
        for technique in registry.TECHNIQUES:
            encode_choices(self.cp, technique, groups[technique.group][technique.field], variables)
        return variables

    def all_literals(self) -> list:
        return list(self.key_literals.values()) + list(self.state_literals.values()) + list(self.activation_literals.values())

    def count(self) -> int:
        return len(self.key_literals) + len(self.state_literals) + len(self.activation_literals) + len(self.choices.literals)

    def chosen(self, solver: cp_model.CpSolver) -> tuple[int, int, int]:
        """(key, state item, activation item) of the solver's solution."""
        key = next(key for key, literal in self.key_literals.items() if solver.boolean_value(literal))
        state = next(item for (k, item), literal in self.state_literals.items() if k == key and solver.boolean_value(literal))
        activation = next(item for (k, item), literal in self.activation_literals.items() if k == key and solver.boolean_value(literal))
        return key, state, activation

    def add_hint(self, hint: tuple[int, int, int] | None) -> None:
        """Hint the key of the pruning's incumbent (the items follow from the key's fronts)."""
        if hint is None or hint[0] not in self.key_literals:
            return
        key, state, activation = hint
        if (key, state) not in self.state_literals or (key, activation) not in self.activation_literals:
            return
        for literal_key, literal in self.key_literals.items():
            self.cp.add_hint(literal, literal_key == key)


def _label(values: dict) -> str:
    return ",".join(f"{name}={value}" for name, value in values.items())
