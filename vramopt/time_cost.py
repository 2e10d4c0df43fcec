"""Time and money of a plan: the ``time_and_cost`` object of a response (issue 17 item 3).

Training and fine-tuning, given a token budget N (``--total-tokens``):

    seconds        = N / tokens_per_s              (the plan's modelled throughput)
    wall_clock_days = seconds / 86,400
    gpu_hours      = gpus x seconds / 3,600
    usd            = gpu_hours x usd_per_gpu_hour  (null when the GPU has no price)

Serving, given a price: the plan running flat out at its modelled ``tokens_per_s`` (output
tokens of all slots together):

    usd_per_hour                   = gpus x usd_per_gpu_hour
    usd_per_million_output_tokens  = usd_per_hour / (tokens_per_s x 3,600) x 1e6

A MIG plan is billed for its whole GPUs (``plan.gpus``): the instances it packs on each GPU
are all its own. Start-up, checkpoints, failures and evaluation are not in the figure: it is
the modelled steady state, as ``tokens_per_s`` is.
"""

from __future__ import annotations

from typing import Any, Mapping

from vramopt.errors import InputError
from vramopt.prices import PriceTable

SECONDS_PER_DAY = 86_400.0
SECONDS_PER_HOUR = 3_600.0
TOKENS_PER_MILLION = 1e6

MAX_TOTAL_TOKENS = 10**18
"""A billion times a 15-trillion-token pre-training run: anything above is a typo."""


def _price_fields(prices: PriceTable, gpu: str) -> tuple[float | None, str]:
    price = prices.get(gpu)
    if price is None:
        return None, f"no price for GPU '{gpu}' (give --prices FILE or --price {gpu}=USD)"
    return price.usd_per_gpu_hour, price.source


def training_time_and_cost(response: Mapping[str, Any], total_tokens: int, prices: PriceTable) -> dict[str, Any]:
    """``time_and_cost`` of a training or fine-tuning response (estimate or solve)."""
    if not 0 < total_tokens <= MAX_TOTAL_TOKENS:
        raise InputError(f"--total-tokens must be in 1..{MAX_TOTAL_TOKENS:.0e}, got {total_tokens}")
    plan, throughput = response["plan"], response["throughput"]
    tokens_per_s = float(throughput["tokens_per_s"])
    seconds = total_tokens / tokens_per_s if tokens_per_s > 0 else float("inf")
    gpu_hours = plan["gpus"] * seconds / SECONDS_PER_HOUR
    usd_per_gpu_hour, source = _price_fields(prices, plan["gpu"])
    return {
        "total_tokens": total_tokens,
        "wall_clock_s": seconds,
        "wall_clock_days": seconds / SECONDS_PER_DAY,
        "gpu_hours": gpu_hours,
        "usd_per_gpu_hour": usd_per_gpu_hour,
        "usd": None if usd_per_gpu_hour is None else gpu_hours * usd_per_gpu_hour,
        "usd_source": source,
    }


def serving_time_and_cost(response: Mapping[str, Any], prices: PriceTable) -> dict[str, Any]:
    """``time_and_cost`` of a serving response: money per hour and per million output tokens."""
    plan, throughput = response["plan"], response["throughput"]
    tokens_per_s = float(throughput["tokens_per_s"])
    usd_per_gpu_hour, source = _price_fields(prices, plan["gpu"])
    per_hour = None if usd_per_gpu_hour is None else plan["gpus"] * usd_per_gpu_hour
    per_million = None
    if per_hour is not None and tokens_per_s > 0:
        per_million = per_hour / (tokens_per_s * SECONDS_PER_HOUR) * TOKENS_PER_MILLION
    return {
        "output_tokens_per_hour": tokens_per_s * SECONDS_PER_HOUR,
        "usd_per_gpu_hour": usd_per_gpu_hour,
        "usd_per_hour": per_hour,
        "usd_per_million_output_tokens": per_million,
        "usd_source": source,
    }


def attach_time_and_cost(data: dict[str, Any], total_tokens: int | None, prices: PriceTable, priced: bool) -> None:
    """Add ``time_and_cost`` to a response with a plan, and to each of its runners-up (their
    days and dollars beside the chosen plan's): training when ``total_tokens`` is given,
    serving when prices are."""
    if data.get("plan") is None:
        return
    serving = data.get("workload") == "infer"
    if serving and not priced or not serving and total_tokens is None:
        return

    def cost_of(response: Mapping[str, Any]) -> dict[str, Any]:
        if serving:
            return serving_time_and_cost(response, prices)
        return training_time_and_cost(response, total_tokens, prices)

    data["time_and_cost"] = cost_of(data)
    for runner in data.get("runners_up") or []:
        runner["time_and_cost"] = cost_of({"plan": runner["plan"], "throughput": {"tokens_per_s": runner["tokens_per_s"]}})


def cost_headers(cost: Mapping[str, Any]) -> list[str]:
    """The runners-up table's money columns (training: days and dollars; serving: dollars
    per million output tokens and per hour)."""
    return ["days", "USD"] if "total_tokens" in cost else ["USD/M tokens", "USD/hour"]


def cost_cells(cost: Mapping[str, Any]) -> list[str]:
    if "total_tokens" in cost:
        return [f"{cost['wall_clock_days']:,.1f}", "-" if cost["usd"] is None else f"{cost['usd']:,.0f}"]
    per_million, per_hour = cost["usd_per_million_output_tokens"], cost["usd_per_hour"]
    return ["-" if per_million is None else f"{per_million:,.4f}", "-" if per_hour is None else f"{per_hour:,.2f}"]


def render_time_and_cost(cost: Mapping[str, Any]) -> str:
    """The table output's lines for ``time_and_cost``."""
    usd = cost.get("usd") if "usd" in cost else cost.get("usd_per_million_output_tokens")
    price = "no price" if cost["usd_per_gpu_hour"] is None else f"${cost['usd_per_gpu_hour']:g}/GPU-hour"
    if "total_tokens" in cost:
        money = "-" if usd is None else f"${usd:,.0f}"
        return (f"time/cost {cost['total_tokens']:,} tokens: {cost['wall_clock_days']:,.2f} days wall clock, "
                f"{cost['gpu_hours']:,.0f} GPU-hours, {money} ({price}; {cost['usd_source']})")
    per_hour = "-" if cost["usd_per_hour"] is None else f"${cost['usd_per_hour']:,.2f}/hour"
    per_million = "-" if usd is None else f"${usd:,.4f} per million output tokens"
    return f"cost      {per_million}, {per_hour} at full load ({price}; {cost['usd_source']})"
