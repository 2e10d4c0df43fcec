"""The CP-SAT constraints of one training model: which combinations are plans, and the
capacity rules they must keep. One function per constraint family."""

from __future__ import annotations

from vramopt.constraints.headroom import encode_memory_budget
from vramopt.optimizer.cp_variables import CpVariables


def add_one_plan(variables: CpVariables) -> None:
    """Exactly one key; for it, exactly one state item and one activation item (each
    group's items sum to their key's literal, so an unused key has none)."""
    cp = variables.cp
    for key, literal in variables.key_literals.items():
        states, activations = variables.items_of_key[key]
        cp.add(sum(state for _, state in states) == literal)
        cp.add(sum(activation for _, activation in activations) == literal)
    cp.add_exactly_one(list(variables.key_literals.values()))


def add_memory_headroom(variables: CpVariables) -> None:
    """Per key: state + activation memory within the GPU's budget after headroom and the
    key's constant terms (constraints/headroom.py)."""
    problem = variables.problem
    for key, literal in variables.key_literals.items():
        states, activations = variables.items_of_key[key]
        encode_memory_budget(
            variables.cp,
            literal,
            [(state, int(problem.state.memory_mib[key, item])) for item, state in states],
            [(activation, int(problem.activation.memory_mib[key, item])) for item, activation in activations],
            int(problem.budget_mib[key]),
            name=str(key),
        )


def add_throughput_target(variables: CpVariables) -> None:
    """min-gpus: the step time may not exceed the bound the tokens/s target sets."""
    problem = variables.problem
    if problem.bound_ticks is None:
        return
    step_ticks = sum(int(problem.state.time_ticks[key, item]) * literal for (key, item), literal in variables.state_literals.items()) + sum(
        int(problem.activation.time_ticks[key, item]) * literal for (key, item), literal in variables.activation_literals.items())
    variables.cp.add(step_ticks <= problem.bound_ticks).with_name("throughput_target")
