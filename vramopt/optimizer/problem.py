"""Build the search problem: candidate keys and the per-group coefficient tables.

A *key* fixes what every other choice depends on: GPU type and count, tensor, pipeline
and data parallel degrees, precision, micro-batch and virtual stages. For each key the cost model is
separable into a *state* part (ZeRO stage, offload, gradient precision) and an
*activation* part (checkpointing, flash attention, sequence parallelism, expert overlap):
memory and step time are each a state term plus an activation term plus a constant
(tests/unit/test_separability.py). The tables below hold those terms for every key x item,
computed by ``costs.training.evaluate_training`` -- the one cost model -- and rounded once
to the solver's integers: memory in MiB (needs up, budgets down), step time in ticks.
Both the CP-SAT engine and the exhaustive oracle read exactly these integer tables.
"""

from __future__ import annotations

import itertools
import math
from functools import partial
from typing import Any

import numpy as np

from vramopt.constraints import registry
from vramopt.constraints.key_domain import KeyRequest
from vramopt.constraints.technique import DomainContext
from vramopt.costs.columns import CHECKPOINT_EVERY, PlanColumns
from vramopt.costs.pipeline_stages import divides_every_stage
from vramopt.costs.step_terms import group_seconds
from vramopt.costs.training import evaluate_training
from vramopt.errors import InputError
from vramopt.estimate import training_case
from vramopt.frameworks import refused_masks, space_for_framework
from vramopt.models import load_model
from vramopt.optimizer.cost_objective import with_cost_objective
from vramopt.optimizer.distinct_rows import SCHEDULE_COLUMNS, evaluate_distinct, key_classes
from vramopt.optimizer.domains import check_workload_fields, domain, parsed_user_choices
from vramopt.optimizer.empty_domains import raise_on_empty_domain
from vramopt.optimizer.grid_rules import KeyItemGrid
from vramopt.optimizer.interaction import build_interaction
from vramopt.optimizer.keys import training_keys
from vramopt.optimizer.reductions import ServingReduction, TrainingReduction, reduction_for
from vramopt.optimizer.serving_problem import build_serving_problem, check_serving_workload
from vramopt.optimizer.tables import (  # noqa: F401 (re-exported: the names callers import from here)
    KEY_COLUMNS,
    MAX_BOUND_TICKS,
    MAX_TABLE_ROWS,
    MAX_WORKERS,
    TICKS_PER_BEST_STEP,
    ItemTable,
    Problem,
    bound_in_ticks,
    check_space,
    check_table_size,
    gpu_types,
)
from vramopt.types import PRECISIONS, SearchSpace, TrainingWorkload
from vramopt.units import BYTES_PER_MIB, mib_ceil_array



def neutral_codes(fields: tuple[str, ...]) -> dict[str, int]:
    """The codes of the group's neutral item (each technique's ``neutral`` value): what the
    other group's table is evaluated with, which separability makes irrelevant to it."""
    codes: dict[str, int] = {}
    for field in fields:
        technique = registry.technique(field)
        codes.update(technique.columns(technique.neutral))
    return codes


def build_problem(workload, space: SearchSpace) -> Problem:
    """The problem of a training or a serving workload: the tables of the reduction in
    ``REDUCTIONS`` that accepts it (``optimizer/reductions.py``), with the money objective's
    integer prices."""
    check_workload_fields(workload.kind, space)
    return with_cost_objective(reduction_for(REDUCTIONS, workload).apply(workload, space))


def probe_problem(workload, space: SearchSpace, fit_only: bool = False) -> Problem | None:
    """``build_problem``, or None as soon as the state table shows that no key fits: the
    relaxation probes (optimizer/explain.py) only ask whether a plan fits, and a key whose
    leanest model state alone exceeds its budget fits with no activation item (activation
    memory is never negative), so its activation table need not be built."""
    if not isinstance(workload, TrainingWorkload):
        return build_problem(workload, space)
    check_workload_fields(workload.kind, space)
    problem = build_training_problem(workload, space, only_if_states_fit=True, fit_only=fit_only)
    return None if problem is None else with_cost_objective(problem)


def build_training_problem(workload: TrainingWorkload, space: SearchSpace, only_if_states_fit: bool = False,
                           fit_only: bool = False) -> Problem | None:
    """Keys, state and activation tables of a training workload (fields already checked);
    with ``only_if_states_fit``, None when no key's leanest state fits its budget; with
    ``fit_only``, keys for the question which layouts fit only (``KeyRequest.fit_only``)."""
    check_space(space, workload)
    space = space_for_framework(space)  # the framework's default domains; a pin it cannot run is refused
    model = load_model(workload.model)
    if workload.seq_len > model.max_context:
        raise InputError(f"seq_len {workload.seq_len} is longer than {model.name}'s context of {model.max_context} tokens")
    choices = parsed_user_choices(space)
    gpus = gpu_types(space, choices)

    _check_named_precisions(gpus, choices)
    raise_on_empty_domain(model, workload, space, choices, gpus)
    key_parts, contexts = [], []
    for gpu_index, gpu in enumerate(gpus):
        context = DomainContext(
            layers=model.layers,
            gpus_per_node=gpu.node.gpus_per_node,
            max_gpus=space.max_gpus,
            global_batch=workload.global_batch,
            allow_tp_across_nodes=space.allow_tp_across_nodes,
            allow_fp4=space.allow_fp4,
            supported_precisions=tuple(name for name in PRECISIONS if gpu.supports(name)),
            kind=workload.kind,
            seq_len=workload.seq_len,
            experts=model.moe.experts if model.moe is not None else 0,
        )
        contexts.append(context)
        key_parts.append(_keys_for_gpu(gpu_index, gpu, model, workload, space, context, choices, fit_only))
    keys = {name: np.concatenate([part[name] for part in key_parts]) for name in ("gpu_index",) + KEY_COLUMNS}
    key_count = len(keys["gpu_index"])
    if not key_count:
        raise InputError(_no_layout_message(model, workload, space, choices))

    # Every GPU type's items, once (in GPU name order, so the --gpu order changes nothing).
    by_name = [contexts[index] for index in sorted(range(len(gpus)), key=lambda index: gpus[index].name)]
    state_values = _union(_items(registry.STATE_FIELDS, context, choices) for context in by_name)
    activation_values = _union(_items(registry.ACTIVATION_FIELDS, context, choices) for context in by_name)
    if not state_values or not activation_values:
        fields = registry.STATE_FIELDS if not state_values else registry.ACTIVATION_FIELDS
        reason = _excluded_reason(fields, by_name[0], choices)
        if reason:
            raise InputError(f"the pins and forbids leave only combinations that no plan runs: {reason}")
        raise InputError("the pins and forbids leave no value for a technique: " + _empty_fields(by_name[0], choices))

    check_table_size(key_count, max(len(state_values), len(activation_values)), "training")
    cases = [training_case(workload, gpu.name, space.framework) for gpu in gpus]
    conditional: dict[str, np.ndarray] = {}
    constant, state = _evaluate_group(cases, keys, state_values, "state", choices, space.framework, conditional)
    capacity = np.array([gpus[index].memory_bytes for index in keys["gpu_index"]], dtype=float)
    budget_bytes = capacity * (1.0 - workload.headroom_fraction)
    budget_mib = np.floor(budget_bytes / BYTES_PER_MIB).astype(np.int64) - mib_ceil_array(constant)
    if only_if_states_fit and not (np.where(state.valid, state.memory_mib, np.iinfo(np.int64).max).min(axis=1) <= budget_mib).any():
        return None
    _, activation = _evaluate_group(cases, keys, activation_values, "activation", choices, space.framework)

    tick_s = _tick(state, activation)
    state = _with_ticks(state, tick_s)
    activation = _with_ticks(activation, tick_s)
    # ZeRO-3 x full recomputation under DeepSpeed (optimizer/interaction.py).
    recomputes = np.array([registry.technique("checkpointing").columns(item["checkpointing"])["checkpoint_kind"] == CHECKPOINT_EVERY
                           for item in activation_values], dtype=bool)
    interaction = build_interaction(conditional["recompute_regather_if_full_s"], state.valid, recomputes, tick_s)
    bound = None
    if space.objective == "min-gpus":
        bound_s = workload.global_batch * workload.seq_len / space.min_tokens_per_s
        bound = bound_in_ticks(bound_s, tick_s)
    return Problem(
        workload=workload, space=space, model=model, gpus=gpus, keys=keys, constant_bytes=constant,
        budget_mib=budget_mib, capacity_bytes=capacity, state=state, activation=activation, tick_s=tick_s,
        bound_ticks=bound, choices=choices, interaction=interaction,
    )


def _serving_problem(workload, space: SearchSpace) -> Problem:
    """The serving reduction's tables, after its request checks."""
    if getattr(space, "framework", "generic") != "generic":
        raise InputError(f"--framework {space.framework} applies to training workloads; serving plans export to vLLM (--export vllm)")
    _raise_on_empty_serving_domain(workload, space)
    return build_serving_problem(workload, space)


def _raise_on_empty_serving_domain(workload, space: SearchSpace) -> None:
    """The serving builder's own input checks, in its order, then the empty-domain check
    (so a malformed request keeps its error, and an emptied field is named)."""
    from vramopt.estimate import serving_case

    check_space(space, workload)
    check_serving_workload(workload)
    choices = parsed_user_choices(space)
    gpus = gpu_types(space, choices)
    model = [serving_case(workload, gpu.name) for gpu in gpus][0].model
    raise_on_empty_domain(model, workload, space, choices, gpus)


def _keys_for_gpu(gpu_index, gpu, model, workload, space, context, choices, fit_only=False) -> dict[str, np.ndarray]:
    """One GPU type's key columns, generated from the key techniques' ``KeyDomain`` s
    (``optimizer/keys.py``)."""
    request = KeyRequest(gpu=gpu, model=model, workload=workload, space=space, context=context, choices=choices,
                         resolve=lambda field, default=None: domain(field, context, choices, default), fit_only=fit_only)
    return training_keys(request, gpu_index)


def _check_named_precisions(gpus, choices) -> None:
    """A precision named in --pin or --allow must run on the searched GPU type, or on at
    least one of several (the others simply lack those rows): else an error."""
    for kind in ("pin", "allow"):
        for precision in choices[kind].get("precision", ()):
            if precision in choices["forbid"].get("precision", ()) or any(gpu.supports(precision) for gpu in gpus):
                continue
            if len(gpus) == 1:
                raise InputError(f"{gpus[0].name} does not support {precision} (its tensor cores run: {', '.join(gpus[0].peak_flops_per_s)})")
            raise InputError(f"none of the searched GPUs ({', '.join(gpu.name for gpu in gpus)}) supports {precision}")


def _union(domains) -> tuple[dict[str, Any], ...]:
    """The items of several GPU types' domains, each once, in first-seen order."""
    seen: dict[tuple, dict[str, Any]] = {}
    for items in domains:
        for item in items:
            seen.setdefault(tuple(item.items()), item)
    return tuple(seen.values())


def _items(fields: tuple[str, ...], context, choices) -> tuple[dict[str, Any], ...]:
    """Every combination of the group's technique values (``registry.STATE_FIELDS`` or
    ``ACTIVATION_FIELDS``, in that order), each from its technique's domain, less those a
    technique of the group declares that no plan runs (``Technique.excludes``: its validity
    rule refuses them whatever the key, so dropping them changes no answer)."""
    domains = [domain(field, context, choices) for field in fields]
    excluding = [registry.technique(field).excludes for field in fields if registry.technique(field).excludes is not None]
    items = (dict(zip(fields, combination)) for combination in itertools.product(*domains))
    return tuple(item for item in items if not any(excludes(item) for excludes in excluding))


def _excluded_reason(fields: tuple[str, ...], context, choices) -> str:
    """Why every combination of a group's (non-empty) domains is excluded: the first reason."""
    domains = [domain(field, context, choices) for field in fields]
    for combination in itertools.product(*domains):
        item = dict(zip(fields, combination))
        for field in fields:
            excludes = registry.technique(field).excludes
            reason = excludes(item) if excludes is not None else ""
            if reason:
                return reason
    return ""


def _empty_fields(context, choices) -> str:
    empty = [
        field for field in registry.STATE_FIELDS + registry.ACTIVATION_FIELDS
        if field != "grad_comm_precision" and not domain(field, context, choices)
    ]
    return ", ".join(empty) or "grad_comm_precision"


def _evaluate_group(cases, keys, items, group, choices, framework="generic", conditional=None) -> tuple[np.ndarray, ItemTable]:
    """Evaluate every key x item of one group with the other group held at a neutral item.

    The rules are evaluated per distinct combination of the columns each reads
    (``optimizer/grid_rules.py``), and the cost model on the well-formed rows only, whose
    columns are gathered from the per-key and per-item codes (most activation items are
    malformed for most keys: sequence parallelism without tp, interleaving without pp). A
    ``conditional`` dict receives the state group's [keys, items] seconds of the interaction
    term (optimizer/interaction.py)."""
    key_count, item_count = len(keys["gpus"]), len(items)
    item_codes: dict[str, list[int]] = {}
    for item in items:
        merged: dict[str, int] = {}
        for field_name, value in item.items():
            merged.update(registry.technique(field_name).columns(value))
        for name, code in merged.items():
            item_codes.setdefault(name, []).append(code)
    per_item = {name: np.array(values, dtype=np.int64) for name, values in item_codes.items()}
    per_key = {name: keys[name] for name in KEY_COLUMNS if name not in per_item}
    neutral = neutral_codes(registry.ACTIVATION_FIELDS if group == "state" else registry.STATE_FIELDS)
    constant_codes = {name: code for name, code in neutral.items() if name not in per_item and name not in per_key}
    if "grad_comm_precision" not in per_item and "grad_comm_precision" not in constant_codes:
        per_key["grad_comm_precision"] = per_key["precision"]

    shape = (key_count, item_count)
    # Flat (key-major) arrays, written through flat row indices: a 2-D fancy assignment costs more.
    memory, seconds, constant = np.zeros(key_count * item_count), np.zeros(key_count * item_count), np.zeros(key_count * item_count)
    regather = np.zeros(key_count * item_count)
    valid = np.zeros(key_count * item_count, dtype=bool)
    for index, case in enumerate(cases):
        key_rows = np.flatnonzero(keys["gpu_index"] == index)
        if key_rows.size == 0:
            continue
        # One GPU type holds every key: read the codes as they are.
        type_keys = per_key if key_rows.size == key_count else {name: values[key_rows] for name, values in per_key.items()}
        ignored = SCHEDULE_COLUMNS if group == "state" else ()  # the state terms read no schedule column
        classes = key_classes(type_keys, ignored)
        grid = KeyItemGrid(key_rows.size, item_count, type_keys, per_item, constant_codes)
        broken = np.zeros((key_rows.size, item_count), dtype=bool)
        for technique in registry.training_techniques():  # constraints/validity.training_invalid_reasons, rule by rule
            broken |= grid.broken(partial(technique.contribution.validity, case))
        broken |= grid.broken(lambda columns: refused_masks(framework, columns, group))  # rules of the key and this group only
        key_of_row, item_of_row = np.nonzero(~broken)
        if key_of_row.size == 0:
            continue
        gathered = {name: values[key_of_row] for name, values in type_keys.items()}
        gathered.update({name: values[item_of_row] for name, values in per_item.items()})
        gathered.update({name: np.full(key_of_row.size, code, dtype=np.int64) for name, code in constant_codes.items()})
        values = evaluate_distinct(  # one evaluation per interleaving-free row of the state table
            lambda columns: evaluate_training(case, PlanColumns(**{name: columns[name] for name in PlanColumns.__dataclass_fields__})),
            gathered, ignored, None if classes is None else classes[key_of_row] * item_count + item_of_row)
        rows = key_rows[key_of_row] * item_count + item_of_row
        if group == "state":
            memory[rows] = values["weights_bytes"] + values["gradients_bytes"] + values["optimizer_bytes"]
            seconds[rows] = group_seconds(values, "state")
            regather[rows] = values["recompute_regather_if_full_s"]
            ok = values["fits_host"] & values["fits_nvme"]
        else:
            memory[rows] = values["activations_bytes"]
            seconds[rows] = group_seconds(values, "activation")
            ok = np.ones(key_of_row.size, dtype=bool)
        constant[rows] = values["logits_bytes"] + values["reserve_bytes"]
        valid[rows] = ok & np.isfinite(seconds[rows])
    grid = KeyItemGrid(key_count, item_count, per_key, per_item, constant_codes)
    memory, seconds, constant, valid = (values.reshape(shape) for values in (memory, seconds, constant, valid))
    if conditional is not None:
        conditional["recompute_regather_if_full_s"] = regather.reshape(shape)
    if group == "state":
        forbidden = [PRECISIONS.index(name) for name in choices["forbid"].get("grad_comm_precision", ())]
        if forbidden:
            valid &= ~grid.broken(lambda columns: {"forbidden": np.isin(columns.grad_comm_precision, forbidden)})
    else:
        layers = cases[0].model.layers
        valid &= ~grid.broken(lambda columns: {  # every:k divides each stage's layers (costs/pipeline_stages.py)
            "every": (columns.checkpoint_every != 0) & ~divides_every_stage(
                layers, columns.pipeline_parallel, columns.first_stage_layers, columns.last_stage_layers, columns.checkpoint_every)})
    table = ItemTable(
        values=tuple(items),
        valid=valid,
        memory_mib=mib_ceil_array(memory),
        time_ticks=np.zeros(shape, dtype=np.int64),
        memory_bytes=memory,
        time_s=seconds,
    )
    # logits + reserve depend on the key only; rows left unevaluated hold 0.
    return constant.max(axis=1), table


def _tick(state: ItemTable, activation: ItemTable) -> float:
    state_best = np.where(state.valid, state.time_s, np.inf).min(axis=1)
    activation_best = np.where(activation.valid, activation.time_s, np.inf).min(axis=1)
    best = float(np.min(state_best + activation_best)) if state_best.size else math.inf
    if not math.isfinite(best) or best <= 0:
        best = 1.0
    return best / TICKS_PER_BEST_STEP


def _with_ticks(table: ItemTable, tick_s: float) -> ItemTable:
    finite = np.where(table.valid, table.time_s, 0.0)
    ticks = np.rint(finite / tick_s).astype(np.int64)
    return ItemTable(table.values, table.valid, table.memory_mib, ticks, table.memory_bytes, table.time_s)


def _no_layout_message(model, workload, space, choices) -> str:
    pins = {kind: {field: list(values) for field, values in mapping.items()} for kind, mapping in choices.items() if mapping}
    return (
        f"no parallel layout of {model.name} ({model.layers} layers, {model.heads} heads) fits the space: "
        f"max_gpus={space.max_gpus}, global_batch={workload.global_batch} sequences"
        + (f", choices {pins}" if pins else "")
        + "; tp must divide the heads, pp the layers (or split them with fewer on the first or last stage), and dp the global batch"
        + "".join(f", and {technique.contribution.layout_hint(workload)}" for technique in registry.training_techniques()
                  if technique.contribution.layout_hint is not None
                  and (technique.field in choices["pin"] or technique.field in choices["allow"]))
    )


REDUCTIONS = (TrainingReduction(build=build_training_problem), ServingReduction(build=_serving_problem))
"""The reductions ``build_problem`` and ``decode.decode_choice`` dispatch through, in the
order they are asked whether they accept a request."""
