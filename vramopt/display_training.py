"""The table view of one training plan (``estimate``): plan, memory per GPU, fit, throughput;
the solver's answer reuses these for its plan/memory/throughput sections."""

from __future__ import annotations

from typing import Any, Mapping

from vramopt.costs.step_terms import STEP_TERMS
from vramopt.display_formats import MEMORY_LABELS, gb, percent, table


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
        *([framework_line(result["framework"])] if result.get("framework") else []),
        *([f"workload  {result['workload']}" + (f": rank {result['lora']['rank']} adapters on {','.join(result['lora']['targets'])}, "
                                                 f"{result['lora']['adapter_params'] / 1e6:,.1f}M trainable parameters, frozen base "
                                                 f"{result['lora']['frozen_bytes_per_param']:.2f} bytes/parameter" if result.get('lora') else "")]
          if result.get("workload", "train") != "train" else []),
        f"parallel  {technique_line(plan, 'parallel')}",
        f"memory    {technique_line(plan, 'memory')}",
        f"precision {technique_line(plan, 'precision')}",
        f"batch     {plan['global_batch']:,} sequences x {plan['seq_len']:,} tokens = {tokens_per_step:,} tokens per step "
        f"(micro-batch {plan['micro_batch']} x {plan['grad_accumulation']} accumulation x dp {plan['data_parallel']})",
    ]
    return "\n".join(lines)


def framework_line(name: str) -> str:
    from vramopt.frameworks import load_framework

    framework = load_framework(name)
    return f"framework {framework.display_name} {framework.version}: its rules and memory accounting (docs/frameworks.md)"


def technique_line(plan: Mapping[str, Any], line: str, serving: bool = False) -> str:
    """One line of the plan table: the phrases of the techniques that show on it
    (``Contribution.display_line``), in the plan's field order (``registry.SERVING_ORDER``
    for a serving plan)."""
    from vramopt.constraints import registry  # numpy and the techniques, only when a plan is shown

    text = ""
    for technique in registry.serving_techniques() if serving else registry.training_techniques():
        contribution = technique.contribution
        if contribution.display_line != line:
            continue
        phrase = contribution.display(plan)
        if phrase:
            text += (contribution.display_separator if text else "") + phrase
    return text


def render_memory(memory: Mapping[str, Any], plan: Mapping[str, Any] | None = None) -> str:
    """The memory table, its rows renamed where the plan's techniques name their bytes
    (``Contribution.memory_labels``)."""
    from vramopt.constraints import registry

    capacity = memory["capacity_bytes"]
    required = memory["required_headroom_fraction"]
    limit = capacity * (1.0 - required)
    labels = dict(MEMORY_LABELS)
    for technique in registry.training_techniques() if plan is not None else ():
        if technique.contribution.memory_labels is not None:
            labels.update(technique.contribution.memory_labels(plan))
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
    breakdown = [[term.label.format(bubble=percent(throughput["bubble_fraction"])), throughput.get(term.key, 0.0)]
                 for term in STEP_TERMS if term.always or term.table_always or throughput.get(term.key, 0.0)]
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
            render_memory(memory, result["plan"]),
            "GB = 1e9 bytes",
            "",
            *fit_lines(memory, host_limit_bytes, nvme_limit_bytes),
            "",
            throughput_note + render_throughput(result),
        ]
    )
