"""The integer tables of the disaggregated prefill/decode search (xPyD layouts).

A disaggregated plan is one prefill option (GPU type, weight format, KV dtype, prefill tp,
P replicas) and one decode option (the same GPU type, format and KV dtype; decode tp, D
replicas, speculative decoding, slots, paging), model ``costs/disaggregated_serving.py``.
The two options meet only through sums: the GPUs (P tp_p + D tp_d), the p99 TTFT (the
prefill's wait and time, the transfer, the decode step), and through the smaller of their
capacities, so each side is one table row and the search is over pairs
(``optimizer/disaggregated_search.py``: exhaustive and CP-SAT on the same integers).

Exact reductions before the pairs: a side's figures do not depend on the other's count, so
each option is evaluated once. On the decode side the step at the load, the TPOT and the
transfer do not depend on the slots or on paging, and the capacity does not decrease with
the slots (``batch / step(batch)``: every piece of the step is affine with a non-negative
intercept), so of the items of one (tp, format, KV dtype, speculative, D) only the largest
slot count that fits memory and holds the running sequences can be best: it is the one
option kept. Times are whole microseconds rounded up, capacities whole output tokens/s
rounded down, so a pair the integers accept meets its targets in floating point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vramopt.constraints.mig import NO_MIG
from vramopt.constraints.parallelism import gpu_counts
from vramopt.constraints.technique import DomainContext
from vramopt.constraints.validity import serving_invalid_reasons
from vramopt.costs.disaggregated_serving import decode_figures, link_utilization, prefill_figures, prefill_slots, transfer_seconds_per_token
from vramopt.costs.inference import KV_CACHE_DTYPES, QUANTIZATIONS, ServingColumns, evaluate_serving
from vramopt.disaggregated import replica_cases
from vramopt.estimate import serving_case
from vramopt.models.checkpoint_quantization import checkpoint_format
from vramopt.optimizer.domains import domain, parsed_user_choices
from vramopt.optimizer.serving_problem import FORMAT_NEEDS, _items
from vramopt.optimizer.tables import gpu_types
from vramopt.types import PRECISIONS

TICK_S = 1e-6
"""The integer time unit of the tables: one microsecond."""


@dataclass(frozen=True, slots=True)
class Side:
    """One table: a row per option, columns as named arrays."""

    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return int(self.columns["gpus"].size)


@dataclass(frozen=True, slots=True)
class DisaggregatedTables:
    prefill: Side
    """gpu_index, tensor_parallel, replicas, quantization, kv_cache_dtype, gpus, ttft_ticks,
    capacity_tokens_per_s, link_inside_ok, link_outside_ok."""
    decode: Side
    """the same and speculative, paged_kv, slots; ttft_ticks is the decode step."""
    transfer_ticks: dict[tuple[int, int, int, int, bool], int]
    """(gpu_index, kv dtype code, prefill tp, decode tp, inside one node) -> the tail prompt's transfer."""
    counts: tuple[tuple[int, ...], ...]
    """Per GPU type, the allowed total GPU counts."""
    gpus_per_node: tuple[int, ...]
    gpu_names: tuple[str, ...]
    ttft_target_ticks: int | None
    max_gpus: int
    capacity_floor: int


def _context(gpu, model, space) -> DomainContext:
    return DomainContext(
        layers=model.layers, gpus_per_node=gpu.node.gpus_per_node, max_gpus=space.max_gpus, global_batch=1,
        allow_tp_across_nodes=space.allow_tp_across_nodes, allow_fp4=space.allow_fp4,
        supported_precisions=tuple(name for name in PRECISIONS if gpu.supports(name)), kind="infer",
        checkpoint_format=checkpoint_format(model),
    )


def _columns(tp, quantization, kv, paged, speculative, slots) -> ServingColumns:
    size = np.size(tp)

    def column(value):
        return np.broadcast_to(np.asarray(value, dtype=np.int64), (size,)).copy()

    return ServingColumns(
        gpus=column(tp), tensor_parallel=column(tp), pipeline_parallel=column(1), quantization=column(quantization),
        kv_cache_dtype=column(kv), paged_kv=column(paged), speculative=column(speculative), slots=column(slots), mig_profile=column(-1),
    )


def _usable(case, columns, values) -> np.ndarray:
    ok = np.asarray(values["fits"], dtype=bool).copy()
    for mask in serving_invalid_reasons(case, columns).values():
        ok &= ~np.asarray(mask, dtype=bool)
    return ok


def _ticks(seconds) -> np.ndarray:
    """Whole microseconds, rounded up; -1 where the time is not finite."""
    seconds = np.asarray(seconds, dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(np.isfinite(seconds), np.ceil(seconds / TICK_S), -1).astype(np.int64)


def _tokens(requests_per_s, output_tokens: float) -> np.ndarray:
    value = np.asarray(requests_per_s, dtype=float) * output_tokens
    return np.where(np.isfinite(value), np.floor(value), 0).astype(np.int64)


def _select(rows: dict[str, list], keep: np.ndarray) -> dict[str, np.ndarray]:
    return {name: np.asarray(values)[keep] for name, values in rows.items()}


def build_disaggregated_tables(workload, space, gpu_bound: int | None = None, capacity_floor: int | None = None) -> DisaggregatedTables | None:
    """The prefill and decode option tables of every searched GPU type; None when the
    workload has no request rate. Choices that exclude the layout (pp > 1 or a MIG profile
    pinned) leave the tables empty. ``gpu_bound``: only totals up to it (a plan must use no
    more GPUs than the colocated answer to beat it under min-gpus); ``capacity_floor``: only
    options of at least that many output tokens/s (to beat it under max throughput)."""
    if workload.rate_per_s is None or (workload.input_tokens is None and workload.length_samples is None):
        return None
    choices = parsed_user_choices(space)
    gpus = gpu_types(space, choices)
    prefill_rows: dict[str, list] = {name: [] for name in ("gpu_index", "tensor_parallel", "replicas", "quantization", "kv_cache_dtype",
                                                          "gpus", "ttft_ticks", "capacity_tokens_per_s", "link_inside_ok", "link_outside_ok")}
    decode_rows: dict[str, list] = {name: [] for name in list(prefill_rows) + ["speculative", "paged_kv", "slots"]}
    transfer: dict = {}
    counts_per_gpu, per_node, target_ticks = [], [], None
    for gpu_index, gpu in enumerate(gpus):
        case = serving_case(workload, gpu.name)
        load, model = case.requests, case.model
        if load.ttft_p99_s is not None:
            target_ticks = int(np.floor(load.ttft_p99_s / TICK_S + 1e-9))
        context = _context(gpu, model, space)
        counts = tuple(count for count in domain("gpus", context, choices, gpu_counts(space.max_gpus, gpu.node.gpus_per_node, space.whole_nodes))
                       if count <= space.max_gpus and (gpu_bound is None or count <= gpu_bound))
        counts_per_gpu.append(counts)
        per_node.append(gpu.node.gpus_per_node)
        if not counts:
            continue
        migs = domain("mig_profile", context, choices, (NO_MIG,) if "mig_profile" not in choices["allow"] else None)
        if 1 not in domain("pipeline_parallel", context, choices) or NO_MIG not in migs:
            continue
        tensor = [t for t in domain("tensor_parallel", context, choices) if model.heads % t == 0
                  and (t <= gpu.node.gpus_per_node or space.allow_tp_across_nodes) and t < max(counts)]
        formats = [QUANTIZATIONS.index(name) for name in domain("quantization", context, choices)
                   if not FORMAT_NEEDS.get(name) or gpu.supports(FORMAT_NEEDS[name])]
        items = _items([gpu], [context], choices)
        kv_codes = sorted({KV_CACHE_DTYPES.index(item["kv_cache_dtype"]) for item in items})
        if not tensor or not formats or not items:
            continue
        prefill_case, decode_case = replica_cases(case)
        _prefill_options(prefill_rows, gpu_index, prefill_case, tensor, formats, kv_codes, max(counts), load, workload)
        _decode_options(decode_rows, gpu_index, decode_case, tensor, formats, items, max(counts), load)
        for kv in kv_codes:
            for tp_p in tensor:
                for tp_d in tensor:
                    for inside in (True, False):
                        seconds = transfer_seconds_per_token(case, KV_CACHE_DTYPES[kv], tp_p, tp_d, 1 if inside else gpu.node.gpus_per_node + 1)
                        tail = float(np.quantile(np.asarray(load.inputs, dtype=float), 0.995)) if len(set(load.inputs)) > 1 else float(load.inputs[0])
                        transfer[(gpu_index, kv, tp_p, tp_d, inside)] = int(_ticks(tail * float(seconds)))
    floor = 0 if capacity_floor is None else capacity_floor
    prefill_keep = (np.asarray(prefill_rows["ttft_ticks"], dtype=np.int64) >= 0) & (np.asarray(prefill_rows["capacity_tokens_per_s"], dtype=np.int64) >= floor)
    decode_keep = (np.asarray(decode_rows["ttft_ticks"], dtype=np.int64) >= 0) & (np.asarray(decode_rows["capacity_tokens_per_s"], dtype=np.int64) >= floor)
    return DisaggregatedTables(
        prefill=Side(_select(prefill_rows, prefill_keep)), decode=Side(_select(decode_rows, decode_keep)), transfer_ticks=transfer,
        counts=tuple(counts_per_gpu), gpus_per_node=tuple(per_node), gpu_names=tuple(gpu.name for gpu in gpus),
        ttft_target_ticks=target_ticks, max_gpus=space.max_gpus if gpu_bound is None else min(space.max_gpus, gpu_bound),
        capacity_floor=floor,
    )


def _expand(indices, tensor_parallel, most: int) -> tuple[np.ndarray, np.ndarray]:
    """(base row of each option, its replica count): every count 1..most // tp of each row."""
    counts = [most // int(t) for t in tensor_parallel]
    base = np.repeat(np.asarray(indices, dtype=np.int64), counts)
    replicas = np.concatenate([np.arange(1, count + 1) for count in counts]) if counts else np.zeros(0, dtype=np.int64)
    return base, replicas


def _links(case, kv_codes, tensor_parallel, replicas, rate_per_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(link below full use inside one node, across nodes) per option."""
    inside, outside = np.zeros(kv_codes.size, dtype=bool), np.zeros(kv_codes.size, dtype=bool)
    for code, name in enumerate(KV_CACHE_DTYPES):
        rows = kv_codes == code
        if rows.any():
            inside[rows] = link_utilization(case, name, tensor_parallel[rows], replicas[rows], 1, rate_per_s) < 1.0
            outside[rows] = link_utilization(case, name, tensor_parallel[rows], replicas[rows], case.gpu.node.gpus_per_node + 1, rate_per_s) < 1.0
    return inside, outside


def _rows_of(values, base) -> dict:
    return {name: np.asarray(value)[base] if np.ndim(value) else value for name, value in values.items()}


def _prefill_options(rows, gpu_index, case, tensor, formats, kv_codes, most, load, workload) -> None:
    """Every (tp, format, KV dtype) that fits with its prompt pool, at every replica count."""
    slots = prefill_slots(load, case.prefill_chunk_tokens)
    grid = np.array([(t, q, kv) for t in tensor for q in formats for kv in kv_codes], dtype=np.int64).reshape(-1, 3)
    columns = _columns(grid[:, 0], grid[:, 1], grid[:, 2], 1, 0, slots)
    values = evaluate_serving(case, columns)
    usable = np.flatnonzero(_usable(case, columns, values))
    base, replicas = _expand(usable, grid[usable, 0], most)
    if base.size == 0:
        return
    t, q, kv = grid[base, 0], grid[base, 1], grid[base, 2]
    figures = prefill_figures(case, _columns(t, q, kv, 1, 0, slots), _rows_of(values, base), replicas, load.rate_per_s)
    inside, outside = _links(case, kv, t, replicas, load.rate_per_s)
    _append(rows, gpu_index=gpu_index, tensor_parallel=t, replicas=replicas, quantization=q, kv_cache_dtype=kv, gpus=replicas * t,
            ttft_ticks=np.where(figures["stable"], _ticks(figures["prefill_tail_s"] + figures["wait_tail_s"]), -1),
            capacity_tokens_per_s=_tokens(figures["capacity_requests_per_s"], load.output_tokens),
            link_inside_ok=inside, link_outside_ok=outside)


def _decode_options(rows, gpu_index, case, tensor, formats, items, most, load) -> None:
    """Per (tp, format, KV dtype, speculative, D): the largest fitting slot count, if it
    holds the running sequences and meets the TPOT target."""
    item_codes = np.array([(KV_CACHE_DTYPES.index(item["kv_cache_dtype"]), int(item["paged_kv"]), int(item["speculative_decoding"]),
                            item["slots"]) for item in items], dtype=np.int64)
    grid = np.array([(t, q, *codes) for t in tensor for q in formats for codes in item_codes.tolist()], dtype=np.int64)
    columns = _columns(grid[:, 0], grid[:, 1], grid[:, 2], grid[:, 3], grid[:, 4], grid[:, 5])
    values = evaluate_serving(case, columns)
    best: dict[tuple, int] = {}
    for index in np.flatnonzero(_usable(case, columns, values)).tolist():
        t, q, kv, _, speculative, slots = grid[index].tolist()
        group = (t, q, kv, speculative)
        if group not in best or slots > grid[best[group], 5]:
            best[group] = index
    base, replicas = _expand(list(best.values()), grid[list(best.values()), 0], most)
    if base.size == 0:
        return
    chosen = grid[base]
    t, q, kv, paged, speculative, slots = (chosen[:, column] for column in range(6))
    figures = decode_figures(case, _columns(t, q, kv, paged, speculative, slots), _rows_of(values, base), replicas, load.rate_per_s)
    ok = figures["sustained"] & (figures["tpot_s"] <= (load.tpot_s if load.tpot_s is not None else np.inf))
    inside, outside = _links(case, kv, t, replicas, load.rate_per_s)
    _append(rows, gpu_index=gpu_index, tensor_parallel=t, replicas=replicas, quantization=q, kv_cache_dtype=kv, gpus=replicas * t,
            ttft_ticks=np.where(ok, _ticks(figures["decode_step_s"]), -1),
            capacity_tokens_per_s=_tokens(figures["capacity_requests_per_s"], load.output_tokens),
            link_inside_ok=inside, link_outside_ok=outside, speculative=speculative, paged_kv=paged, slots=slots)


def _append(rows: dict[str, list], **columns) -> None:
    size = np.size(columns["replicas"])
    for name, value in columns.items():
        rows[name].extend(np.broadcast_to(np.asarray(value), (size,)).tolist())
