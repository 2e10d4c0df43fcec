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
from vramopt.optimizer.pack_brute_force import brute_force
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
