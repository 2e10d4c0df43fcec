"""The Pareto plot (optional: ``pip install 'vramopt[plot]'`` brings matplotlib).

Tokens/s against GPUs, peak memory per GPU as colour, the chosen plan (max tokens/s, then
fewest GPUs, then least memory) marked. ``front_png`` returns the PNG's bytes (whatever
the file name's extension); ``write_front_png`` writes them.
"""

from __future__ import annotations

import io
from typing import Any, Mapping

from vramopt.errors import InputError
from vramopt.units import BYTES_PER_GB


def write_front_png(response: Mapping[str, Any], path: str) -> None:
    """Write the PNG to ``path`` as the CLI writes its outputs: atomically, and only over a
    regular file (vramopt.output_files)."""
    from vramopt.output_files import write_files_atomically

    write_files_atomically({path: front_png(response)})


def plotting(response: Mapping[str, Any]):
    """(matplotlib.pyplot on the Agg backend, the response's front) for the PNG writers: an
    InputError without matplotlib (an optional extra) or with an empty front."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError:
        raise InputError("--plot needs matplotlib: pip install 'vramopt[plot]'") from None
    front = response["front"]
    if not front:
        raise InputError("the front is empty: nothing fits, so there is nothing to plot")
    return pyplot, front


def front_png(response: Mapping[str, Any]) -> bytes:
    pyplot, front = plotting(response)
    import matplotlib.ticker
    gpus = [point["plan"]["gpus"] for point in front]
    tokens = [point["throughput"]["tokens_per_s"] for point in front]
    memory_gb = [point["memory"]["total_bytes"] / BYTES_PER_GB for point in front]
    figure, axes = pyplot.subplots(figsize=(8, 5), dpi=120)
    scatter = axes.scatter(gpus, tokens, c=memory_gb, cmap="viridis", s=28, edgecolors="none")
    chosen = [point for point in front if point["chosen"]]
    if chosen:
        point = chosen[0]
        axes.scatter([point["plan"]["gpus"]], [point["throughput"]["tokens_per_s"]], s=180, facecolors="none",
                     edgecolors="red", linewidths=2, label="chosen plan (max tokens/s)")
        axes.legend(loc="lower right")
    axes.set_xscale("log", base=2)
    axes.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axes.set_yscale("log")
    axes.set_xlabel("GPUs (count, log scale)")
    unit = "output tokens/s" if response["workload"] == "infer" else "training tokens/s"
    axes.set_ylabel(f"throughput ({unit}, log scale)")
    model = response["model"]["name"]
    axes.set_title(f"{model}: {len(front)} non-dominated plans (throughput vs GPUs vs memory)")
    colorbar = figure.colorbar(scatter, ax=axes)
    colorbar.set_label("peak memory per GPU (GB = 1e9 bytes)")
    axes.grid(True, which="major", alpha=0.3)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    pyplot.close(figure)
    return buffer.getvalue()
