"""The table and the PNG of the serving TPOT front (``pareto --axes tpot``,
optimizer/tpot_front.py): tokens/s per GPU against the time per output token."""

from __future__ import annotations

import io
from typing import Any, Mapping, Sequence

from vramopt.display_formats import gb, table, written_lines


def _layout(plan: Mapping[str, Any]) -> str:
    experts = f" ep{plan['expert_parallel']}" if plan.get("expert_parallel", 1) > 1 else ""
    stages = f" pp{plan['pipeline_parallel']}" if plan["pipeline_parallel"] > 1 else ""
    mig = f" MIG {plan['mig_profile']}" if plan["mig_profile"] != "none" else ""
    spec = " spec" if plan["speculative_decoding"] else ""
    return f"tp{plan['tensor_parallel']}{experts}{stages} {plan['quantization']} kv={plan['kv_cache_dtype']} slots={plan['slots']}{mig}{spec}"


def render_tpot_front(response: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], csv_path: str | None,
                      plot_path: str | None) -> str:
    """One line per point, lowest TPOT first; * marks the most tokens/s per GPU within the
    TPOT target (or overall without one)."""
    table_rows = []
    for point in response["front"]:
        plan = point["plan"]
        table_rows.append(["*" if point["chosen"] else "", f"{point['tpot_ms']:,.2f}", f"{point['output_tokens_per_s_per_gpu']:,.1f}",
                           plan["gpus"], f"{plan['gpu']}", gb(point["memory"]["total_bytes"]), _layout(plan)])
    lines = [
        f"{response['model']['name']}: {len(rows)} non-dominated serving plans (time per output token down, output tokens/s "
        "per GPU up); * = most tokens/s per GPU within the TPOT target",
        table(table_rows, ["", "TPOT ms", "tok/s/GPU", "GPUs", "GPU", "GB/GPU", "plan"], align="lrrrlrl"),
        f"{response['solver']['method']}; {response['solver']['candidates']:,} candidates; "
        f"{response['solver']['wall_time_s'] * 1000:,.0f} ms",
    ]
    return "\n".join(lines + written_lines(csv_path, plot_path))


def tpot_front_png(response: Mapping[str, Any]) -> bytes:
    """Tokens/s per GPU against TPOT, the front as a step line, the chosen point circled."""
    from vramopt.plot import plotting

    pyplot, front = plotting(response)
    tpot = [point["tpot_ms"] for point in front]
    per_gpu = [point["output_tokens_per_s_per_gpu"] for point in front]
    gpus = [point["plan"]["gpus"] for point in front]
    figure, axes = pyplot.subplots(figsize=(8, 5), dpi=120)
    axes.step(tpot, per_gpu, where="post", color="grey", linewidth=1)
    scatter = axes.scatter(tpot, per_gpu, c=gpus, cmap="viridis", s=28, edgecolors="none")
    chosen = [point for point in front if point["chosen"]]
    if chosen:
        axes.scatter([chosen[0]["tpot_ms"]], [chosen[0]["output_tokens_per_s_per_gpu"]], s=180, facecolors="none",
                     edgecolors="red", linewidths=2, label="most tokens/s per GPU within the TPOT target")
        axes.legend(loc="lower right")
    axes.set_xlabel("time per output token (ms)")
    axes.set_ylabel("output tokens/s per GPU")
    axes.set_title(f"{response['model']['name']}: {len(front)} non-dominated serving plans")
    colorbar = figure.colorbar(scatter, ax=axes)
    colorbar.set_label("GPUs")
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    pyplot.close(figure)
    return buffer.getvalue()
