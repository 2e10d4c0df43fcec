"""pack with prices (issue 17 item 5): the most weighted normalized throughput first, then
the least money per hour (instead of the fewest whole GPUs), exact against the brute force;
each admitted job's and the whole answer's dollars per hour."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli_runner import invoke
from tests.unit.test_pack import small_instances
from vramopt import api
from vramopt.cluster import parse_cluster, parse_jobs
from vramopt.errors import InputError
from vramopt.optimizer.pack import job_options, solve_pack
from tests.oracles.pack_brute_force import brute_force
from vramopt.optimizer.pack_prices import pack_price_units
from vramopt.optimizer.pack_value import Values, objective_of

PRICES = {"h100": 2.69, "a100-80gb": 1.29, "b200": 5.98}


@settings(deadline=None, max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(small_instances(), st.sampled_from((PRICES, {"h100": 9.0, "a100-80gb": 0.5, "b200": 1.0}, {"h100": 0.0, "a100-80gb": 1.0, "b200": 1.0})))
def test_pack_with_prices_equals_brute_force(instance, prices):
    cluster, job_list = instance
    nodes = parse_cluster({"nodes": cluster})
    jobs = parse_jobs(job_list)
    options, best = job_options(jobs, nodes)
    units = pack_price_units(nodes, options, prices)
    expected = brute_force(jobs, nodes, options, best, units)
    response = solve_pack(jobs, nodes, time_limit_s=30.0, workers=1, usd_per_gpu_hour=prices)
    assert response["summary"]["solver"]["status"] == "optimal"
    admitted = {}
    money = 0.0
    for job_index, placement in enumerate(response["placements"]):
        if placement["admitted"]:
            option_index = next(index for index, option in enumerate(options[job_index]) if option.response["plan"] == placement["plan"])
            admitted[job_index] = (option_index, [])
            money += placement["usd_per_hour"]
        else:
            assert placement["usd_per_hour"] is None
    value, cost = objective_of(Values(jobs, options, best, units), options, admitted)
    assert (value, -cost) == expected
    assert response["summary"]["usd_per_hour"] == pytest.approx(money)


CLUSTER = {"nodes": [{"name": "h1", "gpu": "h100", "gpus": 8, "free_gpus": [0, 1, 2, 4, 5, 6, 7], "mig": {"3": ["3g.40gb", "3g.40gb"]}},
                     {"name": "b1", "gpu": "b200", "gpus": 8}]}
JOBS = [{"id": "chat", "model": "8b", "workload": "infer", "context": 4096, "max_gpus": 4},
        {"id": "small", "model": "8b", "workload": "infer", "context": 4096, "max_gpus": 1}]


def test_dollars_per_hour_are_gpus_times_price():
    response = solve_pack(parse_jobs(JOBS), parse_cluster(CLUSTER), usd_per_gpu_hour={"h100": 2.69, "b200": 5.98})
    for placement in response["placements"]:
        assert placement["admitted"]
        gpus = sum(len(indices) for indices in placement["gpus_by_node"].values())
        price = {"h100": 2.69, "b200": 5.98}[placement["plan"]["gpu"]]
        if placement["plan"]["mig_profile"] == "none":
            assert placement["usd_per_hour"] == pytest.approx(gpus * price)


def test_a_cluster_gpu_without_a_price_is_refused():
    with pytest.raises(InputError, match="none for h100"):
        solve_pack(parse_jobs(JOBS), parse_cluster(CLUSTER), usd_per_gpu_hour={"b200": 5.98})


def test_cli_and_api_pack_with_prices_and_api_hardware(tmp_path):
    cluster, jobs = tmp_path / "cluster.json", tmp_path / "jobs.json"
    cluster.write_text(json.dumps(CLUSTER))
    jobs.write_text(json.dumps(JOBS))
    result = invoke(["pack", "--cluster", str(cluster), "--jobs", str(jobs), "--price", "h100=2.69", "--price", "b200=5.98",
                     "--format", "json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["summary"]["usd_per_hour"] > 0
    table = invoke(["pack", "--cluster", str(cluster), "--jobs", str(jobs), "--price", "h100=2.69", "--price", "b200=5.98"])
    assert "$" in table.stdout and "/hour" in table.stdout
    through_api = api.pack({"cluster": CLUSTER, "jobs": JOBS, "usd_per_gpu_hour": {"h100": 2.69, "b200": 5.98}}).to_dict()
    assert [p["plan"] for p in through_api["placements"]] == [p["plan"] for p in data["placements"]]
    assert through_api["summary"]["usd_per_hour"] == pytest.approx(data["summary"]["usd_per_hour"])
    # The pack request's hardware field: a cluster node may name the file's GPU profile.
    lab = {"gpu": {"h100-lab": {"based_on": "h100", "display_name": "H100 in 4-GPU nodes",
                                "node": {"gpus_per_node": {"value": 4, "source": "our lab inventory"}}}}}
    on_lab = api.pack({"cluster": {"nodes": [{"name": "l1", "gpu": "h100-lab", "gpus": 4}]},
                       "jobs": [JOBS[0]], "hardware": lab}).to_dict()
    assert on_lab["placements"][0]["admitted"] and on_lab["placements"][0]["plan"]["gpu"] == "h100-lab"
    bad = invoke(["pack", "--cluster", str(cluster), "--jobs", str(jobs), "--price", "b200=5.98"])
    assert bad.exit_code == 2 and bad.stderr.strip().splitlines() == [bad.stderr.strip()] and "none for h100" in bad.stderr


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(small_instances())
def test_pack_objective_cost_equals_brute_force(instance):
    cluster, job_list = instance
    nodes = parse_cluster({"nodes": cluster})
    jobs = parse_jobs(job_list)
    options, best = job_options(jobs, nodes)
    units = pack_price_units(nodes, options, PRICES)
    expected = brute_force(jobs, nodes, options, best, units, admit_all=True)
    response = solve_pack(jobs, nodes, time_limit_s=30.0, workers=1, usd_per_gpu_hour=PRICES, objective="cost")
    assert response["summary"]["solver"]["status"] == "optimal"
    admitted = {}
    for job_index, placement in enumerate(response["placements"]):
        if placement["admitted"]:
            option_index = next(index for index, option in enumerate(options[job_index]) if option.response["plan"] == placement["plan"])
            admitted[job_index] = (option_index, [])
    value, cost = objective_of(Values(jobs, options, best, units, admit_all=True), options, admitted)
    assert (value, -cost) == expected


def test_objective_cost_takes_a_jobs_cheapest_option_and_admits_at_least_as_many():
    """One training job alone on two free B200 nodes: the throughput objective takes its
    fastest option, the cost objective the option with the least dollars per hour (worked
    out here from the job's options), and never admits fewer jobs."""
    nodes = parse_cluster({"nodes": [{"name": "b1", "gpu": "b200", "gpus": 8}, {"name": "b2", "gpu": "b200", "gpus": 8}]})
    jobs = parse_jobs([{"id": "pt", "model": "8b", "weight": 1.0, "max_gpus": 16, "global_batch": 64, "seq_len": 2048}])
    options, _ = job_options(jobs, nodes)
    cheapest = min(option.gpus * 5.98 for option in options[0])
    fastest = max(options[0], key=lambda option: option.tokens_per_s)
    by_cost = solve_pack(jobs, nodes, usd_per_gpu_hour={"b200": 5.98}, objective="cost")
    by_throughput = solve_pack(jobs, nodes, usd_per_gpu_hour={"b200": 5.98})
    assert by_cost["placements"][0]["usd_per_hour"] == pytest.approx(cheapest)
    assert by_throughput["placements"][0]["plan"] == fastest.response["plan"]
    assert by_cost["summary"]["usd_per_hour"] < by_throughput["summary"]["usd_per_hour"]
    assert by_cost["summary"]["jobs_admitted"] >= by_throughput["summary"]["jobs_admitted"]
    assert by_cost["summary"]["weighted_normalized_throughput"] < by_throughput["summary"]["weighted_normalized_throughput"]
    with pytest.raises(InputError, match="needs prices"):
        solve_pack(jobs, nodes, objective="cost")


def test_cli_pack_objective_cost(tmp_path):
    cluster, jobs = tmp_path / "cluster.json", tmp_path / "jobs.json"
    cluster.write_text(json.dumps(CLUSTER))
    jobs.write_text(json.dumps(JOBS))
    args = ["pack", "--cluster", str(cluster), "--jobs", str(jobs), "--objective", "cost"]
    missing = invoke(args)
    assert missing.exit_code == 2 and "needs prices" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
    priced = invoke([*args, "--price", "h100=2.69", "--price", "b200=5.98", "--format", "json"])
    assert priced.exit_code == 0, priced.stderr
    data = json.loads(priced.stdout)
    assert data["summary"]["tie_break"].startswith("objective cost")
    by_throughput = json.loads(invoke([*args[:-2], "--price", "h100=2.69", "--price", "b200=5.98", "--format", "json"]).stdout)
    assert data["summary"]["usd_per_hour"] <= by_throughput["summary"]["usd_per_hour"] + 1e-9
    assert api.pack({"cluster": CLUSTER, "jobs": JOBS, "usd_per_gpu_hour": {"h100": 2.69, "b200": 5.98},
                     "objective": "cost"}).to_dict()["summary"]["usd_per_hour"] == pytest.approx(data["summary"]["usd_per_hour"])
