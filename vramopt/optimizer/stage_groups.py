"""The per-stage search's tables (issue 18 item 1): for each key and each combination of the
activation choices the stages share, every stage's checkpointing candidates (the uniform
domain's values, then block:N), their seconds and bytes before the model state's
(``costs/stage_plans.py``'s terms on top of the uniform evaluation), for every model-state
item on the key's Pareto front. ``optimizer/per_stage.py`` bounds and searches them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vramopt.constraints import registry
from vramopt.costs.columns import CHECKPOINT_NONE, PlanColumns
from vramopt.costs.stage_plans import layers_of_each_stage, stage_activation_bytes, stage_compute_shares, stage_in_flight
from vramopt.costs.training import evaluate_training
from vramopt.estimate import training_case
from vramopt.optimizer.problem import Problem, neutral_codes
from vramopt.optimizer.prune import pareto_front
from vramopt.optimizer.tables import KEY_COLUMNS
from vramopt.parallel_layout import ParallelLayout


def state_front(problem: Problem) -> np.ndarray:
    """The model-state items on each key's exact Pareto front (memory, time)."""
    return pareto_front(problem.state, np.arange(problem.key_count))


@dataclass(frozen=True, slots=True)
class Group:
    """One key and one combination of the shared activation choices: each stage's candidates
    (seconds and bytes before the model state's), for every model-state item on the key's front."""
    key: int
    shared: tuple
    names: tuple[str, ...]
    seconds: np.ndarray
    memory_bytes: np.ndarray
    in_flight: np.ndarray
    state_items: np.ndarray


def shared_of(item: dict) -> tuple:
    return tuple((field, value) for field, value in item.items() if field != "checkpointing")


def stage_groups(problem: Problem, keys: np.ndarray | None = None, front: np.ndarray | None = None) -> list[Group]:
    """The groups of ``keys`` (all keys by default), in key order, then the shared choices' order."""
    keys = np.arange(problem.key_count) if keys is None else np.sort(np.asarray(keys, dtype=np.int64))
    front = state_front(problem) if front is None else front
    activation = problem.activation
    groups: dict[tuple, list[int]] = {}
    for index, item in enumerate(activation.values):
        groups.setdefault(shared_of(item), []).append(index)
    terms_of = stage_terms(problem, keys)
    found = []
    block_shares: dict[tuple, np.ndarray] = {}
    block_names: dict[int, tuple[str, ...]] = {}
    for key in keys.tolist():
        if key not in terms_of:
            continue
        seconds_by_item, bytes_by_item, in_flight, block_bytes = terms_of[key]
        counts = layers_of_each_stage(problem.model.layers, int(problem.keys["pipeline_parallel"][key]),
                                      int(problem.keys["first_stage_layers"][key]), int(problem.keys["last_stage_layers"][key]))
        for shared, items in groups.items():
            items = tuple(item for item in items if activation.valid[key, item])
            if not items:
                continue
            seconds = np.stack([seconds_by_item[item] for item in items], axis=1)  # (stages, candidates)
            memory = np.stack([bytes_by_item[item] for item in items], axis=1)
            names = tuple(activation.values[item]["checkpointing"] for item in items)
            if "none" in names and "every:1" in names and items[names.index("none")] in block_bytes:
                plain, full = names.index("none"), names.index("every:1")
                per_count = block_bytes[items[plain]]  # (counts 1.., stages)
                shares = block_shares.setdefault((counts, per_count.shape[0]), _block_shares(counts, per_count.shape[0]))
                extra_seconds = seconds[:, plain][:, None] + shares * (seconds[:, full] - seconds[:, plain])[:, None]
                seconds = np.concatenate([seconds, extra_seconds], axis=1)
                memory = np.concatenate([memory, per_count.T], axis=1)
                names = names + block_names.setdefault(per_count.shape[0], tuple(f"block:{count}" for count in range(1, per_count.shape[0] + 1)))
            state_items = np.flatnonzero(front[key])
            if state_items.size:
                found.append(Group(key, shared, names, seconds, memory, in_flight, state_items))
    return found


def stage_terms(problem: Problem, keys: np.ndarray) -> dict[int, tuple[dict, dict, np.ndarray, dict]]:
    """Per key: per activation item, each stage's step seconds if it set the pace and its
    activation bytes (the uniform table's, less what the stage holds below the heaviest and
    what it computes below the slowest), the micro-batches each stage holds, and for items
    without checkpointing each stage's bytes under block recomputation of N layers."""
    activation = problem.activation
    wanted = np.zeros(problem.key_count, dtype=bool)
    wanted[keys] = True
    key_rows, item_rows = np.nonzero(activation.valid & wanted[:, None])
    per_key = {name: problem.keys[name][key_rows] for name in KEY_COLUMNS}
    item_codes: dict[str, list[int]] = {}
    for item in activation.values:
        codes: dict[str, int] = {}
        for field, value in item.items():
            codes.update(registry.technique(field).columns(value))
        for name, code in codes.items():
            item_codes.setdefault(name, []).append(code)
    per_item = {name: np.array(values, dtype=np.int64)[item_rows] for name, values in item_codes.items()}
    constant = {name: np.full(key_rows.size, code, dtype=np.int64) for name, code in neutral_codes(registry.STATE_FIELDS).items()
                if name not in per_key and name not in per_item}
    if "grad_comm_precision" not in constant:
        constant["grad_comm_precision"] = per_key["precision"]
    gathered = {**per_key, **per_item, **constant}
    layout_of = np.stack([problem.keys[name] for name in ("gpu_index", "pipeline_parallel", "first_stage_layers", "last_stage_layers")], axis=1)[key_rows]
    terms: dict[int, tuple[dict, dict, np.ndarray]] = {}
    for layout in np.unique(layout_of, axis=0):
        rows = np.flatnonzero((layout_of == layout).all(axis=1))
        gpu = problem.gpus[int(layout[0])]
        case = training_case(problem.workload, gpu.name, problem.space.framework)
        columns = PlanColumns(**{name: gathered[name][rows] for name in PlanColumns.__dataclass_fields__})
        values = evaluate_training(case, columns)
        tokens = ParallelLayout.from_columns(columns).tokens_per_rank(problem.workload.seq_len)
        stage_bytes = stage_activation_bytes(problem.model, columns, tokens, values["micro_batches"])
        shares = stage_compute_shares(case.model, gpu, columns, problem.workload.seq_len, case.trainable_fraction, case.compute_overhead_fraction)
        in_flight = stage_in_flight(columns, values["micro_batches"])
        table_bytes = activation.memory_bytes[key_rows[rows], item_rows[rows]]
        table_seconds = activation.time_s[key_rows[rows], item_rows[rows]]
        extras = table_bytes[:, None] - stage_bytes.max(axis=1, keepdims=True)  # the expert overlap's chunk, as the uniform model adds it
        stage_memory = stage_bytes + extras
        stage_seconds = table_seconds[:, None] - values["compute_s"][:, None] * (1.0 - shares)
        # Megatron's block recomputation of the first N layers of each stage, from rows without checkpointing.
        plain = np.flatnonzero(columns.checkpoint_kind == CHECKPOINT_NONE)
        most_layers = max(layers_of_each_stage(problem.model.layers, int(layout[1]), int(layout[2]), int(layout[3])))
        plain_columns = _rows(columns, plain)
        plain_tokens = tokens[plain] if np.ndim(tokens) else tokens
        blocks = np.stack([stage_activation_bytes(problem.model, plain_columns, plain_tokens, values["micro_batches"][plain],
                                                  recomputed_layers=count) + extras[plain]
                           for count in range(1, most_layers)], axis=0) if most_layers > 1 else np.zeros((0, plain.size, int(layout[1])))
        block_row = {row: position for position, row in enumerate(plain.tolist())}
        for row, key, item in zip(range(rows.size), key_rows[rows].tolist(), item_rows[rows].tolist()):
            seconds_by_item, bytes_by_item, _, block_bytes = terms.setdefault(key, ({}, {}, in_flight[row], {}))
            seconds_by_item[item] = stage_seconds[row]
            bytes_by_item[item] = stage_memory[row]
            if row in block_row and blocks.shape[0]:
                block_bytes[item] = blocks[:, block_row[row], :]  # (counts 1.., stages)
    return terms


def _block_shares(counts: tuple[int, ...], most: int) -> np.ndarray:
    """(stages, N = 1..most): the share of each stage's layers block:N recomputes (the recompute GEMMs are per layer)."""
    layers = np.array(counts, dtype=float)[:, None]
    return np.minimum(np.arange(1, most + 1, dtype=float)[None, :], layers) / layers


def _rows(columns: PlanColumns, rows: np.ndarray) -> PlanColumns:
    return PlanColumns(**{name: np.asarray(getattr(columns, name))[rows] for name in PlanColumns.__dataclass_fields__})
