"""Runners-up: for each headline technique, the best plan that decides it differently.

Each is found by enumeration over the same integer tables (``oracle.best_in_keys``) with
the chosen value masked out, so "what each loses" is exact, not a heuristic.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from vramopt.constraints import registry
from vramopt.optimizer.cost_objective import other_gpu_types
from vramopt.optimizer.decode import plan_values
from vramopt.optimizer.oracle import Choice, best_in_keys_by_bound
from vramopt.optimizer.prune import fitting_min_ticks, primary_of_ticks
from vramopt.optimizer.problem import Problem, ItemTable

def runner_up_fields(kind: str) -> tuple[str, ...]:
    """The headline fields of a ``kind`` ('train' or 'infer') problem, in their techniques'
    ``runner_up_rank`` order."""
    techniques = registry.serving_techniques() if kind == "infer" else registry.training_techniques()
    ranked = sorted((technique for technique in techniques if technique.runner_up_rank), key=lambda t: t.runner_up_rank)
    return tuple(technique.field for technique in ranked)


def _masked(table: ItemTable, keep_items: np.ndarray) -> ItemTable:
    valid = table.valid & keep_items
    return ItemTable(table.values, valid, table.memory_mib, table.time_ticks, table.memory_bytes, table.time_s)


def _without(problem: Problem, field: str, value) -> tuple[Problem, np.ndarray]:
    keys = np.arange(problem.key_count)
    state, activation = problem.state, problem.activation
    if field in state.values[0]:
        keep = np.array([item[field] != value for item in state.values])
        state = _masked(state, keep[None, :])
    elif field in activation.values[0]:
        keep = np.array([item[field] != value for item in activation.values])
        activation = _masked(activation, keep[None, :])
    else:
        keys = np.flatnonzero(~problem.keys_with(field, value)).astype(np.int64)
    return replace(problem, state=state, activation=activation), keys


def runners_up(problem: Problem, chosen: Choice, count: int = 3) -> list[tuple[str, Choice]]:
    """Up to ``count`` (field changed, choice) pairs, best first, distinct plans."""
    chosen_values = plan_values(problem, chosen.key, chosen.state_item, chosen.activation_item)
    found: dict[tuple[int, int, int], tuple[str, Choice]] = {}
    # Each key's exact best primary objective: masking a value only removes candidates, so
    # the unmasked optimum of a key bounds its masked one from below.
    every_key = np.arange(problem.key_count)
    needed = count > 0 or len(problem.gpus) > 1  # other_gpu_types reads them with several GPU types only
    lower = primary_of_ticks(problem, every_key, fitting_min_ticks(problem, every_key)[0]) if needed else None
    for field in runner_up_fields(problem.kind) if count > 0 else ():
        masked, keys = _without(problem, field, chosen_values[field])
        choice = best_in_keys_by_bound(masked, keys, lower)
        if choice is None:
            continue
        if choice.objective[:-1] == chosen.objective[:-1]:
            # Same speed, GPUs and memory: a setting that changes nothing (e.g. selective
            # recomputation under flash attention, or a MIG profile spanning the GPU).
            continue
        identity = (choice.key, choice.state_item, choice.activation_item)
        if identity not in found or choice.objective < found[identity][1].objective:
            found[identity] = (field, choice)
    ranked = sorted(found.values(), key=lambda pair: pair[1].objective)[:count]
    # Money objectives: each other GPU type's best plan too (its days and dollars).
    shown = {(choice.key, choice.state_item, choice.activation_item) for _, choice in ranked}
    extra = [pair for pair in other_gpu_types(problem, chosen, lower, best_in_keys_by_bound)
             if (pair[1].key, pair[1].state_item, pair[1].activation_item) not in shown]
    return ranked + extra
