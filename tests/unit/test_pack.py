"""`pack`: valid placements, CP-SAT equals a brute-force assignment on small inventories,
incremental use with running jobs, and bad input."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli_runner import invoke
from vramopt import cli
from vramopt.cluster import gpu_index, parse_cluster, parse_jobs, parse_running
from vramopt.errors import InputError
from vramopt.estimate import estimate_serving, estimate_training
from vramopt.optimizer.pack import apply_running, job_options, solve_pack
from tests.oracles.pack_brute_force import brute_force, fits_capacities
from vramopt.optimizer.pack_greedy import greedy
from vramopt.optimizer.pack_options import node_count_ladder
from vramopt.optimizer.pack_value import STEPS_PER_SMALLEST_WEIGHT, Values, objective_of, rank
from vramopt.types import ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload

CLUSTER = {"nodes": [
    {"name": "h1", "gpu": "h100", "gpus": 8, "free_gpus": [0, 1, 2, 4, 5, 6, 7], "mig": {"3": ["3g.40gb", "3g.40gb"]}},
    {"name": "a1", "gpu": "a100-80gb", "gpus": 8, "free_gpus": [0, 1, 2, 3]},
    {"name": "b1", "gpu": "b200", "gpus": 8},
    {"name": "b2", "gpu": "b200", "gpus": 8},
]}
JOBS = [
    {"id": "chat-8b", "model": "8b", "workload": "infer", "weight": 2.0, "min_tokens_per_s": 5000, "context": 8192, "max_gpus": 4},
    {"id": "ft-70b", "model": "70b", "workload": "lora", "weight": 1.0, "max_gpus": 8, "global_batch": 64},
    {"id": "pt-8b", "model": "8b", "weight": 1.0, "max_gpus": 16},
    {"id": "pt-405b", "model": "405b", "weight": 1.0, "max_gpus": 16},
    {"id": "chat-mig", "model": "8b", "workload": "infer", "weight": 1.0, "context": 4096, "max_gpus": 1},
]


def check_valid(response, nodes, jobs=JOBS):
    used = {}
    by_name = {node.name: node for node in nodes}
    for placement in response["placements"]:
        if not placement["admitted"]:
            assert placement["gpus_by_node"] == {} and placement["reason"]
            continue
        plan = placement["plan"]
        for name, items in placement["gpus_by_node"].items():
            node = by_name[name]
            for item in items:
                assert (name, item) not in used, f"{item} on {name} given twice"
                used[name, item] = placement["job"]
                if isinstance(item, int):
                    assert item in node.free_gpus
                else:
                    gpu, rest = item.split(":")
                    profile, slot = rest.split("#")
                    assert node.mig[int(gpu)][int(slot)] == profile
        if len(placement["gpus_by_node"]) > 1:
            # Several nodes only in whole-node multiples; tensor parallelism inside a node.
            for name, items in placement["gpus_by_node"].items():
                assert len(items) == by_name[name].gpus
            assert plan["tensor_parallel"] <= by_name[next(iter(placement["gpus_by_node"]))].gpu.node.gpus_per_node
        # Re-verify the plan's memory with estimate.
        if "quantization" in plan:
            if plan.get("gpus", 1) == 0:
                continue  # a MIG option: per-instance plan checked below
            workload = ServingWorkload(model=plan_model(jobs, placement), context=plan["context"])
            fields = ("gpu", "gpus", "tensor_parallel", "pipeline_parallel", "quantization", "kv_cache_dtype", "paged_kv", "slots", "mig_profile", "speculative_decoding")
            estimate = estimate_serving(workload, ServingPlan(**{key: plan[key] for key in fields}))
        else:
            fields = ("gpu", "gpus", "tensor_parallel", "pipeline_parallel", "sequence_parallel", "virtual_stages", "zero_stage",
                      "checkpointing", "precision", "grad_comm_precision", "offload", "flash_attention", "micro_batch")
            job = next(job for job in jobs if job["id"] == placement["job"])
            workload = TrainingWorkload(model=job["model"], kind=job.get("workload", "train"), global_batch=plan["global_batch"], seq_len=plan["seq_len"])
            estimate = estimate_training(workload, TrainingPlan(**{key: plan[key] for key in fields}))
        assert estimate.fits
        assert sum(len(items) for items in placement["gpus_by_node"].values()) == plan["gpus"]


def plan_model(jobs, placement):
    return next(job for job in jobs if job["id"] == placement["job"])["model"]


def test_worked_example_places_valid_plans():
    nodes = parse_cluster(CLUSTER)
    response = solve_pack(parse_jobs(JOBS), nodes)
    assert response["summary"]["solver"]["status"] == "optimal"
    check_valid(response, nodes)
    assert response["summary"]["jobs_admitted"] >= 3


def test_running_jobs_keep_their_gpus():
    nodes = parse_cluster(CLUSTER)
    running = parse_running([{"job": "old", "gpus_by_node": {"b1": [0, 1, 2, 3, 4, 5, 6, 7], "h1": ["3:3g.40gb#0"]}}], nodes)
    response = solve_pack(parse_jobs(JOBS), nodes, running)
    for placement in response["placements"]:
        assert "b1" not in placement["gpus_by_node"]
        assert "3:3g.40gb#0" not in placement["gpus_by_node"].get("h1", [])
    with pytest.raises(InputError, match="is not free"):
        apply_running(nodes, parse_running([{"job": "x", "gpus_by_node": {"a1": [7]}}], nodes))


def test_an_unplaceable_job_says_why_with_numbers():
    nodes = parse_cluster({"nodes": [{"name": "n1", "gpu": "h100", "gpus": 8, "free_gpus": [0, 1, 2]}]})
    jobs = parse_jobs([{"id": "big", "model": "70b", "weight": 1.0, "max_gpus": 8, "global_batch": 64, "pin": {"offload": "none"}}])
    response = solve_pack(jobs, nodes)
    placement = response["placements"][0]
    assert not placement["admitted"]
    assert "3 free on one node" in placement["reason"] or "at most 3 free" in placement["reason"]


def test_min_tokens_per_s_is_respected_or_explained():
    nodes = parse_cluster({"nodes": [{"name": "n1", "gpu": "a100-80gb", "gpus": 8, "free_gpus": [0]}]})
    jobs = parse_jobs([{"id": "fast", "model": "8b", "workload": "infer", "min_tokens_per_s": 1e9}])
    placement = solve_pack(jobs, nodes)["placements"][0]
    assert not placement["admitted"] and "min_tokens_per_s" in placement["reason"]


TEMPLATES = [
    {"model": "8b", "workload": "infer", "context": 4096},
    {"model": "8b", "workload": "train", "global_batch": 64, "seq_len": 2048},
    {"model": "7b", "workload": "lora", "global_batch": 16, "seq_len": 2048},
    {"model": "70b", "workload": "train", "global_batch": 64, "seq_len": 2048},
]


@st.composite
def small_instances(draw):
    nodes = []
    for index in range(draw(st.integers(1, 3))):
        gpu = draw(st.sampled_from(("h100", "a100-80gb", "b200")))
        free = draw(st.lists(st.integers(0, 7), min_size=0, max_size=8, unique=True))
        node = {"name": f"n{index}", "gpu": gpu, "gpus": 8, "free_gpus": sorted(free)}
        if gpu == "h100" and 3 not in free and draw(st.booleans()):
            node["mig"] = {"3": draw(st.sampled_from((["3g.40gb", "3g.40gb"], ["2g.20gb", "2g.20gb", "2g.20gb"], ["1g.10gb"] * 7)))}
        nodes.append(node)
    jobs = []
    for index in range(draw(st.integers(1, 3))):
        template = dict(draw(st.sampled_from(TEMPLATES)))
        template.update(id=f"j{index}", weight=draw(st.sampled_from((0.5, 1.0, 3.0))), max_gpus=draw(st.sampled_from((1, 2, 4, 8, 16))))
        jobs.append(template)
    return nodes, jobs


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(small_instances())
def test_cp_sat_packing_equals_brute_force(instance):
    cluster, job_list = instance
    nodes = parse_cluster({"nodes": cluster})
    jobs = parse_jobs(job_list)
    options, best = job_options(jobs, nodes)
    expected = brute_force(jobs, nodes, options, best)
    response = solve_pack(jobs, nodes, time_limit_s=30.0, workers=1)
    assert response["summary"]["solver"]["status"] == "optimal"
    admitted = {}
    for job_index, placement in enumerate(response["placements"]):
        if placement["admitted"]:
            option_index = next(index for index, option in enumerate(options[job_index]) if option.response["plan"] == placement["plan"])
            admitted[job_index] = (option_index, [])
    values = Values(jobs, options, best)
    value, gpus = objective_of(values, options, admitted)
    assert (value, -gpus) == expected
    check_valid(response, nodes, job_list)
    # The greedy floor is a valid assignment and never beats the optimum.
    floor = greedy(jobs, options, values, nodes)
    assert fits_capacities(nodes, options, [(floor[job][0], tuple(floor[job][1])) if job in floor else None for job in range(len(jobs))])
    assert rank(values, options, floor) <= expected


def test_node_count_ladder_is_dense_then_doubling():
    assert node_count_ladder(1) == []
    assert node_count_ladder(5) == [2, 3, 4, 5]
    assert node_count_ladder(120) == [2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 120]
    assert node_count_ladder(64) == [2, 3, 4, 5, 6, 7, 8, 16, 32, 64]


@pytest.mark.parametrize("text, index", [("0", 0), ("7", 7), ("12", 12), ("+1", None), ("01", None), (" 1", None),
                                         ("\u0661", None), ("1.0", None), ("", None), ("-1", None)])
def test_gpu_index_text_is_plain_ascii_digits(text, index):
    assert gpu_index(text) == index


def test_values_count_in_steps_of_the_smallest_weight():
    nodes = parse_cluster({"nodes": [{"name": "n1", "gpu": "h100", "gpus": 8}]})
    jobs = parse_jobs([{"id": "a", "model": "8b", "workload": "infer", "weight": 2e-7, "max_gpus": 2},
                       {"id": "b", "model": "8b", "workload": "infer", "weight": 1e-7, "max_gpus": 2}])
    options, best = job_options(jobs, nodes)
    values = Values(jobs, options, best)
    assert values.best_of(0) == 2 * values.best_of(1) == 2 * STEPS_PER_SMALLEST_WEIGHT
    assert all(value >= 1 for row in values.table for value in row)
    assert values.report(values.best_of(0) + values.best_of(1)) == pytest.approx(3e-7)




def test_cli_pack_table_json_and_csv(tmp_path):
    (tmp_path / "cluster.json").write_text(json.dumps(CLUSTER))
    (tmp_path / "jobs.json").write_text(json.dumps(JOBS[:3]))
    table = invoke(["pack", "--cluster", str(tmp_path / "cluster.json"), "--jobs", str(tmp_path / "jobs.json")])
    assert table.exit_code == 0, table.stderr
    assert "admitted" in table.stdout and "cp-sat: optimal" in table.stdout
    data = json.loads(invoke(["pack", "--cluster", str(tmp_path / "cluster.json"), "--jobs", str(tmp_path / "jobs.json"), "--format", "json"]).stdout)
    assert [placement["job"] for placement in data["placements"]] == ["chat-8b", "ft-70b", "pt-8b"]
    csv_output = invoke(["pack", "--cluster", str(tmp_path / "cluster.json"), "--jobs", str(tmp_path / "jobs.json"), "--format", "csv"]).stdout
    assert csv_output.splitlines()[0].startswith("job,admitted,reason,gpus_by_node")


def test_cli_pack_accepts_toml(tmp_path):
    (tmp_path / "cluster.toml").write_text('[[nodes]]\nname = "n1"\ngpu = "h100"\ngpus = 8\n')
    (tmp_path / "jobs.toml").write_text('[[jobs]]\nid = "a"\nmodel = "8b"\nworkload = "infer"\n')
    result = invoke(["pack", "--cluster", str(tmp_path / "cluster.toml"), "--jobs", str(tmp_path / "jobs.toml"), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["placements"][0]["admitted"]


@pytest.mark.parametrize(
    "cluster, jobs, fragment",
    [
        (CLUSTER, [{"id": "x", "model": "llama-9z"}], "unknown model"),
        ({"nodes": [{"name": "n", "gpu": "h100", "gpus": 4, "free_gpus": [0, 1, 2, 3, 4, 5]}]}, [{"id": "x", "model": "8b"}], "lists 6 free GPUs"),
        ({"nodes": [{"name": "n", "gpu": "l40s", "gpus": 8, "free_gpus": [0], "mig": {"3": ["1g.10gb"]}}]}, [{"id": "x", "model": "8b"}], "has no MIG profiles"),
        (CLUSTER, [{"id": "x", "model": "8b"}, {"id": "x", "model": "70b"}], "duplicate job id 'x'"),
        ({"nodes": [{"name": "n", "gpu": "h100", "gpus": 8, "free_gpus": [], "mig": {"0": ["4g.40gb", "4g.40gb"]}}]}, [{"id": "x", "model": "8b"}], "do not fit one h100"),
        (CLUSTER, [{"id": "x", "model": "8b", "gpus": 4}], "unknown key 'gpus'"),
        ({"nodes": []}, [{"id": "x", "model": "8b"}], "non-empty list"),
    ],
)
def test_bad_pack_input_is_one_line_and_exit_2(tmp_path, cluster, jobs, fragment):
    (tmp_path / "cluster.json").write_text(json.dumps(cluster))
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    result = invoke(["pack", "--cluster", str(tmp_path / "cluster.json"), "--jobs", str(tmp_path / "jobs.json")])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and fragment in result.stderr, result.stderr


def test_pack_api_equals_the_cli(tmp_path):
    import vramopt

    (tmp_path / "cluster.json").write_text(json.dumps(CLUSTER))
    (tmp_path / "jobs.json").write_text(json.dumps(JOBS[:3]))
    cli_data = json.loads(invoke(["pack", "--cluster", str(tmp_path / "cluster.json"), "--jobs", str(tmp_path / "jobs.json"), "--format", "json"]).stdout)
    api_data = vramopt.pack({"cluster": CLUSTER, "jobs": JOBS[:3]}).to_dict()
    for data in (cli_data, api_data):
        data["summary"]["solver"].pop("wall_time_s")
    assert cli_data == api_data
