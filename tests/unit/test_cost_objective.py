"""The money objectives (issue 17 item 3): --objective cost and cost-per-token.

Expected values come from the cost model evaluated plan by plan (``estimate``) or from
hand arithmetic on prices, never from the objective code itself.
"""

from __future__ import annotations

import pytest

from vramopt import api
from vramopt.errors import InputError
from vramopt.optimizer.cost_objective import PRICE_STEPS, price_units
from vramopt.optimizer.oracle import solve_exhaustive
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.search import solve
from vramopt.time_cost import SECONDS_PER_DAY
from vramopt.types import SearchSpace, ServingWorkload, TrainingWorkload

WORKLOAD = TrainingWorkload(model="llama-3.1-8b", seq_len=4096, global_batch=256)
TOKENS = 10**12


def cost_space(prices: dict[str, float], **extra) -> SearchSpace:
    return SearchSpace(gpus=tuple(prices), max_gpus=16, objective="cost", total_tokens=TOKENS,
                       usd_per_gpu_hour=prices, workers=1, **extra)


def usd(plan_estimate, price: float) -> float:
    hours = TOKENS / plan_estimate.tokens_per_s / 3_600
    return hours * plan_estimate.plan.gpus * price


def test_integer_prices_scale_to_the_dearest_gpu():
    assert price_units([2.5, 5.0, 1.2], 1_000) == (PRICE_STEPS // 2, PRICE_STEPS, 2_400)
    # A tiny positive price never becomes free; a zero price stays free.
    assert price_units([1e-9, 1.0, 0.0], 1_000) == (1, PRICE_STEPS, 0)
    assert price_units([0.0, 0.0], 1_000) == (0, 0)
    with pytest.raises(InputError, match="too large for an exact cost objective"):
        price_units([1.0], 2**60)


def _best_on(gpu: str, prices: dict[str, float]):
    result = solve(WORKLOAD, cost_space(prices, pin={"gpu": gpu}))
    return result.estimate


def test_cost_picks_the_gpu_type_whose_best_plan_costs_least_and_follows_the_prices():
    """Each GPU type's least-money plan, priced by hand from estimate's tokens/s: the
    solve across both picks the cheaper one, and swapping which GPU is cheap swaps the pick."""
    picks = []
    for prices in ({"h100": 0.8, "b200": 5.98}, {"h100": 9.0, "b200": 2.0}):
        per_gpu = {gpu: usd(_best_on(gpu, prices), price) for gpu, price in prices.items()}
        chosen = solve(WORKLOAD, cost_space(prices)).estimate
        assert chosen.plan.gpu == min(per_gpu, key=per_gpu.get)
        assert usd(chosen, prices[chosen.plan.gpu]) == pytest.approx(min(per_gpu.values()), rel=1e-4)
        picks.append(chosen.plan.gpu)
    assert picks == ["h100", "b200"]


def test_cost_is_never_more_than_the_throughput_plans_cost():
    prices = {"h100": 2.69, "b200": 5.98}
    cheapest = solve(WORKLOAD, cost_space(prices)).estimate
    fastest = solve(WORKLOAD, SearchSpace(gpus=("h100", "b200"), max_gpus=16, workers=1)).estimate
    assert usd(cheapest, prices[cheapest.plan.gpu]) <= usd(fastest, prices[fastest.plan.gpu]) * (1 + 1e-4)


def test_a_deadline_is_met_in_floating_point_and_can_force_a_dearer_faster_plan():
    prices = {"h100": 2.69}
    free = solve(WORKLOAD, cost_space(prices)).estimate
    free_days = TOKENS / free.tokens_per_s / SECONDS_PER_DAY
    deadline = free_days / 3
    rushed = solve(WORKLOAD, cost_space(prices, deadline_days=deadline)).estimate
    assert TOKENS / rushed.tokens_per_s / SECONDS_PER_DAY <= deadline
    assert rushed.tokens_per_s > free.tokens_per_s
    assert usd(rushed, 2.69) >= usd(free, 2.69) * (1 - 1e-6)


def test_an_unreachable_deadline_names_the_fastest_plans_days():
    prices = {"h100": 2.69}
    fastest = solve(WORKLOAD, SearchSpace(gpus=("h100",), max_gpus=16, workers=1)).estimate
    fastest_days = TOKENS / fastest.tokens_per_s / SECONDS_PER_DAY
    result = solve(WORKLOAD, cost_space(prices, deadline_days=fastest_days / 2))
    assert result.estimate is None
    reason = result.explanation.one_line()
    assert result.explanation.binding_constraint == "deadline"
    assert f"takes {fastest_days:,.1f} days" in reason
    assert "--deadline-days" in reason


def test_cp_sat_equals_exhaustive_for_cost_with_a_deadline():
    problem = build_problem(WORKLOAD, cost_space({"h100": 2.69, "b200": 5.98, "a100-80gb": 1.29}, deadline_days=40.0))
    from vramopt.optimizer.solve import solve_cp

    outcome = solve_cp(problem, 30.0, 1)
    exhaustive = solve_exhaustive(problem)
    assert exhaustive is not None and outcome.choice == exhaustive


def test_cost_per_token_serving_picks_least_money_per_output_token():
    workload = ServingWorkload(model="llama-3.1-8b", context=4096)
    prices = {"h100": 2.69, "l40s": 0.86}
    space = SearchSpace(gpus=("h100", "l40s"), max_gpus=8, objective="cost-per-token", usd_per_gpu_hour=prices, workers=1)
    chosen = solve(workload, space).estimate
    per_token = {}
    for gpu in prices:
        best = solve(workload, SearchSpace(gpus=(gpu,), max_gpus=8, objective="cost-per-token",
                                           usd_per_gpu_hour={gpu: prices[gpu]}, workers=1)).estimate
        per_token[gpu] = best.plan.gpus * prices[gpu] / best.tokens_per_s
    assert chosen.plan.gpu == min(per_token, key=per_token.get)


@pytest.mark.parametrize(
    "workload, space, message",
    [
        (WORKLOAD, SearchSpace(gpus=("h100",), objective="cost", usd_per_gpu_hour={"h100": 2.0}), "needs --total-tokens"),
        (WORKLOAD, SearchSpace(gpus=("h100", "b200"), objective="cost", total_tokens=TOKENS, usd_per_gpu_hour={"h100": 2.0}),
         "none for b200"),
        (WORKLOAD, SearchSpace(gpus=("h100",), objective="cost", total_tokens=TOKENS, usd_per_gpu_hour={"h100": -1.0}),
         "at least 0"),
        (WORKLOAD, SearchSpace(gpus=("h100",), objective="cost", total_tokens=TOKENS, usd_per_gpu_hour={"h800x": 1.0}),
         "usd_per_gpu_hour"),
        (WORKLOAD, SearchSpace(gpus=("h100",), deadline_days=3.0, total_tokens=TOKENS), "only used with --objective cost"),
        (WORKLOAD, SearchSpace(gpus=("h100",), objective="cost-per-token", usd_per_gpu_hour={"h100": 2.0}), "for --workload infer"),
        (ServingWorkload(model="llama-3.1-8b"), SearchSpace(gpus=("h100",), objective="cost", total_tokens=TOKENS,
                                                            usd_per_gpu_hour={"h100": 2.0}), "cost-per-token"),
        (ServingWorkload(model="llama-3.1-8b"), SearchSpace(gpus=("h100",), total_tokens=TOKENS), "does not apply"),
    ],
)
def test_bad_money_fields_are_refused(workload, space, message):
    with pytest.raises(InputError, match=message):
        solve(workload, space)


def test_the_api_prices_the_plan_and_each_runner_up():
    response = api.solve({
        "workload": {"model": "8b", "seq_len": 4096, "global_batch": 256},
        "space": {"gpus": ["h100", "b200"], "max_gpus": 16, "objective": "cost", "total_tokens": TOKENS,
                  "usd_per_gpu_hour": {"h100": 2.69, "b200": 5.98}, "workers": 1},
    }).to_dict()
    cost = response["time_and_cost"]
    price = {"h100": 2.69, "b200": 5.98}[response["plan"]["gpu"]]
    hours = TOKENS / response["throughput"]["tokens_per_s"] / 3_600 * response["plan"]["gpus"]
    assert cost["usd"] == pytest.approx(hours * price)
    assert cost["usd_source"] == "request space.usd_per_gpu_hour"
    runners = response["runners_up"]
    assert runners and all("time_and_cost" in runner for runner in runners)
    # Least money: no runner-up costs less than the chosen plan (beyond the price rounding).
    assert all(runner["time_and_cost"]["usd"] >= cost["usd"] * (1 - 1e-4) for runner in runners)
    # Both GPU types appear: the other type's best plan is among the runners-up.
    assert {runner["plan"]["gpu"] for runner in runners} | {response["plan"]["gpu"]} == {"h100", "b200"}


def test_api_refuses_a_price_that_is_not_a_number():
    with pytest.raises(InputError, match="usd_per_gpu_hour.h100"):
        api.solve({"workload": {"model": "8b"}, "space": {"usd_per_gpu_hour": {"h100": "cheap"}}})



def test_the_api_estimate_and_pareto_take_the_money_fields():
    plan = {"gpu": "h100", "gpus": 8, "tensor_parallel": 1, "pipeline_parallel": 1, "zero_stage": 3}
    data = api.estimate({"workload": {"model": "8b", "seq_len": 4096, "global_batch": 256}, "plan": plan,
                         "total_tokens": TOKENS, "usd_per_gpu_hour": {"h100": 2.69}}).to_dict()
    hours = TOKENS / data["throughput"]["tokens_per_s"] / 3_600 * 8
    assert data["time_and_cost"]["usd"] == pytest.approx(hours * 2.69)
    with pytest.raises(InputError, match="needs total_tokens"):
        api.estimate({"workload": {"model": "8b"}, "plan": plan, "usd_per_gpu_hour": {"h100": 2.69}})
    with pytest.raises(InputError, match="at least 0"):
        api.estimate({"workload": {"model": "8b"}, "plan": plan, "total_tokens": TOKENS, "usd_per_gpu_hour": {"h100": -1}})
    front = api.pareto({"workload": {"model": "8b", "seq_len": 4096, "global_batch": 256}, "axes": "time,cost",
                        "space": {"gpus": ["h100"], "max_gpus": 16, "total_tokens": TOKENS, "usd_per_gpu_hour": {"h100": 2.69}}}).to_dict()
    assert front["front"] and all("time_and_cost" in point for point in front["front"])
    with pytest.raises(InputError, match="time-money front"):
        api.pareto({"workload": {"model": "8b"}, "space": {"gpus": ["h100"], "total_tokens": TOKENS}})


def test_money_requests_validate_against_the_request_schema():
    import json
    from pathlib import Path

    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "schema" / "vramopt-request-v1.schema.json").read_text())
    plan = {"gpu": "h100", "gpus": 8}
    for request in (
        {"workload": {"model": "8b"}, "space": {"gpus": ["h100", "b200"], "objective": "cost", "total_tokens": TOKENS,
                                                 "deadline_days": 30.0, "usd_per_gpu_hour": {"h100": 2.69, "b200": 5.98}}},
        {"workload": {"model": "8b"}, "plan": plan, "total_tokens": TOKENS, "usd_per_gpu_hour": {"h100": 2.69}},
        {"workload": {"model": "8b"}, "axes": "time,cost", "space": {"total_tokens": TOKENS, "usd_per_gpu_hour": {"b200": 5.98}}},
    ):
        jsonschema.validate(request, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"workload": {"model": "8b"}, "space": {"usd_per_gpu_hour": {"h100": -1}}}, schema)
