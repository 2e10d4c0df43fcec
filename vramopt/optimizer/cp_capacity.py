"""The CP-SAT constraints of one training model: which combinations are plans, and the
capacity rules they must keep. One function per constraint family."""

from __future__ import annotations

from ortools.sat.python import cp_model

from vramopt.constraints.headroom import encode_memory_budget
from vramopt.optimizer.cp_variables import CpVariables


def add_one_plan(variables: CpVariables) -> None:
    """Exactly one key; for it, exactly one state item and one activation item (each
    group's items sum to their key's literal, so an unused key has none)."""
    cp, total = variables.cp, cp_model.LinearExpr.sum
    for key, literal in variables.key_literals.items():
        states, activations = variables.items_of_key[key]
        cp.add(total([state for _, state in states]) == literal)
        cp.add(total([activation for _, activation in activations]) == literal)
    cp.add_exactly_one(list(variables.key_literals.values()))


def add_memory_headroom(variables: CpVariables) -> None:
    """Per key: state + activation memory within the GPU's budget after headroom and the
    key's constant terms (constraints/headroom.py)."""
    problem = variables.problem
    state_mib, activation_mib, budget_mib = problem.state.memory_mib, problem.activation.memory_mib, problem.budget_mib
    for key, literal in variables.key_literals.items():
        states, activations = variables.items_of_key[key]
        encode_memory_budget(
            variables.cp,
            literal,
            [(state, mib) for (_, state), mib in zip(states, state_mib[key, [item for item, _ in states]].tolist())],
            [(activation, mib) for (_, activation), mib in zip(activations, activation_mib[key, [item for item, _ in activations]].tolist())],
            int(budget_mib[key]),
            name=str(key),
        )


def add_throughput_target(variables: CpVariables) -> None:
    """min-gpus: the step time may not exceed the bound the tokens/s target sets."""
    problem = variables.problem
    if problem.bound_ticks is None:
        return
    step_ticks = sum(int(problem.state.time_ticks[key, item]) * literal for (key, item), literal in variables.state_literals.items()) + sum(
        int(problem.activation.time_ticks[key, item]) * literal for (key, item), literal in variables.activation_literals.items()) + sum(
        ticks * literal for ticks, literal, _ in getattr(variables, "interaction_terms", []))
    variables.cp.add(step_ticks <= problem.bound_ticks).with_name("throughput_target")
