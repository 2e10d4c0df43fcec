"""The CP-SAT model built in bulk (unnamed literals, linear sums built in one call; issue 18
item 3: a lean model) is, names aside, the very proto the per-literal building of commit
ddf2610 wrote: the same variables, constraints and objectives in the same order, so the
solver's search and answers cannot differ.

The oracle is the ddf2610 building of the variables and of the two capacity families,
frozen below.
"""

from __future__ import annotations

import numpy as np
import pytest
from ortools.sat.python import cp_model

from vramopt.optimizer.cp_capacity import add_memory_headroom, add_one_plan, add_throughput_target
from vramopt.optimizer.cp_objective import stage_expressions
from vramopt.optimizer.cp_variables import CpVariables
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.prune import pareto_front, reduce
from vramopt.types import SearchSpace, TrainingWorkload


def _label(values: dict) -> str:
    return ",".join(f"{name}={value}" for name, value in values.items())


class FrozenVariables(CpVariables):
    """``CpVariables.__init__`` at ddf2610 (named literals, one call per literal)."""

    def __init__(self, problem, keys, state_front, activation_front) -> None:
        self.problem = problem
        self.cp = cp_model.CpModel()
        self.key_literals, self.state_literals, self.activation_literals, self.items_of_key = {}, {}, {}, {}
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


def frozen_capacity(variables) -> None:
    """``cp_capacity.add_one_plan`` and ``add_memory_headroom`` (with
    ``headroom.encode_memory_budget``) at ddf2610."""
    cp, problem = variables.cp, variables.problem
    for key, literal in variables.key_literals.items():
        states, activations = variables.items_of_key[key]
        cp.add(sum(state for _, state in states) == literal)
        cp.add(sum(activation for _, activation in activations) == literal)
    cp.add_exactly_one(list(variables.key_literals.values()))
    for key, literal in variables.key_literals.items():
        states, activations = variables.items_of_key[key]
        terms = ([int(problem.state.memory_mib[key, item]) * state for item, state in states]
                 + [int(problem.activation.memory_mib[key, item]) * activation for item, activation in activations])
        cp.add(sum(terms) <= int(problem.budget_mib[key]) * literal).with_name(f"headroom[{key}]")


def unnamed(proto) -> str:
    """The proto's text format without its names."""
    return "\n".join(line for line in str(proto).splitlines() if not line.strip().startswith("name:"))


REQUESTS = [
    (TrainingWorkload(model="2t"), SearchSpace(max_gpus=16)),
    (TrainingWorkload(model="70b"), SearchSpace(max_gpus=64, objective="per-gpu")),
    (TrainingWorkload(model="405b"), SearchSpace(max_gpus=256, objective="min-gpus", min_tokens_per_s=100_000.0)),
    (TrainingWorkload(model="8b"), SearchSpace(max_gpus=16, gpus=("h100", "a100-80gb"), objective="cost", total_tokens=10**12, usd_per_gpu_hour={"h100": 2.5, "a100-80gb": 1.6})),
    (TrainingWorkload(model="mixtral", global_batch=256), SearchSpace(max_gpus=64)),
]


@pytest.mark.parametrize("workload,space", REQUESTS, ids=[f"{w.model}-{s.objective}" for w, s in REQUESTS])
def test_bulk_model_is_the_per_literal_model(workload, space):
    """issue 18: the lean model building writes the same proto as before, names aside."""
    problem = build_problem(workload, space)
    reduced = reduce(problem)
    assert reduced.keys.size
    built = []
    for variables_class, capacity in ((CpVariables, None), (FrozenVariables, frozen_capacity)):
        # Every key left by the key bounds, not only the ties the solver's model holds: a model of many keys.
        variables = variables_class(problem, reduced.keys, pareto_front(problem.state, reduced.keys),
                                    pareto_front(problem.activation, reduced.keys))
        if capacity is None:
            add_one_plan(variables)
            add_memory_headroom(variables)
        else:
            capacity(variables)
        add_throughput_target(variables)
        variables.add_hint(reduced.hint)
        objectives = []
        for stage in stage_expressions(variables):
            if capacity is None:
                stage.minimize_in(variables.cp)
                stage.fix_in(variables.cp, 12345)
            else:  # ddf2610: cp.minimize(expression), cp.add(expression == value)
                variables.cp.minimize(stage.expression())
                variables.cp.add(stage.expression() == 12345)
            objectives.append(str(variables.cp.proto.objective))
        built.append((unnamed(variables.cp.proto), objectives))
    (new, new_objectives), (old, old_objectives) = built
    assert new.count("variables {") > 100 or workload.model != "2t"
    assert new == old
    assert new_objectives == old_objectives
