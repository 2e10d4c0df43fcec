"""Disaggregated prefill/decode against the colocated answer, for a solve's response.

Under ``--objective min-gpus`` or ``throughput`` with a request rate, the best
disaggregated plan (``disaggregated_search``) is searched with the same engine as the
colocated one and re-checked in floating point (``vramopt.disaggregated``). It is the
answer when the objective prefers it: fewer GPUs, or as many with more capacity (min-gpus);
more capacity, or as much on fewer GPUs (throughput); a tie keeps the colocated plan (one
engine, one launch). Only plans that could win are searched: at most the colocated plan's
GPUs (min-gpus), at least its capacity (throughput); with no colocated plan, every plan
within ``--max-gpus``.
"""

from __future__ import annotations

import math
import time
from typing import Any

from vramopt.disaggregated import DisaggregatedPlan, estimate_disaggregated
from vramopt.errors import VramoptError
from vramopt.optimizer.disaggregated_search import OBJECTIVES, solve_cp_sat, solve_exhaustive
from vramopt.optimizer.disaggregated_tables import build_disaggregated_tables
from vramopt.costs.inference import KV_CACHE_DTYPES, QUANTIZATIONS

MODEL = ("prefill replicas run prompts only (M/G/1 queue of prompts, full step budget), the KV cache of each request "
         "moves to a decode replica (prompt tokens x KV bytes per token over NVLink inside one node, the network across "
         "nodes), decode replicas run decodes only; TTFT = prefill wait + prefill + KV transfer + one decode step")


def _plan(tables, choice) -> DisaggregatedPlan:
    prefill = {name: values[choice.prefill] for name, values in tables.prefill.columns.items()}
    decode = {name: values[choice.decode] for name, values in tables.decode.columns.items()}
    return DisaggregatedPlan(
        gpu=tables.gpu_names[int(prefill["gpu_index"])], prefill_replicas=int(prefill["replicas"]),
        prefill_tensor_parallel=int(prefill["tensor_parallel"]), decode_replicas=int(decode["replicas"]),
        decode_tensor_parallel=int(decode["tensor_parallel"]), quantization=QUANTIZATIONS[int(prefill["quantization"])],
        kv_cache_dtype=KV_CACHE_DTYPES[int(prefill["kv_cache_dtype"])], paged_kv=bool(decode["paged_kv"]),
        decode_slots=int(decode["slots"]), speculative_decoding=bool(decode["speculative"]),
    )


def _wins(objective: str, gpus: int, tokens: float, colocated) -> bool:
    if colocated is None:
        return True
    colocated_gpus, colocated_tokens = colocated.plan.gpus, math.floor(colocated.tokens_per_s)
    if objective == "min-gpus":
        return gpus < colocated_gpus or (gpus == colocated_gpus and tokens > colocated_tokens)
    return tokens > colocated_tokens or (tokens == colocated_tokens and gpus < colocated_gpus)


def compare_disaggregated(workload, space, engine: str, colocated) -> dict[str, Any] | None:
    """The response's ``disaggregation`` object; None when it is not searched (no request
    rate, another objective, or ``disaggregation="off"`` on the workload)."""
    if (getattr(workload, "disaggregation", "auto") == "off" or space.objective not in OBJECTIVES
            or workload.rate_per_s is None or (workload.input_tokens is None and workload.length_samples is None)):
        return None
    started = time.perf_counter()
    bound = colocated.plan.gpus if colocated is not None and space.objective == "min-gpus" else None
    floor = math.floor(colocated.tokens_per_s) if colocated is not None and space.objective == "throughput" else None
    tables = build_disaggregated_tables(workload, space, gpu_bound=bound, capacity_floor=floor)
    if tables is None:
        return None
    if engine == "exhaustive":
        choice = solve_exhaustive(tables, space.objective)
    else:
        choice = solve_cp_sat(tables, space.objective, max(space.time_limit_s - (time.perf_counter() - started), 0.01), space.workers)
    searched = {"engine": engine, "prefill_options": len(tables.prefill), "decode_options": len(tables.decode),
                "gpu_bound": bound, "capacity_floor_tokens_per_s": floor}
    if choice is None:
        return {"searched": searched, "chosen": False, "plan": None, "requests": None,
                "why": _why_none(space, colocated, bound, floor), "model": MODEL}
    plan = _plan(tables, choice)
    figures = estimate_disaggregated(workload, plan)
    _verify(workload, figures)
    chosen = _wins(space.objective, plan.gpus, choice.capacity_tokens_per_s, colocated)
    return {"searched": searched, "chosen": chosen, "plan": plan.to_dict(), "requests": _requests(figures),
            "why": _why(space.objective, plan, figures, colocated, chosen, workload, space), "model": MODEL}


def _verify(workload, figures) -> None:
    """The integer tables round times up, so the chosen plan meets its targets in floats."""
    ok = figures["fits"] and figures["sustainable"]
    if workload.ttft_p99_ms is not None:
        ok &= figures["ttft_p99_s"] * 1e3 <= workload.ttft_p99_ms * (1 + 1e-12)
    if workload.tpot_ms is not None:
        ok &= figures["tpot_s"] * 1e3 <= workload.tpot_ms * (1 + 1e-12)
    if not ok:
        raise VramoptError(f"internal error: the disaggregated plan fails its floating-point check: {figures['plan']}")


def _ms(seconds: float) -> float | None:
    return seconds * 1e3 if math.isfinite(seconds) else None


def _requests(figures) -> dict[str, Any]:
    prefill, decode = figures["prefill"], figures["decode"]
    return {
        "ttft_p99_ms": _ms(figures["ttft_p99_s"]), "ttft_mean_ms": _ms(figures["ttft_mean_s"]), "tpot_ms": _ms(figures["tpot_s"]),
        "tpot_p99_ms": _ms(figures["tpot_p99_s"]),
        "kv_transfer_ms": figures["transfer_s"] * 1e3, "kv_transfer_bytes_per_request": figures["transfer_bytes_per_request"],
        "inside_one_node": figures["inside_one_node"],
        "capacity_requests_per_s": figures["capacity_requests_per_s"], "capacity_output_tokens_per_s": figures["capacity_tokens_per_s"],
        "prefill": {"prefill_ms": prefill["prefill_s"] * 1e3, "wait_p99_ms": _ms(prefill["wait_tail_s"]),
                    "utilization": prefill["prefill_utilization"], "prompt_tokens_per_s": prefill["prompt_tokens_per_s"],
                    "capacity_requests_per_s": prefill["capacity_requests_per_s"], "slots": prefill["slots"],
                    "link_utilization": prefill["link_utilization"], "memory": prefill["memory"]},
        "decode": {"step_ms": decode["decode_step_s"] * 1e3, "running_per_replica": decode["running_per_replica"],
                   "capacity_requests_per_s": decode["capacity_requests_per_s"], "link_utilization": decode["link_utilization"],
                   "memory": decode["memory"]},
    }


def _why_none(space, colocated, bound, floor) -> str:
    if colocated is None:
        return f"no disaggregated plan within {space.max_gpus:,} GPUs meets the load and its targets either"
    if bound is not None:
        return f"colocated: no disaggregated plan within the colocated plan's {bound:,} GPUs meets the load and its targets"
    return f"colocated: no disaggregated plan reaches the colocated plan's {floor:,} output tokens/s within the targets"


def _why(objective, plan, figures, colocated, chosen, workload=None, space=None) -> str:
    layout = f"{plan.label()} ({plan.gpus:,} GPUs)"
    tokens = figures["capacity_tokens_per_s"]
    separate = (f"its decode steps carry no prefill (TPOT {figures['tpot_s'] * 1e3:,.1f} ms) and its prompts get the whole step "
                f"budget (p99 TTFT {figures['ttft_p99_s'] * 1e3:,.1f} ms with a KV transfer of {figures['transfer_s'] * 1e3:,.2f} ms)")
    if colocated is None:
        return f"disaggregated: no colocated plan meets the targets; {layout} does: {separate}"
    values = colocated.values
    if chosen and plan.gpus < colocated.plan.gpus:
        binding = _colocated_reason(workload, space, plan.gpus)
        return (f"disaggregated wins: {layout} serves the load within the targets, the colocated plan needs {colocated.plan.gpus:,} GPUs"
                + (f" ({binding})" if binding else "") + f"; {separate}")
    if chosen:
        return (f"disaggregated wins: {layout} serves {tokens:,.0f} vs {colocated.tokens_per_s:,.0f} output tokens/s at saturation "
                f"(colocated on {colocated.plan.gpus:,} GPUs) within the targets; {separate}")
    contrast = (f"TPOT {figures['tpot_s'] * 1e3:,.1f} ms without prefill in the decode steps vs {values['tpot_s'] * 1e3:,.1f} ms colocated; "
                f"p99 TTFT {figures['ttft_p99_s'] * 1e3:,.1f} vs {values['ttft_p99_s'] * 1e3:,.1f} ms (KV transfer {figures['transfer_s'] * 1e3:,.2f} ms)")
    edge = (f"{tokens:,.0f} vs {colocated.tokens_per_s:,.0f} output tokens/s on {plan.gpus:,} GPUs" if objective == "min-gpus"
            and plan.gpus == colocated.plan.gpus else f"{plan.gpus:,} GPUs vs {colocated.plan.gpus:,}, {tokens:,.0f} vs "
            f"{colocated.tokens_per_s:,.0f} output tokens/s")
    return f"colocated wins: the best disaggregated plan, {layout}, gives {edge}; {contrast}"


def _colocated_reason(workload, space, gpus: int) -> str | None:
    """Why no colocated plan within ``gpus`` GPUs serves the load within the targets (the
    binding target of the colocated search limited to that count)."""
    from dataclasses import replace

    from vramopt.optimizer.explain_requests import explain_request_load

    explanation = explain_request_load(workload, replace(space, max_gpus=gpus), ())
    return explanation.reason if explanation is not None else None


def with_disaggregated_fix(explanation, disaggregation):
    """An infeasible colocated search whose disaggregated search found a plan: that plan is
    named as a fix (the response's ``disaggregation`` object holds it, ``chosen`` true)."""
    if explanation is None or not disaggregation or not disaggregation.get("chosen"):
        return explanation
    from dataclasses import replace

    from vramopt.results import Relaxation

    plan, requests = disaggregation["plan"], disaggregation["requests"]
    fix = Relaxation("disaggregated prefill/decode", f"{plan['prefill_replicas']} prefill x tp{plan['prefill_tensor_parallel']} + "
                     f"{plan['decode_replicas']} decode x tp{plan['decode_tensor_parallel']} ({plan['gpus']:,} GPUs) meets every target: "
                     f"p99 TTFT {requests['ttft_p99_ms']:,.1f} ms, TPOT {requests['tpot_ms']:,.1f} ms")
    return replace(explanation, relaxations=(fix,) + tuple(explanation.relaxations))
