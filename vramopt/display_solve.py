"""The table views of the solver's answers: ``solve`` (training and serving), an
infeasible request, the Pareto front, and a ``pack`` of jobs on a cluster."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from vramopt.display_formats import gb, on_off, percent, table, written_lines
from vramopt.display_requests import render_disaggregation, render_requests, request_goal
from vramopt.constraints import registry
from vramopt.costs.step_terms import STEP_TERMS
from vramopt.display_training import render_training, technique_line
from vramopt.plan_brief import training_brief


# ---------------------------------------------------------------------------------------
# The solver's answer (``solve``): the plan as above, then why, the runners-up, the solver


def _value_text(value: Any) -> str:
    return on_off(value) if isinstance(value, bool) else str(value)


def render_runners_up(result: Mapping[str, Any]) -> str:
    runners = result.get("runners_up") or []
    if not runners:
        return "runners-up: none (no other technique value gives a plan that fits)"
    from vramopt.time_cost import cost_cells, cost_headers

    costs = [runner.get("time_and_cost") for runner in runners]
    money_headers = cost_headers(costs[0]) if costs[0] is not None else []
    rows = []
    for runner, cost in zip(runners, costs):
        changes = ", ".join(
            f"{field} {_value_text(change['chosen'])}->{_value_text(change['runner_up'])}" for field, change in runner["differences"].items()
        )
        money = cost_cells(cost) if money_headers else []
        rows.append([f"{runner['tokens_per_s']:,.0f}", percent(-runner["tokens_per_s_loss_fraction"]), gb(runner["memory_total_bytes"]),
                     *money, changes])
    return table(rows, ["runner-up tokens/s", "vs chosen", "GB/GPU", *money_headers, "what changes"], align="rrr" + "r" * len(money_headers) + "l")


def render_solver(solver: Mapping[str, Any]) -> str:
    gap = "" if solver["status"] == "optimal" else f", gap {percent(solver['gap'], 2)}"
    return (
        f"solver    {solver['engine']}: {solver['status']}{gap} in {solver['wall_time_s'] * 1000:,.0f} ms "
        + (f"({solver['candidates']:,} candidate layouts, all enumerated)" if solver["engine"] == "exhaustive"
           else f"({solver['candidates']:,} candidate layouts after exact pruning)")
        + f"; objective: {solver['objective']}"
    )


SERVING_MEMORY_LABELS = {
    "weights_bytes": "weights",
    "kv_cache_bytes": "KV cache",
    "activations_bytes": "activations (vLLM profiling step)",
    "cuda_graphs_bytes": "CUDA graphs",
    "draft_model_bytes": "draft model + its KV cache",
    "reserve_bytes": "framework reserve",
}


def _requirement_checks(result: Mapping[str, Any]) -> list[tuple[str, bool, str]]:
    """A line per service requirement the request sets (--min-slots above 1, --max-latency-ms)."""
    requirements, throughput = result.get("requirements"), result["throughput"]
    checks = []
    if requirements and requirements["min_slots"] > 1:
        ok = requirements["min_slots_met"]
        checks.append(("concurrent sequences", ok, f"{throughput['concurrent_slots']:,} {'>=' if ok else '<'} "
                                                   f"{requirements['min_slots']:,} required (--min-slots)"))
    if requirements and requirements["max_latency_ms"] is not None:
        ok = requirements["max_latency_met"]
        checks.append(("time per output token", ok, f"{throughput['latency_per_token_ms']:,.2f} ms {'<=' if ok else '>'} "
                                                    f"{requirements['max_latency_ms']:g} ms bound (--max-latency-ms)"))
    return checks


def _after(separator: str, phrases: str) -> str:
    return separator + phrases if phrases else ""


def render_serving(result: Mapping[str, Any]) -> str:
    """The table view of one evaluated serving plan."""
    model, plan, memory, throughput = result["model"], result["plan"], result["memory"], result["throughput"]
    capacity = memory["capacity_bytes"]
    required = memory["required_headroom_fraction"]
    unit = f"MIG {plan['mig_profile']} instance" if plan["mig_profile"] != "none" else "GPU"
    lines = [
        f"model     {model['name']}: {model['params_total'] / 1e9:.1f}B parameters, {model['layers']} layers, {model['kv_heads']} KV heads",
        f"hardware  {plan['gpus']} x {plan['gpu']} ({plan['nodes']} node{'' if plan['nodes'] == 1 else 's'})"
        + _after(", ", technique_line(plan, "hardware", serving=True)),
        f"replicas  {plan['replicas']} ({technique_line(plan, 'parallel', serving=True)})"
        + _after(", ", technique_line(plan, "replicas", serving=True))
        + f", {throughput['concurrent_slots']:,} concurrent sequences of up to {plan['context']:,} tokens",
        f"weights   {technique_line(plan, 'weights', serving=True)}",
        "",
    ]
    rows = [[label, gb(memory[key]), percent(memory[key] / capacity)] for key, label in SERVING_MEMORY_LABELS.items()]
    rows.append(["total", gb(memory["total_bytes"]), percent(memory["total_bytes"] / capacity)])
    rows.append([f"limit (capacity x (1 - {required:g} headroom))", gb(capacity * (1 - required)), percent(1 - required)])
    rows.append(["capacity", gb(capacity), percent(1.0)])
    lines.append(table(rows, [f"memory per {unit}", "GB", "% of capacity"]))
    lines.append("GB = 1e9 bytes")
    lines.append("")
    if memory["fits"]:
        memory_text = (f"{gb(memory['total_bytes'])} GB <= {gb(capacity * (1 - required))} GB limit; "
                       f"{percent(memory['headroom_fraction'])} of {gb(capacity)} GB stays free ({percent(required, 0)} required)")
    else:
        memory_text = (f"{gb(memory['total_bytes'])} GB > {gb(capacity * (1 - required))} GB limit: "
                       f"over by {gb(memory['total_bytes'] - capacity * (1 - required))} GB")
    checks = [(f"{unit} memory", bool(memory["fits"]), memory_text)] + _requirement_checks(result)
    met = all(ok for _, ok, _ in checks[1:])
    lines.append(("FITS" if memory["fits"] else "DOES NOT FIT") + ("" if met else ", requirements NOT MET"))
    width = max(len(label) for label, _, _ in checks)
    lines.extend(f"  {label.ljust(width)}  {'ok  ' if ok else 'FAIL'}  {text}" for label, ok, text in checks)
    if not memory["fits"]:
        lines.append("(throughput below is what this plan would reach if it fit)")
    lines.append("")
    bound = "memory-bandwidth bound" if throughput["memory_bound"] else "compute bound"
    summary = [
        ["output tokens/s (all replicas)", f"{throughput['tokens_per_s']:,.0f}"],
        ["time per output token (one sequence)", f"{throughput['latency_per_token_ms']:,.2f} ms"],
        ["KV cache capacity (vLLM's count, one replica)", f"{throughput['kv_capacity_tokens']:,} tokens"],
        ["decode step", f"{throughput['step_time_s'] * 1e3:,.2f} ms ({bound})"],
        ["tensor-parallel all-reduces per step", f"{throughput['tensor_parallel_s'] * 1e3:,.2f} ms"],
        [f"prefill of a prompt of {plan['context']:,} tokens", f"{throughput['prefill_time_s']:,.2f} s"],
    ]
    if "requests" in result:
        summary[0][0] = "output tokens/s at saturation (all replicas)"
        summary[1][0] = "time per output token at the offered load"
        summary[3][0] = "step at the offered load (decodes + prefill share)"
        computed = result["requests"]["input_tokens"] - (result["requests"].get("cached_prefix_tokens") or 0)
        summary[5] = [f"prefill of a prompt of {computed:,.0f} tokens", f"{throughput['prefill_time_s']:,.2f} s"]
    if plan.get("expert_parallel", 1) > 1:
        summary.insert(5, ["expert-parallel all-to-alls per step", f"{throughput.get('expert_parallel_s', 0.0) * 1e3:,.2f} ms"])
    lines.append(table(summary, ["throughput", "value"]))
    if "requests" in result:
        lines.extend(["", render_requests(result)])
    return "\n".join(lines)


def _goal(solver: Mapping[str, Any]) -> str:
    objective = str(solver.get("objective", ""))
    if objective.startswith("cost-per-token"):
        return "the least money per output token"
    if objective.startswith("cost"):
        return "the least money for the token budget"
    if objective.startswith("per-gpu"):
        return "the most tokens/s per GPU"
    if objective.startswith("min-gpus"):
        return "the fewest GPUs reaching the throughput target"
    return "the most tokens/s"


def _step_sum(throughput: Mapping[str, Any]) -> str:
    """'compute 270.69 + TP 48.10 + EP 6.01 + DP 0.00 + offload 1,131.02': the step's terms
    (costs/step_terms.py), each nonzero one and those always shown."""
    parts = []
    for term in STEP_TERMS:
        seconds = throughput.get(term.key, 0.0)
        if term.always or seconds:
            sign = "" if not parts else ("- " if seconds < 0 else "+ ")
            parts.append(f"{sign}{term.short} {abs(seconds) if parts else seconds:,.2f}")
    return " ".join(parts)


def render_solve(result: Mapping[str, Any], host_limit_bytes: float | None = None, nvme_limit_bytes: float | None = None) -> str:
    """The table view of a solve response with a plan."""
    memory, throughput = result["memory"], result["throughput"]
    if result["workload"] == "infer":
        why = (
            f"why       {request_goal(result) or _goal(result['solver'])} that keeps {percent(memory['required_headroom_fraction'], 0)} of every "
            f"{'MIG instance' if result['plan']['mig_profile'] != 'none' else 'GPU'} free: {gb(memory['total_bytes'])} of "
            f"{gb(memory['capacity_bytes'])} GB used"
        )
        disaggregated = render_disaggregation(result)
        if (result.get("disaggregation") or {}).get("chosen"):
            why = why.replace("why       ", "why       disaggregated prefill/decode is the answer (above); the colocated plan shown is ", 1)
        parts = [render_serving(result)] + (["", disaggregated] if disaggregated else [])
        return "\n".join(parts + ["", why, render_solver(result["solver"]), "", render_runners_up(result)])
    why = (
        f"why       {_goal(result['solver'])} that keeps {percent(memory['required_headroom_fraction'], 0)} of every GPU free: "
        f"{gb(memory['total_bytes'])} of {gb(memory['capacity_bytes'])} GB used; "
        f"step {throughput['step_time_s']:,.2f} s = " + _step_sum(throughput)
    )
    for technique in registry.training_techniques():  # what each chosen value buys (Contribution.gain)
        gain = technique.contribution.gain
        if gain is not None and result.get(gain.key):
            why += "\n          " + gain.sentence(result["plan"], result[gain.key], gb)
    offload = result.get("offload_cost")
    if offload:
        why += (
            f"\n          offload {result['plan']['offload']} is what makes it fit: without it this plan would need "
            f"{gb(offload['without_offload_total_bytes'])} GB per GPU; expected slowdown "
            f"{offload['slowdown_factor']:,.1f}x (offload transfers are {percent(offload['offload_fraction_of_step'])} of the step)"
        )
    return "\n".join(
        [
            render_training(result, host_limit_bytes, nvme_limit_bytes),
            "",
            why,
            render_solver(result["solver"]),
            "",
            render_runners_up(result),
        ]
    )


def render_infeasible(result: Mapping[str, Any]) -> str:
    explanation = result["explanation"]
    lines = [f"infeasible: {explanation['reason']}"]
    for relaxation in explanation["relaxations"]:
        lines.append(f"  fix: {relaxation['change']}: {relaxation['detail']}")
    if not explanation["relaxations"]:
        lines.append("  no relaxation tried (more GPUs, offload, fp8, a larger GPU, fewer pins, less headroom) makes it feasible")
    return "\n".join(lines)


def render_front(response: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], csv_path: str | None, plot_path: str | None) -> str:
    """The table view of a Pareto front: one line per plan, sorted by GPUs then tokens/s."""
    serving = response["workload"] == "infer"
    table_rows = []
    for point in response["front"]:
        plan, memory, throughput = point["plan"], point["memory"], point["throughput"]
        if serving:
            stages = f" pp{plan['pipeline_parallel']}" if plan["pipeline_parallel"] > 1 else ""
            experts = f" ep{plan['expert_parallel']}" if plan.get("expert_parallel", 1) > 1 else ""
            techniques = f"tp{plan['tensor_parallel']}{experts}{stages} {plan['quantization']} kv={plan['kv_cache_dtype']} slots={plan['slots']}" + (
                f" MIG {plan['mig_profile']}" if plan["mig_profile"] != "none" else "") + (" spec" if plan["speculative_decoding"] else "")
        else:
            techniques = f"{training_brief(plan)} mb={plan['micro_batch']}"
        table_rows.append(["*" if point["chosen"] else "", plan["gpus"], f"{throughput['tokens_per_s']:,.0f}", gb(memory["total_bytes"]),
                           percent(memory["headroom_fraction"]), techniques])
    lines = [
        f"{response['model']['name']}: {len(rows)} non-dominated plans (tokens/s up, GPUs down, memory per GPU down); * = chosen plan",
        table(table_rows, ["", "GPUs", "tokens/s", "GB/GPU", "free", "plan"], align="lrrrrl"),
        f"{response['solver']['method']}; {response['solver']['wall_time_s'] * 1000:,.0f} ms",
    ]
    return "\n".join(lines + written_lines(csv_path, plot_path))


def _placement_text(gpus_by_node: Mapping[str, Any]) -> str:
    return "; ".join(f"{node}: {','.join(str(item) for item in items)}" for node, items in gpus_by_node.items())


def _plan_brief(plan: Mapping[str, Any]) -> str:
    if "quantization" in plan:
        mig = f" MIG {plan['mig_profile']}" if plan.get("mig_profile", "none") != "none" else ""
        stages = f" pp{plan['pipeline_parallel']}" if plan.get("pipeline_parallel", 1) > 1 else ""
        experts = f" ep{plan['expert_parallel']}" if plan.get("expert_parallel", 1) > 1 else ""
        return f"tp{plan['tensor_parallel']}{experts}{stages} {plan['quantization']} slots={plan['slots']}{mig}"
    return training_brief(plan)


def render_pack(response: Mapping[str, Any]) -> str:
    rows = []
    for placement in response["placements"]:
        if placement["admitted"]:
            rows.append([placement["job"], "yes", _placement_text(placement["gpus_by_node"]),
                         f"{placement['throughput']['tokens_per_s']:,.0f}", _plan_brief(placement["plan"])])
        else:
            rows.append([placement["job"], "no", "-", "-", placement["reason"]])
    summary = response["summary"]
    solver = summary["solver"]
    gap = "" if solver["status"] == "optimal" else f", gap {percent(solver['gap'], 2)}"
    return "\n".join([
        table(rows, ["job", "admitted", "GPUs (node: indices or GPU:MIG profile)", "tokens/s", "plan / reason"], align="lllrl"),
        "",
        f"admitted {summary['jobs_admitted']} of {summary['jobs']} jobs; GPUs used {summary['gpus_used']}, left {summary['gpus_left']}; "
        + (f"MIG instances used {summary['mig_instances_used']}, left {summary['mig_instances_left']}; "
           if summary.get("mig_instances_used", 0) + summary.get("mig_instances_left", 0) else "")
        + f"weighted normalized throughput {summary['weighted_normalized_throughput']:.3f}",
        f"solver    cp-sat: {solver['status']}{gap} in {solver['wall_time_s'] * 1000:,.0f} ms",
        *([f"framework training plans under --framework {summary['framework']} (its rules and memory accounting)"]
          if "framework" in summary else []),
    ])


def pack_rows(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for placement in response["placements"]:
        row = {"job": placement["job"], "admitted": placement["admitted"], "reason": placement["reason"],
               "gpus_by_node": _placement_text(placement["gpus_by_node"])}
        if "usd_per_hour" in placement:  # pack with prices
            row["usd_per_hour"] = placement["usd_per_hour"]
        for section in ("plan", "memory", "throughput"):
            for key, value in (placement[section] or {}).items():
                row[f"{section}.{key}"] = value
        rows.append(row)
    keys = list(dict.fromkeys(key for row in rows for key in row))
    return [{key: row.get(key, "") for key in keys} for row in rows]
