"""The money objectives over the integer tables (issue 17 item 3).

- ``cost`` (training kinds): least money for ``total_tokens``. A step processes
  global_batch x seq_len tokens, so the run takes total_tokens / (global_batch x seq_len)
  steps and costs steps x step_s x gpus x usd_per_gpu_hour / 3,600: for one workload that is
  a constant times price x gpus x step ticks. Optionally ``deadline_days``: the run must end
  within that wall clock, a bound on the step ticks (as min-gpus' throughput target).
- ``cost-per-token`` (serving): least money per output token. Serving ticks measure the
  seconds per output token of the whole deployment (``serving_problem``), so the money per
  token is again a constant times price x gpus x ticks.

Both minimize (price x gpus x ticks, ticks, gpus, memory, rank): least money, then faster,
then fewer GPUs, more headroom, the fixed order. Prices become integers here, once, at
problem build (``with_cost_objective``), so CP-SAT and the exhaustive oracle read the same
integers: each GPU type's price in units of 1/PRICE_STEPS of the dearest searched GPU's
price (fewer steps only when a very large space would overflow CP-SAT's int64 objective).
Two plans whose costs differ by less than that rounding may be ordered by the tie-breaks;
the money shown (``time_and_cost``) is computed in floating point from the exact prices.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from vramopt.errors import InputError, UnknownNameError
from vramopt.hardware import load_gpu
from vramopt.optimizer.ticks import UNREACHABLE, bound_in_ticks

COST_OBJECTIVES = ("cost", "cost-per-token")

PRICE_STEPS = 10_000
"""Integer price resolution: the dearest GPU is 10,000 units (e.g. $0.0005 steps at
$5/GPU-hour). Assumption: four significant digits, finer than any quoted hourly price's
spread between clouds; more would shrink the spaces CP-SAT can take without overflow."""

MIN_PRICE_STEPS = 100
"""Below this resolution the objective would be too coarse to call the answer least money:
refused with a message instead."""

OBJECTIVE_MAGNITUDE_LIMIT = 2**60
"""As ``cp_objective.OBJECTIVE_MAGNITUDE_LIMIT``: CP-SAT rejects an objective whose sum of
|coefficients| could overflow int64 (the oracle's int64 products stay below it too)."""

MAX_TOTAL_TOKENS = 10**18
"""As ``time_cost.MAX_TOTAL_TOKENS``: a billion 15-trillion-token runs; above is a typo."""

MAX_DEADLINE_DAYS = 36_525.0
"""A century: a longer deadline constrains nothing a user means."""

MAX_USD_PER_GPU_HOUR = 1e6
"""As ``prices.MAX_USD_PER_GPU_HOUR``: a larger figure is a typo (cents for dollars)."""

SECONDS_PER_DAY = 86_400.0


def check_cost_space(space, workload) -> None:
    """The money fields of a search space: refused when malformed or when they cannot apply."""
    serving = workload.kind == "infer"
    if space.objective == "cost" and serving:
        raise InputError("objective cost is for training kinds (least money for --total-tokens); serving uses --objective cost-per-token")
    if space.objective == "cost-per-token" and not serving:
        raise InputError(f"objective cost-per-token is for --workload infer; workload {workload.kind} uses --objective cost with --total-tokens")
    tokens = space.total_tokens
    if tokens is not None:
        if serving:
            raise InputError("total_tokens (--total-tokens) does not apply to --workload infer")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 < tokens <= MAX_TOTAL_TOKENS:
            raise InputError(f"total_tokens (--total-tokens) must be an integer in 1..{MAX_TOTAL_TOKENS:.0e}, got {tokens!r}")
    if space.objective == "cost" and tokens is None:
        raise InputError("objective cost needs --total-tokens N (the token budget whose cost it minimizes)")
    deadline = space.deadline_days
    if deadline is not None:
        if space.objective != "cost":
            raise InputError("--deadline-days is only used with --objective cost")
        if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not (0 < deadline <= MAX_DEADLINE_DAYS):
            raise InputError(f"--deadline-days must be a number of days in (0, {MAX_DEADLINE_DAYS:g}], got {deadline!r}")
    for name, price in space.usd_per_gpu_hour.items():
        try:
            load_gpu(name)
        except UnknownNameError as error:
            raise InputError(f"usd_per_gpu_hour: {error}") from None
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not math.isfinite(price) or price < 0:
            raise InputError(f"usd_per_gpu_hour of '{name}' must be a finite number of US dollars at least 0, got {price!r}")
        if price > MAX_USD_PER_GPU_HOUR:
            raise InputError(f"usd_per_gpu_hour of '{name}' is {price:g}, more than {MAX_USD_PER_GPU_HOUR:g}: check the unit")


def price_of(space, gpu_name: str) -> float | None:
    """The space's price of one GPU type (names and aliases resolved through the catalog),
    else the built-in one (``prices.BUILTIN_PRICES``)."""
    canonical = load_gpu(gpu_name).name
    for name, price in space.usd_per_gpu_hour.items():
        if load_gpu(name).name == canonical:
            return float(price)
    from vramopt.prices import BUILTIN_PRICES

    builtin = BUILTIN_PRICES.get(canonical)
    return None if builtin is None else builtin.usd_per_gpu_hour


def _coefficient_sum(problem) -> int:
    """Sum over every key and valid item of gpus x ticks: what the cost expression's
    coefficients add up to before the price factor (an upper bound of CP-SAT's sum)."""
    gpus = problem.keys["gpus"].astype(object)
    state = np.where(problem.state.valid, problem.state.time_ticks, 0).sum(axis=1).astype(object)
    activation = np.where(problem.activation.valid, problem.activation.time_ticks, 0).sum(axis=1).astype(object)
    interaction = 0 if problem.interaction is None else problem.interaction.time_ticks.sum(axis=1).astype(object)  # optimizer/interaction.py
    return int(np.sum(gpus * (state + activation + interaction)))


def price_units(prices: list[float], coefficient_sum: int) -> tuple[int, ...]:
    """Integer prices: the dearest at ``steps`` units, the others in proportion (a positive
    price never rounds to 0)."""
    dearest = max(prices)
    if dearest <= 0:
        return tuple(0 for _ in prices)
    steps = min(PRICE_STEPS, OBJECTIVE_MAGNITUDE_LIMIT // max(coefficient_sum, 1) // 2)
    if steps < MIN_PRICE_STEPS:
        raise InputError("the search space is too large for an exact cost objective (prices could not keep "
                         f"{MIN_PRICE_STEPS} integer steps without overflow); narrow it with --max-gpus, --pin or --allow")
    return tuple(0 if price == 0 else max(1, round(price / dearest * steps)) for price in prices)


def with_cost_objective(problem):
    """The problem with its integer prices and, for a deadline, its step-time bound; other
    objectives unchanged."""
    space = problem.space
    if space.objective not in COST_OBJECTIVES:
        return problem
    prices = [price_of(space, gpu.name) for gpu in problem.gpus]
    missing = [gpu.name for gpu, price in zip(problem.gpus, prices) if price is None]
    if missing:
        raise InputError(
            f"objective {space.objective} needs a price for every GPU type searched: none for {', '.join(missing)} "
            f"(give --prices FILE or --price {missing[0]}=USD)"
        )
    units = price_units(prices, _coefficient_sum(problem))
    bound = problem.bound_ticks
    if space.deadline_days is not None:
        bound = bound_in_ticks(deadline_step_s(problem.workload, space), problem.tick_s)
    return replace(problem, gpu_price_units=units, bound_ticks=bound)


def tokens_per_step(workload) -> int:
    return workload.global_batch * workload.seq_len


def deadline_step_s(workload, space) -> float:
    """The longest step that still ends ``total_tokens`` within ``deadline_days``."""
    return space.deadline_days * SECONDS_PER_DAY * tokens_per_step(workload) / space.total_tokens


def cost_per_tick(problem, key) -> np.ndarray:
    """Integer price x GPUs of each key: the cost objective's coefficient of one tick."""
    units = np.asarray(problem.gpu_price_units, dtype=np.int64)
    key = np.asarray(key)
    return units[problem.keys["gpu_index"][key]] * problem.keys["gpus"][key]


def components(problem, key, step_ticks, memory_mib, rank) -> tuple:
    """(price x gpus x ticks, ticks, gpus, memory, rank), broadcast like ``objective.components``."""
    shape = np.shape(step_ticks)
    gpus = np.broadcast_to(problem.keys["gpus"][key], shape)
    return (cost_per_tick(problem, key) * step_ticks, step_ticks, gpus, memory_mib, rank)


def describe(space) -> str:
    if space.objective == "cost-per-token":
        return "cost-per-token: least money per output token, then max tokens/s, fewer GPUs, more headroom, a fixed order of choices"
    deadline = f" within {space.deadline_days:g} days" if space.deadline_days is not None else ""
    return (f"cost: least money for {space.total_tokens:,} tokens{deadline}, then max tokens/s, fewer GPUs, more headroom, "
            "a fixed order of choices")


def stage_terms(problem, key_terms, ticks_with_keys, gpus, memory, rank, linear, tie_breaks) -> list:
    """The CP-SAT stages of a cost objective: money, then ticks, then the tie-breaks
    (``cp_objective.stage_expressions`` passes its term lists and helpers)."""
    units = cost_per_tick(problem, np.arange(problem.key_count))
    money = [(int(units[key]) * coefficient, literal) for coefficient, literal, key in ticks_with_keys]
    ticks = [(coefficient, literal) for coefficient, literal, _ in ticks_with_keys]
    return [linear(money), linear(ticks)] + tie_breaks([gpus, memory, rank])


def primary_bounds(problem, lower_ticks, upper_ticks, feasible):
    """(feasible, lower, upper) of the money objective per key, for ``prune``: the deadline
    bound (when there is one) removes keys too slow even at their fastest, and an upper
    bound from a greedy plan counts only when that plan meets the deadline."""
    units = cost_per_tick(problem, np.arange(problem.key_count))
    if problem.bound_ticks is not None:
        feasible = feasible & (lower_ticks <= problem.bound_ticks)
        upper_ok = upper_ticks <= problem.bound_ticks
    else:
        upper_ok = np.ones_like(feasible)
    # A reachable plan's money is at most the integer prices' headroom (price_units keeps
    # the coefficient sum x steps below 2^59), so only the UNREACHABLE sentinels could
    # overflow: they are kept out of the products.
    lower_reachable = lower_ticks < UNREACHABLE
    lower = np.where(lower_reachable, units * np.where(lower_reachable, lower_ticks, 0), UNREACHABLE)
    upper_reachable = feasible & upper_ok & (upper_ticks < UNREACHABLE)
    upper = np.where(upper_reachable, units * np.where(upper_reachable, upper_ticks, 0), UNREACHABLE)
    return feasible, lower, upper


def other_gpu_types(problem, chosen, lower, best_in_keys_by_bound) -> list[tuple[str, object]]:
    """For a money objective across GPU types: the best plan on each GPU type other than the
    chosen plan's, so that the runners-up set each type's days and dollars side by side."""
    if problem.space.objective not in COST_OBJECTIVES or len(problem.gpus) < 2:
        return []
    chosen_gpu = int(problem.keys["gpu_index"][chosen.key])
    found = []
    for gpu_index in range(len(problem.gpus)):
        if gpu_index == chosen_gpu:
            continue
        keys = np.flatnonzero(problem.keys["gpu_index"] == gpu_index)
        choice = best_in_keys_by_bound(problem, keys, lower)
        if choice is not None:
            found.append(("gpu", choice))
    return found
