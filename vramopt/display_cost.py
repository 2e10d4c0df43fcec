"""The table view of the time-money front (``vramopt pareto --axes time,cost``)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from vramopt.display_formats import gb, table, written_lines
from vramopt.plan_brief import training_brief


def _plan_brief(plan: Mapping[str, Any], serving: bool) -> str:
    if serving:
        return (f"tp{plan['tensor_parallel']} pp{plan['pipeline_parallel']} {plan['quantization']} kv={plan['kv_cache_dtype']} "
                f"slots={plan['slots']}" + (f" MIG {plan['mig_profile']}" if plan["mig_profile"] != "none" else ""))
    return training_brief(plan)


def render_cost_front(response: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], csv_path: str | None,
                      plot_path: str | None) -> str:
    serving = response["workload"] == "infer"
    table_rows = []
    for point in response["front"]:
        plan, money = point["plan"], point["time_and_cost"]
        if serving:
            cells = [f"{point['throughput']['tokens_per_s']:,.0f}", f"{money['usd_per_million_output_tokens']:,.4f}",
                     f"{money['usd_per_hour']:,.2f}"]
        else:
            cells = [f"{money['wall_clock_days']:,.1f}", f"{money['gpu_hours']:,.0f}", f"{money['usd']:,.0f}"]
        table_rows.append(["*" if point["chosen"] else "", f"{plan['gpus']}x {plan['gpu']}", *cells, gb(point["memory"]["total_bytes"]),
                           _plan_brief(plan, serving)])
    headers = (["", "GPUs", "tokens/s", "USD/M tokens", "USD/hour", "GB/GPU", "plan"] if serving
               else ["", "GPUs", "days", "GPU-hours", "USD", "GB/GPU", "plan"])
    goal = "tokens/s up, USD per million output tokens down" if serving else "wall-clock days down, USD down"
    lines = [
        f"{response['model']['name']}: {len(rows)} non-dominated plans ({goal}); * = least money",
        table(table_rows, headers, align="llrrrrl"),
        f"{response['solver']['method']}; {response['solver']['wall_time_s'] * 1000:,.0f} ms",
    ]
    return "\n".join(lines + written_lines(csv_path, plot_path))
