"""The search problem for serving (``--workload infer``), in the same table form as training.

Keys: GPU type and count, tensor, expert and pipeline parallel, weight quantization and MIG profile.
Serving is not separable (the KV cache couples slots and its dtype), so every other choice
(KV dtype, paged or contiguous, speculative decoding, slots) is one "state" item and the
activation group is a single neutral item. Every per-GPU choice comes from that GPU type:
a key's quantizations and MIG profiles from its own GPU, the state items from the union of
every searched GPU type's domains (an fp8 KV cache is an item when any GPU runs it, and
invalid on the rows of a GPU that cannot), so the order of ``--gpu`` never changes the
optimum and adding a GPU type never lowers it (tests/regression/test_serving_gpu_order.py). The time the objective minimizes is the
deployment's seconds per output token, 1 / tokens_per_s, so "throughput", "per-gpu" and
"min-gpus" read exactly as for training. The latency bound and the minimum concurrent slots
make items invalid; memory is the headroom rule per GPU or per MIG instance.
"""

from __future__ import annotations

import itertools

import numpy as np

from vramopt.constraints import registry
from vramopt.constraints.mig import NO_MIG
from vramopt.constraints.parallelism import gpu_counts
from vramopt.constraints.technique import DomainContext
from vramopt.costs.request_serving import request_targets_met
from vramopt.constraints.validity import serving_invalid_reasons
from vramopt.costs.inference import QUANTIZATIONS, ServingColumns, evaluate_serving, requirements_met
from vramopt.errors import InputError
from vramopt.models.checkpoint_quantization import check_checkpoint_format, checkpoint_format
from vramopt.estimate import check_serving_workload, mig_profile_code, serving_case

__all__ = ["build_serving_problem", "check_serving_workload"]
from vramopt.optimizer.domains import domain, parsed_user_choices
from vramopt.optimizer.tables import MAX_BOUND_TICKS, TICKS_PER_BEST_STEP, ItemTable, Problem, bound_in_ticks, check_space, check_table_size, gpu_types
from vramopt.costs.serving_experts import serving_replica_layout
from vramopt.plan_record import serving_codes
from vramopt.types import PRECISIONS, SearchSpace, ServingWorkload
from vramopt.units import BYTES_PER_MIB, mib_ceil_array

SERVING_KEY_COLUMNS = ("gpus", "tensor_parallel", "expert_parallel", "pipeline_parallel", "quantization", "mig_profile")


def item_codes(item_values, key_count: int) -> dict[str, np.ndarray]:
    """The ``ServingColumns`` codes of the item techniques' values, one row per key x item
    (items vary fastest), written by each technique's ``serving_columns``."""
    rows = [serving_codes(item, None, registry.SERVING_ITEM_FIELDS) for item in item_values]
    return {name: np.tile(np.array([row[name] for row in rows], dtype=np.int64), key_count) for name in rows[0]} if rows else {}


def build_serving_problem(workload: ServingWorkload, space: SearchSpace, prune_counts: bool = True) -> Problem:
    check_space(space, workload)
    check_serving_workload(workload)
    choices = parsed_user_choices(space)
    gpus = gpu_types(space, choices)
    cases = [serving_case(workload, gpu.name) for gpu in gpus]
    model = cases[0].model

    contexts = [
        DomainContext(
            layers=model.layers, gpus_per_node=gpu.node.gpus_per_node, max_gpus=space.max_gpus, global_batch=1,
            allow_tp_across_nodes=space.allow_tp_across_nodes, allow_fp4=space.allow_fp4,
            supported_precisions=tuple(name for name in PRECISIONS if gpu.supports(name)), kind="infer",
            checkpoint_format=checkpoint_format(model), experts=model.moe.experts if model.moe is not None else 0,
        )
        for gpu in gpus
    ]
    _check_named_values(gpus, choices)
    check_checkpoint_format(model, choices, gpus)
    item_values = _items(gpus, contexts, choices)
    # Max tokens/s keeps only each layout's largest GPU count (_dominant_counts): never
    # enumerate the others, so a million-GPU space costs milliseconds, not minutes.
    largest_only = prune_counts and space.objective == "throughput"
    layouts = [_layouts_for_gpu(gpu, model, space, contexts[index], choices) for index, gpu in enumerate(gpus)]
    if item_values and not largest_only:
        check_table_size(sum(_row_count(*layout) for layout in layouts), len(item_values), "serving")
    key_rows = []
    for gpu_index, layout in enumerate(layouts):
        key_rows.extend(_rows(gpu_index, *layout, largest_only=largest_only))
    if not key_rows:
        raise InputError(
            f"no serving layout of {model.name} ({model.layers} layers, {model.heads} heads) within {space.max_gpus} GPUs "
            "matches the choices: tp must divide the heads, pp the layers, and tp x pp the GPU count"
        )
    if not item_values:
        raise InputError("the pins and forbids leave no KV cache / slots / speculative decoding choice")
    if prune_counts:
        key_rows = _dominant_counts(key_rows, space.objective)
    check_table_size(len(key_rows), len(item_values), "serving")
    names = ("gpu_index",) + SERVING_KEY_COLUMNS
    keys = {name: np.array([row[index] for row in key_rows], dtype=np.int64) for index, name in enumerate(names)}

    key_count, item_count = len(key_rows), len(item_values)
    codes = {name: np.repeat(keys[name], item_count) for name in SERVING_KEY_COLUMNS}
    codes.update(item_codes(item_values, key_count))
    gpu_index = np.repeat(keys["gpu_index"], item_count)
    memory = np.zeros(key_count * item_count)
    seconds = np.zeros(key_count * item_count)
    reserve = np.zeros(key_count * item_count)
    capacity = np.zeros(key_count * item_count)
    valid = np.zeros(key_count * item_count, dtype=bool)
    for index, case in enumerate(cases):
        rows = np.flatnonzero(gpu_index == index)
        if rows.size == 0:
            continue
        columns = ServingColumns(**{name: codes[name][rows] for name in ServingColumns.__dataclass_fields__})
        values = evaluate_serving(case, columns)
        ok = np.ones(rows.size, dtype=bool)
        for mask in serving_invalid_reasons(case, columns).values():
            ok &= ~np.asarray(mask, dtype=bool)
        for met in requirements_met(values, workload.min_slots, workload.max_latency_ms):
            ok &= met
        for met in request_targets_met(values, case.requests).values():
            ok &= met
        ok &= np.isfinite(values["tokens_per_s"]) & (values["tokens_per_s"] > 0)
        memory[rows] = values["total_bytes"] - values["reserve_bytes"]
        reserve[rows] = values["reserve_bytes"]
        capacity[rows] = values["capacity_bytes"]
        with np.errstate(divide="ignore"):
            seconds[rows] = np.where(ok, 1.0 / values["tokens_per_s"], 0.0)
        valid[rows] = ok
    shape = (key_count, item_count)
    constant = reserve.reshape(shape).max(axis=1)
    key_capacity = capacity.reshape(shape).max(axis=1)
    budget_mib = np.floor(key_capacity * (1.0 - workload.headroom_fraction) / BYTES_PER_MIB).astype(np.int64) - mib_ceil_array(constant)
    valid_times = seconds[valid]
    tick_s = (float(valid_times.min()) if valid_times.size else 1.0) / TICKS_PER_BEST_STEP
    state = ItemTable(
        values=tuple(item_values),
        valid=valid.reshape(shape),
        memory_mib=mib_ceil_array(memory).reshape(shape),
        time_ticks=np.rint(seconds / tick_s).astype(np.int64).reshape(shape),
        memory_bytes=memory.reshape(shape),
        time_s=seconds.reshape(shape),
    )
    activation = ItemTable(
        values=({},),
        valid=np.ones((key_count, 1), dtype=bool),
        memory_mib=np.zeros((key_count, 1), dtype=np.int64),
        time_ticks=np.zeros((key_count, 1), dtype=np.int64),
        memory_bytes=np.zeros((key_count, 1)),
        time_s=np.zeros((key_count, 1)),
    )
    bound = None
    if space.objective == "min-gpus":
        # With a request load and no tokens/s target, the load and its targets (which made
        # the other rows invalid) are the target: the bound constrains nothing.
        bound = bound_in_ticks(1.0 / space.min_tokens_per_s, tick_s) if space.min_tokens_per_s is not None else MAX_BOUND_TICKS
    return Problem(
        workload=workload, space=space, model=model, gpus=gpus, keys=keys, constant_bytes=constant,
        budget_mib=budget_mib, capacity_bytes=key_capacity, state=state, activation=activation, tick_s=tick_s,
        bound_ticks=bound, choices=choices, kind="infer",
    )


def _dominant_counts(rows: list[tuple], objective: str) -> list[tuple]:
    """Replicas are independent, so for one replica layout (GPU type, tp, ep, pp, quantization,
    MIG profile) every GPU count gives the same per-replica plan times the replica count,
    and for max tokens/s the largest count dominates (its tokens/s is strictly higher for
    every item, and a minimum of concurrent slots only gets easier). Exact
    (tests/unit/test_serving_and_finetuning.py compares with the unpruned space). The
    other objectives keep every count: per-GPU throughput ties across counts only up to
    the integer rounding, and min-gpus needs the smallest count that reaches its target."""
    if objective != "throughput":
        return rows
    best: dict[tuple, tuple] = {}
    for row in rows:
        layout = (row[0],) + row[2:]
        if layout not in best or row[1] > best[layout][1]:
            best[layout] = row
    return [row for row in rows if best[(row[0],) + row[2:]] is row]


def _layouts_for_gpu(gpu, model, space, context, choices) -> tuple[np.ndarray, list[tuple]]:
    """The GPU counts, and each replica layout with the positions of the counts it divides:
    (count positions, (t, ep, p, quantization, mig positions), t, ep, p, quantization code,
    mig). Expert parallelism (costs/serving_experts.py): ep a multiple of tp dividing the
    routed experts, with pp 1 and whole GPUs; the replica is its ep GPUs."""
    counts = [count for count in domain("gpus", context, choices, gpu_counts(space.max_gpus, gpu.node.gpus_per_node, space.whole_nodes)) if count <= space.max_gpus]
    tensor = domain("tensor_parallel", context, choices)
    pipeline = domain("pipeline_parallel", context, choices)
    experts = model.moe.experts if model.moe is not None else 1
    expert = [(index, e) for index, e in enumerate(domain("expert_parallel", context, choices))
              if experts % e == 0 and (e == 1 or model.moe is not None)]
    quantizations = domain("quantization", context, choices)
    default_mig = (NO_MIG,) + tuple(profile.name for profile in gpu.mig_profiles)
    profiles = domain("mig_profile", context, choices, default_mig if "mig_profile" not in choices["allow"] else None)
    # This GPU's own profiles only (the names were checked against the searched GPU types).
    mig_codes = [mig_profile_code(gpu, name) for name in profiles if name == NO_MIG or gpu.mig_profile(name) is not None]
    count_array = np.array(counts, dtype=np.int64)
    layouts = []
    for (t_index, t), (e_index, e), (p_index, p) in itertools.product(enumerate(tensor), expert, enumerate(pipeline)):
        if model.heads % t != 0 or model.layers % p != 0:
            continue
        if t > gpu.node.gpus_per_node and not space.allow_tp_across_nodes:
            continue
        if e > 1 and (e % t != 0 or p > 1):
            continue
        replica = int(serving_replica_layout(t, p, e).world_size)
        positions = np.flatnonzero(count_array % replica == 0)
        if positions.size == 0:
            continue
        for (q_index, quantization), (m_index, mig) in itertools.product(enumerate(quantizations), enumerate(mig_codes)):
            if mig >= 0 and (t > 1 or p > 1 or e > 1):
                continue
            needs = FORMAT_NEEDS.get(quantization)
            if needs and not gpu.supports(needs):
                continue
            layouts.append((positions, (t_index, e_index, p_index, q_index, m_index), t, e, p, QUANTIZATIONS.index(quantization), mig))
    return count_array, layouts


def _row_count(count_array: np.ndarray, layouts: list[tuple]) -> int:
    return sum(int(layout[0].size) for layout in layouts)


def _rows(gpu_index: int, count_array: np.ndarray, layouts: list[tuple], largest_only: bool = False) -> list[tuple]:
    """The rows of the layouts in the fixed order (count position, then the layout's
    positions in the tp, ep, pp, quantization and MIG domains); ``largest_only``: only each
    layout's largest count (what ``_dominant_counts`` keeps for max tokens/s)."""
    ordered = []
    for positions, order, t, e, p, quantization, mig in layouts:
        if largest_only:
            positions = positions[[int(np.argmax(count_array[positions]))]]
        for position in positions.tolist():
            ordered.append(((position,) + order, (gpu_index, int(count_array[position]), t, e, p, quantization, mig)))
    ordered.sort(key=lambda pair: pair[0])
    return [row for _, row in ordered]


STATE_FIELDS = registry.SERVING_ITEM_FIELDS
"""The serving items' fields, in the registry's order (the items' tie-break order)."""

FORMAT_NEEDS = {"fp8": "fp8", "fp4": "fp4"}
"""Weight formats that need the GPU's tensor cores for them (int8/int4 dequantize to bf16)."""


def _items(gpus, contexts, choices) -> tuple[dict, ...]:
    """The state items: the product of each field's domain, a field's domain being the union
    of every searched GPU type's. The union runs over the GPU types in name order, so the
    items and their tie-break order do not depend on the order of ``--gpu``."""
    in_name_order = [contexts[index] for index in sorted(range(len(gpus)), key=lambda index: gpus[index].name)]
    domains = []
    for field_name in STATE_FIELDS:
        values: list = []
        for context in in_name_order:
            values.extend(value for value in domain(field_name, context, choices) if value not in values)
        domains.append(values)
    return tuple(dict(zip(STATE_FIELDS, combination)) for combination in itertools.product(*domains))


def _check_named_values(gpus, choices) -> None:
    """A weight format or MIG profile named in --pin or --allow must run on a searched GPU
    type: on the only one when one is searched, on at least one of several (the others
    simply lack those rows). Otherwise the request is an error, never an empty search."""
    for kind in ("pin", "allow"):
        for name in choices[kind].get("quantization", ()):
            needs = FORMAT_NEEDS.get(name)
            if needs is None or name in choices["forbid"].get("quantization", ()) or any(gpu.supports(needs) for gpu in gpus):
                continue
            if len(gpus) == 1:
                raise InputError(f"{gpus[0].name} cannot run {name} weights (no {needs} tensor cores); choose bf16, int8 or int4")
            raise InputError(f"none of the searched GPUs ({', '.join(gpu.name for gpu in gpus)}) can run {name} weights "
                             f"(no {needs} tensor cores); choose bf16, int8 or int4, or add a GPU with {needs}")
        for name in choices[kind].get("mig_profile", ()):
            if name == NO_MIG or name in choices["forbid"].get("mig_profile", ()) or any(gpu.mig_profile(name) is not None for gpu in gpus):
                continue
            if len(gpus) == 1:
                mig_profile_code(gpus[0], name)  # raises the clear error, with close names
            holders = [f"{gpu.name}: {', '.join(profile.name for profile in gpu.mig_profiles)}" for gpu in gpus if gpu.mig_profiles]
            raise InputError(f"no searched GPU has MIG profile '{name}'"
                             + (f" ({'; '.join(holders)})" if holders else " (none of them has MIG profiles)"))
