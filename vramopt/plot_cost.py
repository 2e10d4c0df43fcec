"""The time-money plot (``pareto --axes time,cost --plot FILE``; the 'plot' extra).

Training: dollars against wall-clock days; serving: dollars per million output tokens
against output tokens/s. One colour per GPU type; the least-money plan circled.
"""

from __future__ import annotations

import io
from typing import Any, Mapping



def cost_front_png(response: Mapping[str, Any]) -> bytes:
    from vramopt.plot import plotting

    pyplot, front = plotting(response)
    serving = response["workload"] == "infer"

    def axes_of(point: Mapping[str, Any]) -> tuple[float, float]:
        money = point["time_and_cost"]
        if serving:
            return point["throughput"]["tokens_per_s"], money["usd_per_million_output_tokens"]
        return money["wall_clock_days"], money["usd"]

    figure, axes = pyplot.subplots(figsize=(8, 5), dpi=120)
    for gpu in sorted({point["plan"]["gpu"] for point in front}):
        xs, ys = zip(*(axes_of(point) for point in front if point["plan"]["gpu"] == gpu))
        axes.plot(xs, ys, marker="o", linestyle="-", markersize=5, label=gpu)
    chosen = [point for point in front if point["chosen"]]
    if chosen:
        x, y = axes_of(chosen[0])
        axes.scatter([x], [y], s=180, facecolors="none", edgecolors="red", linewidths=2, label="least money", zorder=3)
    axes.set_xscale("log")
    if serving:
        axes.set_xlabel("output tokens/s (log scale)")
        axes.set_ylabel("US dollars per million output tokens")
    else:
        axes.set_xlabel(f"wall-clock days for {front[0]['time_and_cost']['total_tokens']:,} tokens (log scale)")
        axes.set_ylabel("US dollars")
    axes.set_title(f"{response['model']['name']}: {len(front)} plans no other beats on both time and money")
    axes.legend(loc="best")
    axes.grid(True, which="major", alpha=0.3)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    pyplot.close(figure)
    return buffer.getvalue()
