"""A declared interaction term between the state and the activation group.

The solver's step time is a state term plus an activation term per key (the separable
tables). One physical effect couples the groups: DeepSpeed's ZeRO-3 gathers a layer's
released parameters again for the recomputed forward (costs/recompute_regather.py), so a
plan pays it only when its state item shards parameters (ZeRO-3) *and* its activation item
recomputes the full forward. The term is

    ticks(key, state, activation) = state ticks + activation ticks
                                    + interaction[key, state] * recomputes[activation]

with ``interaction[key, state]`` the key x state table of what the plan would pay if it
recomputed (``costs.training`` output ``recompute_regather_if_full_s``, 0 below ZeRO-3 and
outside DeepSpeed) and ``recomputes`` a mask over activation items (full recomputation).
Everything that adds a plan's ticks asks ``plan_ticks`` / ``plan_seconds``; CP-SAT gets one
literal per (key, state item) with a nonzero term, equal to the AND of the state literal and
the key's recomputing activation literals (``add_interaction_literals``); the group
dominance keeps each group's front under both values of the other group's factor
(``group_fronts``), which stays exact (see its docstring).

The term is absent (``Problem.interaction`` None) unless some key has a nonzero entry and some
activation item recomputes: generic, Megatron-LM and torchtitan problems are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True, slots=True)
class Interaction:
    time_s: np.ndarray
    """[keys, state items] seconds added to a plan whose activation item is in ``recomputes``
    (0 where the state table's entry is not valid)."""
    time_ticks: np.ndarray
    recomputes: np.ndarray
    """[activation items] bool: the item recomputes the full forward."""


def build_interaction(seconds: np.ndarray, state_valid: np.ndarray, recomputes: np.ndarray, tick_s: float) -> Interaction | None:
    """The term from the state table's conditional seconds; None when it is 0 everywhere."""
    seconds = np.where(state_valid, np.nan_to_num(seconds, nan=0.0, posinf=0.0), 0.0)
    ticks = np.rint(seconds / tick_s).astype(np.int64)
    if not recomputes.any() or not (ticks > 0).any():
        return None
    return Interaction(time_s=seconds, time_ticks=ticks, recomputes=np.asarray(recomputes, dtype=bool))


def extra_ticks(problem, key, state, activation):
    """The interaction's ticks of plans (arrays broadcast); 0 without the term."""
    term = getattr(problem, "interaction", None)
    if term is None:
        return np.zeros(np.broadcast(np.asarray(key), np.asarray(state), np.asarray(activation)).shape, dtype=np.int64)
    return term.time_ticks[key, state] * term.recomputes[activation]


def plan_ticks(problem, key, state, activation):
    """State + activation + interaction ticks of plans (arrays broadcast)."""
    return problem.state.time_ticks[key, state] + problem.activation.time_ticks[key, activation] + extra_ticks(problem, key, state, activation)


def plan_seconds(problem, key, state, activation):
    """The same in floating point (the ticks' unrounded source)."""
    seconds = problem.state.time_s[key, state] + problem.activation.time_s[key, activation]
    term = getattr(problem, "interaction", None)
    if term is not None:
        seconds = seconds + term.time_s[key, state] * term.recomputes[activation]
    return seconds


def grid_ticks(problem, keys: np.ndarray) -> np.ndarray:
    """[keys, state items, activation items] ticks of every pair of the keys."""
    ticks = problem.state.time_ticks[keys][:, :, None] + problem.activation.time_ticks[keys][:, None, :]
    term = getattr(problem, "interaction", None)
    if term is not None:
        ticks = ticks + term.time_ticks[keys][:, :, None] * term.recomputes[None, None, :]
    return ticks


def _with_ticks(table, ticks: np.ndarray):
    """The group's table (``tables.ItemTable``) with other ticks."""
    return replace(table, time_ticks=ticks)


def group_fronts(problem, keys: np.ndarray, pareto_front) -> tuple[np.ndarray, np.ndarray]:
    """Each group's exact Pareto front over (memory, ticks) for ``keys``, with the interaction.

    State: for a plan's activation item the other factor is fixed (recomputes or not), so a
    state item dominated both with its term added (``S + I``) and without (``S``) is
    dominated whatever the activation: the union of the two fronts is exact. Activation: for
    a state item the term adds ``c * recomputes`` with ``0 <= c <= max_s I[key, s]``; an item
    that recomputes and is dominated without the term is dominated by one whose ticks with
    any ``c`` are no more, and one that does not recompute and is dominated with ``c = max``
    is too, so the union of the fronts at ``c = 0`` and ``c = max`` is exact."""
    state_front = pareto_front(problem.state, keys)
    activation_front = pareto_front(problem.activation, keys)
    term = getattr(problem, "interaction", None)
    if term is None or keys.size == 0:
        return state_front, activation_front
    state_front |= pareto_front(_with_ticks(problem.state, problem.state.time_ticks + term.time_ticks), keys)
    most = np.where(problem.state.valid, term.time_ticks, 0).max(axis=1)
    activation_ticks = problem.activation.time_ticks + most[:, None] * term.recomputes[None, :]
    activation_front |= pareto_front(_with_ticks(problem.activation, activation_ticks), keys)
    return state_front, activation_front


def add_interaction_literals(variables, key: int, states: list, activations: list) -> None:
    """For one key of the CP model: a literal per state item with a nonzero term, true exactly
    when that item and a recomputing activation item are chosen, its ticks in
    ``variables.interaction_terms`` as (ticks, literal, key) and the literal in
    ``variables.interaction_literals[(key, state item)]``."""
    term = getattr(variables.problem, "interaction", None)
    if term is None:
        return
    recomputing = [literal for item, literal in activations if term.recomputes[item]]
    if not recomputing:
        return
    cp = variables.cp
    recomputes = sum(recomputing)
    for item, state in states:
        ticks = int(term.time_ticks[key, item])
        if ticks <= 0:
            continue
        both = cp.new_bool_var("")
        cp.add(both <= state)
        cp.add(both <= recomputes)
        cp.add(both >= state + recomputes - 1)
        variables.interaction_terms.append((ticks, both, key))
        variables.interaction_literals[(key, item)] = both

