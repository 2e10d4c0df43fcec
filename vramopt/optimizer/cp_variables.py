"""The CP-SAT variables of one reduced training problem (unnamed: see ``CpVariables``):

- ``key[gpus=..,tp=..,...]``: the layout/precision/micro-batch row in use (exactly one);
- ``state[k,zero=..,offload=..,...]`` and ``activation[k,ckpt=..,...]``: the item of each
  group chosen for key k (only the items on the group's exact Pareto front, optimizer/prune.py).

Pins and explanations act on the tables before the model is built, so the model has no
per-technique ``choice[field=value]`` literals: they were channelled here until measured as
dead weight (nothing read them; on 2t at 256 GPUs they were 866 linear constraints with 16k
terms that presolve spent time on before discarding).
"""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from vramopt.optimizer.interaction import add_interaction_literals
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
        self.interaction_terms: list[tuple[int, cp_model.IntVar, int]] = []
        """(ticks, literal, key) of the state x activation term (optimizer/interaction.py)."""
        self.interaction_literals: dict[tuple[int, int], cp_model.IntVar] = {}
        cp = self.cp
        # Unnamed: naming each literal after its key's and item's values was a third of the
        # model's building time on 2t at 16 GPUs, and CP-SAT's search does not read names.
        new_literal = cp.new_bool_var
        for row, key in enumerate(keys.tolist()):
            self.key_literals[key] = new_literal("")
            states = [(item, new_literal("")) for item in np.flatnonzero(state_front[row]).tolist()]
            activations = [(item, new_literal("")) for item in np.flatnonzero(activation_front[row]).tolist()]
            self.state_literals.update({(key, item): literal for item, literal in states})
            self.activation_literals.update({(key, item): literal for item, literal in activations})
            self.items_of_key[key] = (states, activations)
            add_interaction_literals(self, key, states, activations)

    def all_literals(self) -> list:
        return (list(self.key_literals.values()) + list(self.state_literals.values()) + list(self.activation_literals.values())
                + [literal for _, literal, _ in self.interaction_terms])

    def count(self) -> int:
        return len(self.key_literals) + len(self.state_literals) + len(self.activation_literals) + len(self.interaction_terms)

    def chosen(self, solver: cp_model.CpSolver) -> tuple[int, int, int]:
        """(key, state item, activation item) of the solver's solution."""
        solution = solver.response_proto.solution
        key = next(key for key, literal in self.key_literals.items() if solution[literal.index])
        states, activations = self.items_of_key[key]
        state = next(item for item, literal in states if solution[literal.index])
        activation = next(item for item, literal in activations if solution[literal.index])
        return key, state, activation

    def hint_solution(self, solver: cp_model.CpSolver) -> None:
        """Replace the hint by the solver's last solution, every literal in one bulk copy
        (one ``add_hint`` call per literal was ~7 us each, 40 ms on a 2t/16-GPU model)."""
        solution = solver.response_proto.solution
        indices = [literal.index for literal in self.all_literals()]
        self.cp.clear_hints()
        hint = self.cp.proto.solution_hint
        hint.vars.extend(indices)
        hint.values.extend([int(solution[index]) for index in indices])

    def add_hint(self, hint: tuple[int, int, int] | None) -> None:
        """Hint the key of the pruning's incumbent (the items follow from the key's fronts)."""
        if hint is None or hint[0] not in self.key_literals:
            return
        key, state, activation = hint
        if (key, state) not in self.state_literals or (key, activation) not in self.activation_literals:
            return
        for literal_key, literal in self.key_literals.items():
            self.cp.add_hint(literal, literal_key == key)
