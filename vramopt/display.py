"""Text, JSON and CSV rendering of results for the CLI: the display edge.

Everything here takes plain data (the "vramopt/v1" dicts of ``results.py`` and the catalog
dataclasses) and returns strings; nothing prints. Unit conversions happen here and only
here: GB means 1e9 bytes (decimal, as GPU datasheets use it), TB 1e12, TFLOP/s 1e12 FLOP/s.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from typing import Any, Iterable, Mapping, Sequence

from vramopt.units import BYTES_PER_GB, BYTES_PER_GIB, FLOPS_PER_TFLOPS

OUTPUT_FORMATS = ("table", "json", "csv")

CSV_SECTIONS = ("plan", "memory", "throughput", "time_and_cost")
"""time_and_cost is there only when --total-tokens or a price asked for it (docs/json-contract.md)."""
"""Sections of a v1 response flattened into dotted CSV columns (``plan.gpus`` ...)."""

MEMORY_LABELS = {
    "weights_bytes": "weights",
    "gradients_bytes": "gradients",
    "optimizer_bytes": "optimizer states (Adam)",
    "activations_bytes": "activations",
    "logits_bytes": "logits (fp32, last stage)",
    "kv_cache_bytes": "KV cache",
    "reserve_bytes": "framework reserve",
}
"""Memory terms of the v1 ``memory`` object, in contract order, with their display names."""


# ---------------------------------------------------------------------------------------
# Generic helpers


def to_plain(value: Any) -> Any:
    """Dataclasses, mappings and tuples -> JSON-ready dicts and lists (recursively)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: to_plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): to_plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    return value


def to_json(data: Any) -> str:
    """Indented JSON; NaN and infinity are refused (they are not JSON)."""
    return json.dumps(data, indent=2, allow_nan=False)


def flatten(result: Mapping[str, Any], sections: Sequence[str] = CSV_SECTIONS) -> dict[str, Any]:
    """``{"plan": {"gpus": 4}}`` -> ``{"plan.gpus": 4}`` for the given sections, in order."""
    row: dict[str, Any] = {}
    for section in sections:
        for key, value in result.get(section, {}).items():
            row[f"{section}.{key}"] = value
    return row


def csv_cell(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return value


def to_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    """One header row (the keys of the first row) and one line per row."""
    rows = list(rows)
    buffer = io.StringIO()
    if not rows:
        return ""
    writer = csv.writer(buffer, lineterminator="\n")
    header = list(rows[0])
    writer.writerow(header)
    for row in rows:
        writer.writerow([csv_cell(row.get(key, "")) for key in header])
    return buffer.getvalue()


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], align: str | None = None) -> str:
    """A plain monospace table; ``align`` has one 'l' or 'r' per column (default: 'l' first, 'r' rest)."""
    align = align or "l" + "r" * (len(headers) - 1)
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max([len(str(header))] + [len(row[index]) for row in cells]) for index, header in enumerate(headers)]

    def line(items: Sequence[str]) -> str:
        parts = [item.ljust(width) if side == "l" else item.rjust(width) for item, width, side in zip(items, widths, align)]
        return "  ".join(parts).rstrip()

    return "\n".join([line([str(header) for header in headers]), line(["-" * width for width in widths])] + [line(row) for row in cells])


def gb(value_bytes: float, digits: int = 1) -> str:
    return f"{value_bytes / BYTES_PER_GB:,.{digits}f}"


def percent(fraction: float, digits: int = 1) -> str:
    return f"{100.0 * fraction:.{digits}f}%"


def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def on_off(flag: bool) -> str:
    return "on" if flag else "off"


# ---------------------------------------------------------------------------------------
# One training plan (the v1 response of ``estimate``; the solver's answer has the same
# plan/memory/throughput sections, so it renders with the same functions)


def render_plan(result: Mapping[str, Any]) -> str:
    model, plan = result["model"], result["plan"]
    node_word = "node" if plan["nodes"] == 1 else "nodes"
    tokens_per_step = plan["global_batch"] * plan["seq_len"]
    lines = [
        f"model     {model['name']}: {model['params_total'] / 1e9:.1f}B parameters"
        + (f" ({model['params_active'] / 1e9:.1f}B active)" if model["params_active"] != model["params_total"] else "")
        + f", {model['layers']} layers, {model['heads']} heads",
        f"hardware  {plan['gpus']} x {plan['gpu']} ({plan['nodes']} {node_word})",
        *([f"workload  {result['workload']}" + (f": rank {result['lora']['rank']} adapters on {','.join(result['lora']['targets'])}, "
                                                 f"{result['lora']['adapter_params'] / 1e6:,.1f}M trainable parameters, frozen base "
                                                 f"{result['lora']['frozen_bytes_per_param']:.2f} bytes/parameter" if result.get('lora') else "")]
          if result.get("workload", "train") != "train" else []),
        f"parallel  tp={plan['tensor_parallel']} cp={plan.get('context_parallel', 1)} pp={plan['pipeline_parallel']} dp={plan['data_parallel']}, "
        f"sequence parallel {on_off(plan['sequence_parallel'])}, virtual stages {plan['virtual_stages']}",
        f"memory    ZeRO-{plan['zero_stage']}, checkpointing {plan['checkpointing']}, offload {plan['offload']}, "
        f"flash attention {on_off(plan['flash_attention'])}{_optimizer_phrase(plan)}",
        f"precision {plan['precision']} compute, {plan['grad_comm_precision']} gradient communication",
        f"batch     {plan['global_batch']:,} sequences x {plan['seq_len']:,} tokens = {tokens_per_step:,} tokens per step "
        f"(micro-batch {plan['micro_batch']} x {plan['grad_accumulation']} accumulation x dp {plan['data_parallel']})",
    ]
    return "\n".join(lines)


def render_memory(memory: Mapping[str, Any], optimizer: str = "adam") -> str:
    capacity = memory["capacity_bytes"]
    required = memory["required_headroom_fraction"]
    limit = capacity * (1.0 - required)
    labels = dict(MEMORY_LABELS)
    if optimizer != "adam":  # name the format the plan's optimizer states are in
        labels["optimizer_bytes"] = f"optimizer states ({optimizer})"
    rows = [[label, gb(memory[key]), percent(memory[key] / capacity)] for key, label in labels.items()]
    rows.append(["total", gb(memory["total_bytes"]), percent(memory["total_bytes"] / capacity)])
    rows.append([f"limit (capacity x (1 - {required:g} headroom))", gb(limit), percent(1.0 - required)])
    rows.append(["capacity", gb(capacity), percent(1.0)])
    return table(rows, ["memory per GPU", "GB", "% of capacity"])


def fit_lines(memory: Mapping[str, Any], host_limit_bytes: float | None, nvme_limit_bytes: float | None) -> list[str]:
    """The verdict, FITS or DOES NOT FIT, then one line per limit that applies.

    The GPU-memory line is always shown; the host-RAM and NVMe lines when the plan offloads
    there or does not fit there. ``*_limit_bytes`` are the usable capacities per node.
    """
    capacity = memory["capacity_bytes"]
    required = memory["required_headroom_fraction"]
    limit = capacity * (1.0 - required)
    total = memory["total_bytes"]
    if memory["fits"]:
        gpu_text = (f"{gb(total)} GB per GPU <= {gb(limit)} GB limit; {percent(memory['headroom_fraction'])} "
                    f"of {gb(capacity)} GB stays free ({percent(required, 0)} required)")
    else:
        gpu_text = (f"{gb(total)} GB per GPU > {gb(limit)} GB limit ({gb(capacity)} GB less "
                    f"{percent(required, 0)} headroom): over by {gb(total - limit)} GB")
    checks = [("GPU memory", bool(memory["fits"]), gpu_text)]
    for label, used_key, fits_key, usable in (
        ("host RAM per node", "host_bytes_per_node", "fits_host", host_limit_bytes),
        ("NVMe per node", "nvme_bytes_per_node", "fits_nvme", nvme_limit_bytes),
    ):
        used, ok = memory[used_key], bool(memory[fits_key])
        if used <= 0 and ok:
            continue
        if usable is None:
            text = f"{gb(used)} GB offloaded" + ("" if ok else " (more than the node holds)")
        elif ok:
            text = f"{gb(used)} GB offloaded <= {gb(usable)} GB usable"
        else:
            text = f"{gb(used)} GB offloaded > {gb(usable)} GB usable: over by {gb(used - usable)} GB"
        checks.append((label, ok, text))
    verdict = "FITS" if all(ok for _, ok, _ in checks) else "DOES NOT FIT"
    width = max(len(label) for label, _, _ in checks)
    return [verdict] + [f"  {label.ljust(width)}  {'ok  ' if ok else 'FAIL'}  {text}" for label, ok, text in checks]


def render_throughput(result: Mapping[str, Any]) -> str:
    throughput, plan = result["throughput"], result["plan"]
    step = throughput["step_time_s"]
    summary = [
        ["tokens/s", f"{throughput['tokens_per_s']:,.0f}"],
        ["step time", f"{step:,.2f} s"],
        [f"MFU (model FLOPs / dense {plan['precision']} peak)", percent(throughput["mfu"])],
        ["achieved TFLOP/s per GPU (incl. recomputation)", f"{throughput['achieved_tflops_per_gpu']:,.0f}"],
    ]
    breakdown = [
        [f"compute (incl. pipeline bubble {percent(throughput['bubble_fraction'])})", throughput["compute_s"]],
        ["tensor-parallel communication", throughput["tensor_parallel_s"]],
        ["context-parallel KV ring (exposed)", throughput.get("context_parallel_s", 0.0)],
        ["data-parallel communication (exposed)", throughput["data_parallel_s"]],
        ["offload transfers", throughput["offload_s"]],
    ]
    if throughput.get("optimizer_step_s", 0.0):  # 0 for Adam, whose step the fitted efficiency holds
        breakdown.append(["optimizer step beyond Adam's", throughput["optimizer_step_s"]])
    breakdown_rows = [[label, f"{seconds:,.2f}", percent(seconds / step if step > 0 else 0.0)] for label, seconds in breakdown]
    return table(summary, ["throughput", "value"]) + "\n\n" + table(breakdown_rows, ["step time", "s", "% of step"])


def render_training(result: Mapping[str, Any], host_limit_bytes: float | None = None, nvme_limit_bytes: float | None = None) -> str:
    """The table view of one evaluated training plan (a v1 response)."""
    memory = result["memory"]
    throughput_note = "" if memory["fits"] and memory["fits_host"] and memory["fits_nvme"] else (
        "(throughput below is what this plan would reach if it fit)\n"
    )
    return "\n".join(
        [
            render_plan(result),
            "",
            render_memory(memory, result["plan"].get("optimizer", "adam")),
            "GB = 1e9 bytes",
            "",
            *fit_lines(memory, host_limit_bytes, nvme_limit_bytes),
            "",
            throughput_note + render_throughput(result),
        ]
    )


# ---------------------------------------------------------------------------------------
# The solver's answer (``solve``): the plan as above, then why, the runners-up, the solver


def describe_plan_briefly(plan: Mapping[str, Any]) -> str:
    return (
        f"{plan['gpus']}x {plan['gpu']} tp={plan['tensor_parallel']} {_context_brief(plan, 'cp=')}pp={plan['pipeline_parallel']} "
        f"dp={plan['data_parallel']} ZeRO-{plan['zero_stage']} {plan['precision']} offload={plan['offload']} "
        f"ckpt={plan['checkpointing']} micro-batch={plan['micro_batch']}"
    )


def _value_text(value: Any) -> str:
    return on_off(value) if isinstance(value, bool) else str(value)


def render_runners_up(result: Mapping[str, Any]) -> str:
    runners = result.get("runners_up") or []
    if not runners:
        return "runners-up: none (no other technique value gives a plan that fits)"
    rows = []
    for runner in runners:
        changes = ", ".join(
            f"{field} {_value_text(change['chosen'])}->{_value_text(change['runner_up'])}" for field, change in runner["differences"].items()
        )
        rows.append([f"{runner['tokens_per_s']:,.0f}", percent(-runner["tokens_per_s_loss_fraction"]), gb(runner["memory_total_bytes"]), changes])
    return table(rows, ["runner-up tokens/s", "vs chosen", "GB/GPU", "what changes"], align="rrrl")


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
    "activations_bytes": "activations (prefill chunk, logits)",
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


def render_serving(result: Mapping[str, Any]) -> str:
    """The table view of one evaluated serving plan."""
    model, plan, memory, throughput = result["model"], result["plan"], result["memory"], result["throughput"]
    capacity = memory["capacity_bytes"]
    required = memory["required_headroom_fraction"]
    unit = f"MIG {plan['mig_profile']} instance" if plan["mig_profile"] != "none" else "GPU"
    lines = [
        f"model     {model['name']}: {model['params_total'] / 1e9:.1f}B parameters, {model['layers']} layers, {model['kv_heads']} KV heads",
        f"hardware  {plan['gpus']} x {plan['gpu']} ({plan['nodes']} node{'' if plan['nodes'] == 1 else 's'})"
        + (f", {plan['instances_per_gpu']} x MIG {plan['mig_profile']} per GPU" if plan["mig_profile"] != "none" else ""),
        f"replicas  {plan['replicas']} (tp={plan['tensor_parallel']} pp={plan['pipeline_parallel']}), {plan['slots']} slot{'' if plan['slots'] == 1 else 's'} each, "
        f"{throughput['concurrent_slots']:,} concurrent sequences of up to {plan['context']:,} tokens",
        f"weights   {plan['quantization']}; KV cache {plan['kv_cache_dtype']}, {'paged' if plan['paged_kv'] else 'contiguous'}; "
        f"speculative decoding {on_off(plan['speculative_decoding'])}",
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
        ["decode step", f"{throughput['step_time_s'] * 1e3:,.2f} ms ({bound})"],
        ["tensor-parallel all-reduces per step", f"{throughput['tensor_parallel_s'] * 1e3:,.2f} ms"],
        [f"prefill of a prompt of {plan['context']:,} tokens", f"{throughput['prefill_time_s']:,.2f} s"],
    ]
    lines.append(table(summary, ["throughput", "value"]))
    return "\n".join(lines)


def _goal(solver: Mapping[str, Any]) -> str:
    objective = str(solver.get("objective", ""))
    if objective.startswith("per-gpu"):
        return "the most tokens/s per GPU"
    if objective.startswith("min-gpus"):
        return "the fewest GPUs reaching the throughput target"
    return "the most tokens/s"


def render_solve(result: Mapping[str, Any], host_limit_bytes: float | None = None, nvme_limit_bytes: float | None = None) -> str:
    """The table view of a solve response with a plan."""
    memory, throughput = result["memory"], result["throughput"]
    if result["workload"] == "infer":
        why = (
            f"why       {_goal(result['solver'])} that keeps {percent(memory['required_headroom_fraction'], 0)} of every "
            f"{'MIG instance' if result['plan']['mig_profile'] != 'none' else 'GPU'} free: {gb(memory['total_bytes'])} of "
            f"{gb(memory['capacity_bytes'])} GB used"
        )
        return "\n".join([render_serving(result), "", why, render_solver(result["solver"]), "", render_runners_up(result)])
    why = (
        f"why       {_goal(result['solver'])} that keeps {percent(memory['required_headroom_fraction'], 0)} of every GPU free: "
        f"{gb(memory['total_bytes'])} of {gb(memory['capacity_bytes'])} GB used; "
        f"step {throughput['step_time_s']:,.2f} s = compute {throughput['compute_s']:,.2f} + TP {throughput['tensor_parallel_s']:,.2f} "
        + (f"+ CP {throughput['context_parallel_s']:,.2f} " if result['plan'].get('context_parallel', 1) > 1 else "")
        + f"+ DP {throughput['data_parallel_s']:,.2f} + offload {throughput['offload_s']:,.2f}"
        + (f" {'-' if throughput['optimizer_step_s'] < 0 else '+'} optimizer step {abs(throughput['optimizer_step_s']):,.2f}"
           if throughput.get("optimizer_step_s", 0.0) else "")
    )
    if result.get("optimizer_gain"):
        why += "\n          " + optimizer_why_line(result["plan"], result["optimizer_gain"], gb)
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
            techniques = f"tp{plan['tensor_parallel']}{stages} {plan['quantization']} kv={plan['kv_cache_dtype']} slots={plan['slots']}" + (
                f" MIG {plan['mig_profile']}" if plan["mig_profile"] != "none" else "") + (" spec" if plan["speculative_decoding"] else "")
        else:
            techniques = (f"tp{plan['tensor_parallel']} {_context_brief(plan, 'cp')}pp{plan['pipeline_parallel']} dp{plan['data_parallel']} "
                          f"ZeRO-{plan['zero_stage']} {plan['precision']} offload={plan['offload']} ckpt={plan['checkpointing']} mb={plan['micro_batch']}")
        table_rows.append(["*" if point["chosen"] else "", plan["gpus"], f"{throughput['tokens_per_s']:,.0f}", gb(memory["total_bytes"]),
                           percent(memory["headroom_fraction"]), techniques])
    lines = [
        f"{response['model']['name']}: {len(rows)} non-dominated plans (tokens/s up, GPUs down, memory per GPU down); * = chosen plan",
        table(table_rows, ["", "GPUs", "tokens/s", "GB/GPU", "free", "plan"], align="lrrrrl"),
        f"{response['solver']['method']}; {response['solver']['wall_time_s'] * 1000:,.0f} ms",
    ]
    if csv_path:
        lines.append(f"CSV written to {csv_path}")
    if plot_path:
        lines.append(f"plot written to {plot_path}")
    return "\n".join(lines)


def _placement_text(gpus_by_node: Mapping[str, Any]) -> str:
    return "; ".join(f"{node}: {','.join(str(item) for item in items)}" for node, items in gpus_by_node.items())


def _plan_brief(plan: Mapping[str, Any]) -> str:
    if "quantization" in plan:
        mig = f" MIG {plan['mig_profile']}" if plan.get("mig_profile", "none") != "none" else ""
        stages = f" pp{plan['pipeline_parallel']}" if plan.get("pipeline_parallel", 1) > 1 else ""
        return f"tp{plan['tensor_parallel']}{stages} {plan['quantization']} slots={plan['slots']}{mig}"
    return (f"tp{plan['tensor_parallel']} {_context_brief(plan, 'cp')}pp{plan['pipeline_parallel']} dp{plan['data_parallel']} ZeRO-{plan['zero_stage']} "
            f"{plan['precision']} offload={plan['offload']} ckpt={plan['checkpointing']}")


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
    ])


def pack_rows(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for placement in response["placements"]:
        row = {"job": placement["job"], "admitted": placement["admitted"], "reason": placement["reason"],
               "gpus_by_node": _placement_text(placement["gpus_by_node"])}
        for section in ("plan", "memory", "throughput"):
            for key, value in (placement[section] or {}).items():
                row[f"{section}.{key}"] = value
        rows.append(row)
    keys = list(dict.fromkeys(key for row in rows for key in row))
    return [{key: row.get(key, "") for key in keys} for row in rows]


# ---------------------------------------------------------------------------------------
# Catalogs


def render_gpus(gpus: Sequence[Any]) -> str:
    rows = []
    for gpu in gpus:
        peak = gpu.peak_flops_per_s
        rows.append(
            [
                gpu.name,
                f"{gpu.datasheet_memory_bytes / BYTES_PER_GB:g}",
                f"{gpu.memory_bytes / BYTES_PER_GIB:.2f}",
                f"{gpu.hbm_bandwidth_bytes_per_s / 1e12:.2f}",
                f"{peak['bf16'] / FLOPS_PER_TFLOPS:,.0f}" if "bf16" in peak else "-",
                f"{peak['fp8'] / FLOPS_PER_TFLOPS:,.0f}" if "fp8" in peak else "-",
                _gpu_link_text(gpu),
                gpu.node.gpus_per_node,
                yes_no(bool(gpu.mig_profiles)),
            ]
        )
    headers = ["gpu", "datasheet GB", "usable GiB", "HBM TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "NVLink GB/s", "GPUs/node", "MIG"]
    note = ("Dense (no sparsity) peaks; usable = the memory the CUDA/HIP runtime reports, the capacity plans fill; "
            "NVLink per GPU, one direction (a mesh: links x GB/s each); GB = 1e9 bytes, GiB = 2^30. "
            "Sources: vramopt gpus --format json")
    return table(rows, headers) + "\n" + note


def _gpu_link_text(gpu: Any) -> str:
    if gpu.intra_node_topology == "full_mesh":
        links = gpu.node.gpus_per_node - 1
        return f"{gpu.nvlink_bandwidth_bytes_per_s / BYTES_PER_GB:g} ({links}x{gpu.mesh_link_bandwidth_bytes_per_s / BYTES_PER_GB:g} mesh)"
    return f"{gpu.nvlink_bandwidth_bytes_per_s / BYTES_PER_GB:g}" if gpu.nvlink_bandwidth_bytes_per_s > 0 else "-"


def gpus_json(gpus: Sequence[Any]) -> list[dict[str, Any]]:
    return [to_plain(gpu) for gpu in gpus]


def render_models(models: Sequence[Any]) -> str:
    rows = []
    for model in models:
        rows.append(
            [
                model.name,
                ", ".join(model.aliases) or "-",
                model.layers,
                model.hidden_size,
                f"{model.heads}/{model.kv_heads}",
                f"{model.params_total / 1e9:,.1f}",
                f"{model.params_active / 1e9:,.1f}",
                yes_no(model.is_moe),
            ]
        )
    headers = ["model", "aliases", "layers", "hidden", "heads/kv", "params B", "active B", "MoE"]
    note = "Parameters counted from the architecture (B = 1e9). Sources: vramopt models --format json"
    return table(rows, headers, align="llrrrrrl") + "\n" + note


def models_json(models: Sequence[Any]) -> list[dict[str, Any]]:
    return [{**to_plain(model), "params_total": model.params_total, "params_active": model.params_active} for model in models]


def _context_brief(plan: Mapping[str, Any], label: str) -> str:
    """'cp=2 ' in the one-line plan summaries when the plan splits sequences, else nothing."""
    degree = plan.get("context_parallel", 1)
    return f"{label}{degree} " if degree > 1 else ""


def _optimizer_phrase(plan: Mapping[str, Any]) -> str:
    """', optimizer 8-bit Adam ...' on the memory line when the plan's optimizer is not Adam
    (the technique's own display line, constraints/optimizer_format.py)."""
    if plan.get("optimizer", "adam") == "adam":
        return ""
    from vramopt.constraints.optimizer_format import display  # numpy is loaded by then

    return ", " + display(plan)


def optimizer_why_line(plan: Mapping[str, Any], gain: Mapping[str, Any], gb_format) -> str:
    from vramopt.constraints.optimizer_format import why_line

    return why_line(plan, gain, gb_format)
