"""``--total-tokens``, ``--prices`` and ``--price``: time and money of the plan shown.

The prices are read (and refused when bad) before the command's work; the
``time_and_cost`` object is added to the response right before it is displayed.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

import click

from vramopt.prices import PriceTable, build_prices
from vramopt.time_cost import MAX_TOTAL_TOKENS, render_time_and_cost, serving_time_and_cost, training_time_and_cost

_META_KEY = "vramopt.cost"


def cost_options(command: Callable) -> Callable:
    """Add the time-and-money flags to a command (inside ``hardware_option``: prices may
    name the hardware file's GPUs)."""

    @click.option("--price", "price_flags", multiple=True, metavar="GPU=USD",
                  help="Price of one GPU-hour in US dollars, e.g. --price h100=2.5 (repeat; wins over --prices).")
    @click.option("--prices", "prices_path", type=str, default=None,
                  help="TOML file: [prices] GPU = { usd_per_gpu_hour = X, source = \"...\" } (docs/hardware.md).")
    @click.option("--total-tokens", type=click.IntRange(1, MAX_TOTAL_TOKENS), default=None,
                  help="Training tokens to process: adds wall-clock days, GPU-hours and cost (training kinds).")
    @functools.wraps(command)
    def run(*args: Any, price_flags: tuple[str, ...] = (), prices_path: str | None = None,
            total_tokens: int | None = None, **kwargs: Any) -> Any:
        priced = prices_path is not None or bool(price_flags)
        prices = build_prices(prices_path, price_flags)
        # Refuse a flag that cannot apply before any work (with --request the kind is known later).
        if kwargs.get("workload_kind") is not None and kwargs.get("request_path") is None:
            _check_flags(kwargs["workload_kind"], total_tokens, priced)
        click.get_current_context().meta[_META_KEY] = (total_tokens, prices, priced)
        return command(*args, **kwargs)

    return run


def _check_flags(kind: str, total_tokens: int | None, priced: bool) -> None:
    if kind == "infer" and total_tokens is not None:
        raise click.UsageError("--total-tokens does not apply to --workload infer (give --price or --prices for cost per million output tokens)")
    if kind != "infer" and total_tokens is None and priced:
        raise click.UsageError(f"--price/--prices need --total-tokens for --workload {kind} (the cost of what?)")


def add_time_and_cost(data: dict[str, Any]) -> None:
    """Add ``time_and_cost`` to a response when the flags asked for it."""
    total_tokens, prices, priced = click.get_current_context().meta.get(_META_KEY, (None, PriceTable({}), False))
    kind = data.get("workload")
    _check_flags(kind, total_tokens, priced)
    if data.get("plan") is None:
        return
    if kind == "infer":
        if priced:
            data["time_and_cost"] = serving_time_and_cost(data, prices)
        return
    if total_tokens is not None:
        data["time_and_cost"] = training_time_and_cost(data, total_tokens, prices)


def with_cost_lines(render: Callable[[Any], str]) -> Callable[[Mapping[str, Any]], str]:
    """A table renderer followed by the time-and-cost line when there is one."""

    def rendered(data: Mapping[str, Any]) -> str:
        text = render(data)
        cost = data.get("time_and_cost") if isinstance(data, Mapping) else None
        return text if cost is None else f"{text}\n{render_time_and_cost(cost)}"

    return rendered
