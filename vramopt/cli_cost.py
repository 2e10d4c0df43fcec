"""``--total-tokens``, ``--prices`` and ``--price``: time and money of the plan shown.

The prices are read (and refused when bad) before the command's work; the
``time_and_cost`` object is added to the response right before it is displayed.
"""

from __future__ import annotations

import decimal
import functools
from typing import Any, Callable, Mapping

import click

from vramopt.prices import BUILTIN_PRICES, PriceTable, build_prices, space_prices
from vramopt.time_cost import MAX_TOTAL_TOKENS, attach_time_and_cost, render_time_and_cost
from vramopt.types import SearchSpace

_META_KEY = "vramopt.cost"


class TokenCount(click.ParamType):
    """A whole number of tokens, in digits or scientific notation (15e12, 1.5e13)."""

    name = "N"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip().replace("_", "")
            try:
                number = int(text)
            except ValueError:
                try:
                    parsed = decimal.Decimal(text)
                except decimal.InvalidOperation:
                    self.fail(f"'{value}' is not a number of tokens (write 15000000000000 or 15e12)", param, ctx)
                if not parsed.is_finite() or parsed != parsed.to_integral_value():
                    self.fail(f"'{value}' is not a whole number of tokens", param, ctx)
                number = int(parsed)
        if not 1 <= number <= MAX_TOTAL_TOKENS:
            self.fail(f"{value} is not in the range 1..{MAX_TOTAL_TOKENS:.0e}", param, ctx)
        return number


def cost_options(command: Callable) -> Callable:
    """Add the time-and-money flags to a command (inside ``hardware_option``: prices may
    name the hardware file's GPUs)."""

    @click.option("--price", "price_flags", multiple=True, metavar="GPU=USD",
                  help="Price of one GPU-hour in US dollars, e.g. --price h100=2.5 (repeat; wins over --prices).")
    @click.option("--prices", "prices_path", type=str, default=None,
                  help="TOML file: [prices] GPU = { usd_per_gpu_hour = X, source = \"...\" } (docs/hardware.md).")
    @click.option("--total-tokens", type=TokenCount(), default=None,
                  help="Training tokens to process (15e12 or digits): adds wall-clock days, GPU-hours and cost (training kinds).")
    @functools.wraps(command)
    def run(*args: Any, price_flags: tuple[str, ...] = (), prices_path: str | None = None,
            total_tokens: int | None = None, **kwargs: Any) -> Any:
        priced = prices_path is not None or bool(price_flags)
        prices = build_prices(prices_path, price_flags)
        if kwargs.get("objective") == "cost" and total_tokens is None and kwargs.get("request_path") is None:
            raise click.UsageError("--objective cost needs --total-tokens N (the token budget whose cost it minimizes)")
        if kwargs.get("objective") == "cost-per-token" and kwargs.get("workload_kind") not in (None, "infer"):
            raise click.UsageError("--objective cost-per-token is for --workload infer; training uses --objective cost with --total-tokens")
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


def add_time_and_cost(data: dict[str, Any], space: SearchSpace | None = None) -> None:
    """Add ``time_and_cost`` to a response (and its runners-up) when the flags asked for it,
    or, with ``--request``, when the request's space holds total_tokens or prices."""
    total_tokens, prices, priced = click.get_current_context().meta.get(_META_KEY, (None, PriceTable({}), False))
    if space is not None and total_tokens is None and not priced:
        total_tokens, prices, priced = space.total_tokens, space_prices(space.usd_per_gpu_hour), bool(space.usd_per_gpu_hour)
    _check_flags(data.get("workload"), total_tokens, priced)
    attach_time_and_cost(data, total_tokens, prices, priced)


def space_cost_fields(objective: str, deadline_days: float | None) -> dict[str, Any]:
    """The search-space fields of the money flags: the token budget, the deadline and every
    price given (the cost objectives need the prices; the others ignore them)."""
    total_tokens, prices, _ = click.get_current_context().meta.get(_META_KEY, (None, PriceTable({}), False))
    return {
        "objective": objective,
        "total_tokens": total_tokens,
        "deadline_days": deadline_days,
        # The user's prices only: the solver falls back to the built-in ones by itself.
        "usd_per_gpu_hour": {name: price.usd_per_gpu_hour for name, price in prices.by_gpu.items()
                             if price is not BUILTIN_PRICES.get(name)},
    }


def with_cost_lines(render: Callable[[Any], str]) -> Callable[[Mapping[str, Any]], str]:
    """A table renderer followed by the time-and-cost line when there is one."""

    def rendered(data: Mapping[str, Any]) -> str:
        text = render(data)
        cost = data.get("time_and_cost") if isinstance(data, Mapping) else None
        return text if cost is None else f"{text}\n{render_time_and_cost(cost)}"

    return rendered


def money_flags_given() -> bool:
    total_tokens, _, priced = click.get_current_context().meta.get(_META_KEY, (None, PriceTable({}), False))
    return total_tokens is not None or priced


def time_money_front(workload: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """``pareto --axes time,cost``: the time-money front of the request, priced with the
    flags' prices (their sources shown)."""
    from vramopt.cli_options import build_space
    from vramopt.optimizer.cost_front import cost_front_response

    serving = workload.kind == "infer"
    objective = "cost-per-token" if serving else "cost"
    if not serving and click.get_current_context().meta.get(_META_KEY, (None,))[0] is None:
        raise click.UsageError("--axes time,cost needs --total-tokens N for training (the days and dollars of what?)")
    space = build_space(options, **space_cost_fields(objective, None))
    prices = click.get_current_context().meta[_META_KEY][1]
    return cost_front_response(workload, space, prices)


def price_options(command: Callable) -> Callable:
    """--prices and --price alone (``pack``: money per hour, no token budget)."""

    @click.option("--price", "price_flags", multiple=True, metavar="GPU=USD",
                  help="Price of one GPU-hour in US dollars (repeat; wins over --prices): the least-money answer among "
                       "those of the most value, and its dollars per hour.")
    @click.option("--prices", "prices_path", type=str, default=None,
                  help="TOML file: [prices] GPU = { usd_per_gpu_hour = X, source = \"...\" } (docs/hardware.md).")
    @functools.wraps(command)
    def run(*args: Any, price_flags: tuple[str, ...] = (), prices_path: str | None = None, **kwargs: Any) -> Any:
        priced = prices_path is not None or bool(price_flags)
        prices = build_prices(prices_path, price_flags)
        usd = {name: price.usd_per_gpu_hour for name, price in prices.by_gpu.items()} if priced else None
        return command(*args, usd_per_gpu_hour=usd, **kwargs)

    return run


def pack_money_line(response: Mapping[str, Any]) -> str | None:
    total = response["summary"].get("usd_per_hour")
    return None if total is None else f"cost      ${total:,.2f}/hour for the admitted jobs ({response['summary']['tie_break']})"
