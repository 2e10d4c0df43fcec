"""The best disaggregated prefill/decode plan: CP-SAT and an exhaustive check over the same
integer tables (``optimizer/disaggregated_tables.py``).

A pair (prefill option i, decode option j) is a plan when both share the GPU type, weight
format and KV dtype, their GPUs P tp_p + D tp_d are an allowed count within the limit, both
links stay below full use where the plan sits (one node or several), and the p99 TTFT ticks
``A_i + X(tp_p, tp_d, KV dtype, one node) + B_j`` stay within the target. Its capacity is
``min(z_i, z_j)`` output tokens/s. Objectives, lexicographic, with the options' indices last
(a fixed order, so both engines return the same plan):

- min-gpus: fewest GPUs, then the most capacity;
- throughput: the most capacity, then the fewest GPUs.

CP-SAT: one Boolean per option, exactly one of each side, a class balance per (GPU type,
format, KV dtype), the total as a linear expression in the allowed counts, a Boolean for
"one node" tied to the total, the transfer as a variable bounded below by each (tp_p, tp_d)
pair's ticks when both are chosen, and the capacity as a variable below both sides'. Solved
in stages (primary, secondary, index order), as the main model is (optimizer/solve.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vramopt.optimizer.disaggregated_tables import DisaggregatedTables

OBJECTIVES = ("min-gpus", "throughput")


@dataclass(frozen=True, slots=True)
class PairChoice:
    prefill: int
    decode: int
    gpus: int
    capacity_tokens_per_s: int


def _pair_arrays(tables: DisaggregatedTables):
    """Per class, the (prefill rows, decode rows) that share GPU type, format and KV dtype."""
    prefill, decode = tables.prefill.columns, tables.decode.columns
    key = ("gpu_index", "quantization", "kv_cache_dtype")
    classes = {}
    for index in range(prefill["gpus"].size):
        classes.setdefault(tuple(int(prefill[name][index]) for name in key), ([], []))[0].append(index)
    for index in range(decode["gpus"].size):
        group = tuple(int(decode[name][index]) for name in key)
        if group in classes:
            classes[group][1].append(index)
    return [(group, np.array(rows_p), np.array(rows_d)) for group, (rows_p, rows_d) in classes.items() if rows_d]


def valid_pairs(tables: DisaggregatedTables):
    """Every valid pair: (prefill indices, decode indices, GPUs, capacities), exhaustively."""
    prefill, decode = tables.prefill.columns, tables.decode.columns
    found = ([], [], [], [])
    for (gpu_index, _, kv), rows_p, rows_d in _pair_arrays(tables):
        total = prefill["gpus"][rows_p][:, None] + decode["gpus"][rows_d][None, :]
        allowed = np.isin(total, np.array(tables.counts[gpu_index], dtype=np.int64))
        inside = total <= tables.gpus_per_node[gpu_index]
        links = np.where(inside, prefill["link_inside_ok"][rows_p][:, None] & decode["link_inside_ok"][rows_d][None, :],
                         prefill["link_outside_ok"][rows_p][:, None] & decode["link_outside_ok"][rows_d][None, :])
        ok = allowed & links
        if tables.ttft_target_ticks is not None:
            tp_p, tp_d = prefill["tensor_parallel"][rows_p], decode["tensor_parallel"][rows_d]
            transfer_in = np.array([[tables.transfer_ticks[(gpu_index, kv, int(a), int(b), True)] for b in tp_d] for a in tp_p], dtype=np.int64)
            transfer_out = np.array([[tables.transfer_ticks[(gpu_index, kv, int(a), int(b), False)] for b in tp_d] for a in tp_p], dtype=np.int64)
            ttft = prefill["ttft_ticks"][rows_p][:, None] + decode["ttft_ticks"][rows_d][None, :] + np.where(inside, transfer_in, transfer_out)
            ok &= ttft <= tables.ttft_target_ticks
        first, second = np.nonzero(ok)
        found[0].append(rows_p[first])
        found[1].append(rows_d[second])
        found[2].append(total[first, second])
        found[3].append(np.minimum(prefill["capacity_tokens_per_s"][rows_p[first]], decode["capacity_tokens_per_s"][rows_d[second]]))
    if not found[0]:
        return tuple(np.zeros(0, dtype=np.int64) for _ in range(4))
    return tuple(np.concatenate(part).astype(np.int64) for part in found)


def solve_exhaustive(tables: DisaggregatedTables, objective: str) -> PairChoice | None:
    first, second, gpus, capacity = valid_pairs(tables)
    if first.size == 0:
        return None
    primary, secondary = (gpus, -capacity) if objective == "min-gpus" else (-capacity, gpus)
    best = np.lexsort((second, first, secondary, primary))[0]
    return PairChoice(int(first[best]), int(second[best]), int(gpus[best]), int(capacity[best]))


def solve_cp_sat(tables: DisaggregatedTables, objective: str, time_limit_s: float, workers: int) -> PairChoice | None:
    from ortools.sat.python import cp_model

    from vramopt.optimizer.cancel import run_solver

    prefill, decode = tables.prefill.columns, tables.decode.columns
    classes = _pair_arrays(tables)
    if not classes:
        return None
    model = cp_model.CpModel()
    x = {int(i): model.new_bool_var(f"p{i}") for _, rows, _ in classes for i in rows}
    y = {int(j): model.new_bool_var(f"d{j}") for _, _, rows in classes for j in rows}
    model.add_exactly_one(x.values())
    model.add_exactly_one(y.values())
    for _, rows_p, rows_d in classes:
        model.add(sum(x[int(i)] for i in rows_p) == sum(y[int(j)] for j in rows_d))
    total = sum(int(prefill["gpus"][i]) * var for i, var in x.items()) + sum(int(decode["gpus"][j]) * var for j, var in y.items())
    inside = model.new_bool_var("inside")
    for gpu_index in sorted({group[0] for group, _, _ in classes}):
        chosen = model.new_bool_var(f"gpu{gpu_index}")
        model.add(sum(x[int(i)] for group, rows, _ in classes if group[0] == gpu_index for i in rows) == chosen)
        model.add_linear_expression_in_domain(total, cp_model.Domain.from_values(list(tables.counts[gpu_index]))).only_enforce_if(chosen)
        node = tables.gpus_per_node[gpu_index]
        model.add(total <= node).only_enforce_if([inside, chosen])
        model.add(total >= node + 1).only_enforce_if([inside.Not(), chosen])
    for table, variables in ((prefill, x), (decode, y)):
        for index, var in variables.items():
            if not table["link_inside_ok"][index]:
                model.add_implication(var, inside.Not())
            if not table["link_outside_ok"][index]:
                model.add_implication(var, inside)
    if tables.ttft_target_ticks is not None:
        transfer = model.new_int_var(0, max(tables.transfer_ticks.values(), default=0), "transfer")
        sides = {}
        for (gpu_index, _, kv), rows_p, rows_d in classes:
            for table, rows, variables, name in ((prefill, rows_p, x, "p"), (decode, rows_d, y, "d")):
                for index in rows:
                    sides.setdefault((name, gpu_index, kv, int(table["tensor_parallel"][index])), []).append(variables[int(index)])
        literals = {}
        for key, members in sides.items():
            literals[key] = model.new_bool_var(str(key))
            model.add(sum(members) == literals[key])
        for (gpu_index, kv, tp_p, tp_d, in_node), ticks in tables.transfer_ticks.items():
            chosen_p, chosen_d = literals.get(("p", gpu_index, kv, tp_p)), literals.get(("d", gpu_index, kv, tp_d))
            if chosen_p is None or chosen_d is None:
                continue
            model.add(transfer >= ticks).only_enforce_if([chosen_p, chosen_d, inside if in_node else inside.Not()])
        model.add(sum(int(prefill["ttft_ticks"][i]) * var for i, var in x.items())
                  + sum(int(decode["ttft_ticks"][j]) * var for j, var in y.items()) + transfer <= tables.ttft_target_ticks)
    most = int(max(prefill["capacity_tokens_per_s"].max(initial=0), decode["capacity_tokens_per_s"].max(initial=0)))
    capacity = model.new_int_var(0, most, "capacity")
    model.add(capacity <= sum(int(prefill["capacity_tokens_per_s"][i]) * var for i, var in x.items()))
    model.add(capacity <= sum(int(decode["capacity_tokens_per_s"][j]) * var for j, var in y.items()))
    width = max(y) + 1
    rank = sum(i * width * var for i, var in x.items()) + sum(j * var for j, var in y.items())
    stages = [total, -capacity] if objective == "min-gpus" else [-capacity, total]
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = max(time_limit_s, 0.01)
    solver.parameters.cp_model_probing_level = 0
    for expression in stages + [rank]:
        model.minimize(expression)
        status = run_solver(solver, model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return None
        value = int(round(solver.objective_value))
        model.add(expression == value)
        model.clear_hints()
        for var in list(x.values()) + list(y.values()):
            model.add_hint(var, solver.boolean_value(var))
    chosen_p = next(i for i, var in x.items() if solver.boolean_value(var))
    chosen_d = next(j for j, var in y.items() if solver.boolean_value(var))
    return PairChoice(chosen_p, chosen_d, int(solver.value(total)), int(solver.value(capacity)))
