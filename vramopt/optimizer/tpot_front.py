"""``pareto --axes tpot``: the serving front of output tokens/s per GPU (up) against the time
per output token (down), the plot NVIDIA's AIConfigurator and Dynamo's planner draw (issue 16
objective 5).

Candidates are the serving table's rows (``optimizer/serving_problem.py`` with every GPU
count kept): each layout (GPU type and count, tp, ep, pp, weight format, MIG) with each item
(KV cache, paging, speculative decoding, slots) that is well formed, meets the request
targets and fits by the solver's own integer memory rule (``memory_mib <= budget_mib``).
The slots sweep the batch, so one layout contributes the points of its batch sizes, as the
tools sweep the concurrency.

Per candidate, in floating point (``costs/inference.evaluate_serving``):
- x = the time per output token at the operating point: the mean TPOT at the offered rate or
  concurrency, at saturation the step of the largest batch (``latency_per_token_s``);
  without request lengths the decode-only step's latency;
- y = output tokens/s per GPU at that operating point: the tokens served at the rate or the
  clients (``output_tokens_per_s_at_load``), the capacity at saturation, the decode-only
  tokens/s without request lengths; over the deployment's GPUs.

The front is exact: sort by x, then y descending, then the table's order (key, then item);
keep a point when its y beats every point before it. ``verify_tpot_front`` re-checks it
against every candidate pairwise (no candidate dominates a front point, every other
candidate is dominated by or equal to one), which shares nothing with the sweep but the
candidates.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from vramopt.costs.inference import ServingColumns, evaluate_serving
from vramopt.errors import InputError
from vramopt.estimate import serving_case
from vramopt.optimizer.serving_problem import SERVING_KEY_COLUMNS, build_serving_problem, item_codes
from vramopt.results import SCHEMA, model_summary
from vramopt.types import SearchSpace, ServingWorkload

AXES = ("time per output token (ms): minimize", "output tokens/s per GPU: maximize")


@dataclass(frozen=True, slots=True)
class Candidates:
    """The feasible rows of a serving table: their key and item, and both axes."""

    keys: np.ndarray
    items: np.ndarray
    tpot_s: np.ndarray
    tokens_per_s_per_gpu: np.ndarray


def candidates(problem, workload: ServingWorkload) -> Candidates:
    """Every row the solver could choose (valid, fitting), evaluated per GPU type as the
    table was (the same columns, so the same values)."""
    key_count, item_count = problem.key_count, len(problem.state.values)
    fits = problem.state.valid & (problem.state.memory_mib <= problem.budget_mib[:, None])
    codes = {name: np.repeat(problem.keys[name], item_count) for name in SERVING_KEY_COLUMNS}
    codes.update(item_codes(problem.state.values, key_count))
    gpu_index = np.repeat(problem.keys["gpu_index"], item_count)
    tpot = np.full(key_count * item_count, np.inf)
    per_gpu = np.zeros(key_count * item_count)
    rows_fit = fits.reshape(-1)
    for index, gpu in enumerate(problem.gpus):
        rows = np.flatnonzero((gpu_index == index) & rows_fit)
        if rows.size == 0:
            continue
        columns = ServingColumns(**{name: codes[name][rows] for name in ServingColumns.__dataclass_fields__})
        values = evaluate_serving(serving_case(workload, gpu.name), columns)
        # With request lengths: the tokens served at the load (at saturation, the capacity).
        tokens = values.get("output_tokens_per_s_at_load", values["tokens_per_s"])
        tpot[rows] = values["latency_per_token_s"]
        per_gpu[rows] = tokens / columns.gpus
    keep = np.flatnonzero(rows_fit & np.isfinite(tpot) & (per_gpu > 0))
    return Candidates(keys=keep // item_count, items=keep % item_count, tpot_s=_significant(tpot[keep]),
                      tokens_per_s_per_gpu=_significant(per_gpu[keep]))


SIGNIFICANT_DIGITS = 12
"""Both axes are compared at 12 significant digits: the same replica layout at another GPU
count has the same figures up to floating-point rounding (replicas x per-replica / GPUs),
and is a tie, not a strictly better point."""


def _significant(values: np.ndarray) -> np.ndarray:
    exponent = np.floor(np.log10(np.abs(values)))
    scale = 10.0 ** (SIGNIFICANT_DIGITS - 1 - exponent)
    return np.round(values * scale) / scale


def exact_tpot_front(found: Candidates) -> np.ndarray:
    """Positions (into ``found``) of the non-dominated candidates, lowest TPOT first."""
    order = np.lexsort((found.items, found.keys, -found.tokens_per_s_per_gpu, found.tpot_s))
    front, best = [], -np.inf
    for position in order:
        if found.tokens_per_s_per_gpu[position] > best:
            front.append(int(position))
            best = found.tokens_per_s_per_gpu[position]
    return np.array(front, dtype=np.int64)


def verify_tpot_front(found: Candidates, front: np.ndarray) -> list[str]:
    """What the pairwise check finds wrong with ``front`` (empty when it is exact): a point
    another candidate dominates, two points of the same values, a candidate no point covers."""
    x, y = found.tpot_s, found.tokens_per_s_per_gpu
    problems = []
    for position in front:
        beats = (x <= x[position]) & (y >= y[position]) & ((x < x[position]) | (y > y[position]))
        if beats.any():
            problems.append(f"front point {int(position)} is dominated by candidate {int(np.flatnonzero(beats)[0])}")
    if len({(float(x[position]), float(y[position])) for position in front}) < len(front):
        problems.append("two front points have the same TPOT and tokens/s per GPU (a tie keeps one)")
    on_front = np.zeros(x.size, dtype=bool)
    on_front[front] = True
    fx, fy = x[front][:, None], y[front][:, None]
    covered = ((fx <= x[None, :]) & (fy >= y[None, :])).any(axis=0)
    for position in np.flatnonzero(~on_front & ~covered):
        problems.append(f"candidate {int(position)} is neither on the front nor dominated by it")
    return problems


def tpot_front_response(workload, space: SearchSpace, verify: bool = False) -> dict[str, Any]:
    """The front as a v1 response: one row per point with its plan, memory, throughput and
    request figures (the estimate's), and the two axes."""
    from vramopt.estimate import estimate_serving
    from vramopt.optimizer.decode import decode_choice
    from vramopt.optimizer.oracle import Choice

    if not isinstance(workload, ServingWorkload):
        raise InputError("--axes tpot is the serving front (time per output token against tokens/s per GPU): use --workload infer")
    if space.objective != "throughput" or space.min_tokens_per_s is not None:
        raise InputError("the TPOT front covers tokens/s per GPU and TPOT at once: --objective and --min-tokens-per-s do not apply")
    started = time.perf_counter()
    problem = build_serving_problem(workload, space, prune_counts=False)
    found = candidates(problem, workload)
    front = exact_tpot_front(found)
    if verify:
        problems = verify_tpot_front(found, front)
        if problems:
            raise InputError(f"internal error: the TPOT front is not exact: {'; '.join(problems[:3])}")
    target_s = None if workload.tpot_ms is None else workload.tpot_ms / 1e3
    within = [position for position in front if target_s is None or found.tpot_s[position] <= target_s]
    chosen = max(within, key=lambda position: found.tokens_per_s_per_gpu[position]) if within else None
    rows = []
    for position in front:
        choice = Choice(int(found.keys[position]), int(found.items[position]), 0, (0, 0, 0, 0))
        response = estimate_serving(workload, decode_choice(problem, choice)).to_dict()
        row = {"chosen": bool(position == chosen), "tpot_ms": float(found.tpot_s[position]) * 1e3,
               "output_tokens_per_s_per_gpu": float(found.tokens_per_s_per_gpu[position]),
               "plan": response["plan"], "memory": response["memory"], "throughput": response["throughput"]}
        if "requests" in response:
            row["requests"] = response["requests"]
        rows.append(row)
    return {
        "schema": SCHEMA,
        "workload": workload.kind,
        "model": model_summary(problem.model),
        "objectives": list(AXES),
        "front": rows,
        "solver": {
            "method": "exact enumeration of the serving table's feasible rows (a sort and a running maximum)"
            + ("; checked pairwise against every candidate" if verify else ""),
            "points": len(rows),
            "candidates": int(found.keys.size),
            "candidate_layouts": problem.key_count,
            "wall_time_s": time.perf_counter() - started,
        },
    }


def tpot_rows_for_csv(response: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per front point: the axes first, then the plan, memory and throughput."""
    rows = []
    for point in response["front"]:
        row: dict[str, Any] = {"chosen": point["chosen"], "tpot_ms": point["tpot_ms"],
                               "output_tokens_per_s_per_gpu": point["output_tokens_per_s_per_gpu"]}
        for section in ("plan", "memory", "throughput", "requests"):
            for key, value in point.get(section, {}).items():
                if not isinstance(value, (dict, list)):
                    row[f"{section}.{key}"] = value
        rows.append(row)
    return rows
