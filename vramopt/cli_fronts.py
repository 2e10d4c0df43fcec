"""The ``pareto`` command's three fronts (``--axes``): how each one's response is built, and its
CSV rows, PNG and table, so the command reads one entry instead of branching on the axes at
every step."""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

import click

from vramopt.cli_cost import money_flags_given, time_money_front
from vramopt.cli_options import build_space
from vramopt.frameworks import DEFAULT_FRAMEWORK

AXES = ("throughput", "time,cost", "tpot")


class FrontViews(NamedTuple):
    rows_for_csv: Callable[[Mapping[str, Any]], list]
    png: Callable[[Mapping[str, Any]], bytes]
    render: Callable[..., str]


def front_response(axes: str, workload: Any, options: Mapping[str, Any], framework: str | None, verify: bool) -> dict[str, Any]:
    """The front's response, after refusing the flags that do not apply to these axes."""
    if axes == "time,cost":
        if verify:
            raise click.UsageError("--verify certifies the tokens/s-GPUs-memory front; it does not apply to --axes time,cost")
        if framework not in (None, DEFAULT_FRAMEWORK):
            raise click.UsageError("--framework applies to the tokens/s-GPUs-memory front; --axes time,cost searches the generic rules")
        return time_money_front(workload, options)
    if money_flags_given():
        raise click.UsageError("--total-tokens, --price and --prices apply to pareto with --axes time,cost")
    space = build_space(options, framework=framework or DEFAULT_FRAMEWORK)
    if axes == "tpot":
        from vramopt.optimizer.tpot_front import tpot_front_response

        return tpot_front_response(workload, space, verify=verify)
    from vramopt.optimizer.front import pareto_response

    return pareto_response(workload, space, verify=verify)


def front_views(axes: str) -> FrontViews:
    """The CSV rows, PNG and table of the front of ``axes``."""
    if axes == "tpot":
        from vramopt.display_tpot_front import render_tpot_front, tpot_front_png
        from vramopt.optimizer.tpot_front import tpot_rows_for_csv

        return FrontViews(tpot_rows_for_csv, tpot_front_png, render_tpot_front)
    from vramopt.optimizer.front import front_rows_for_csv

    if axes == "time,cost":
        from vramopt.display_cost import render_cost_front
        from vramopt.plot_cost import cost_front_png

        return FrontViews(front_rows_for_csv, cost_front_png, render_cost_front)
    from vramopt.display import render_front
    from vramopt.plot import front_png

    return FrontViews(front_rows_for_csv, front_png, render_front)
