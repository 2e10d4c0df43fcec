"""Issue 15 build item 1 (``--framework`` for pack and the API's pack request): each training
job's plans in a pack keep the framework's rules, exactly as ``solve --framework`` does; under
DeepSpeed no placement is pipeline-parallel with ZeRO-2/3 (runtime/pipe/engine.py refuses it),
and CP-SAT equals the exhaustive pack oracle over the framework's options."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli_runner import invoke
from tests.oracles.pack_brute_force import brute_force
from vramopt import api
from vramopt.cluster import parse_cluster, parse_jobs
from vramopt.errors import InputError
from vramopt.estimate import estimate_training
from vramopt.frameworks import first_refusal, plan_columns
from vramopt.optimizer.pack import job_options, solve_pack
from vramopt.optimizer.pack_value import Values, objective_of
from vramopt.types import SearchSpace, TrainingPlan, TrainingWorkload

ONE_NODE = {"nodes": [{"name": "b1", "gpu": "b200", "gpus": 8}]}
TWO_NODES = {"nodes": [{"name": "b1", "gpu": "b200", "gpus": 8}, {"name": "b2", "gpu": "b200", "gpus": 8}]}
# Under generic rules Llama 3.1 70B on two B200 nodes is placed as pp 2 with ZeRO-3.
PRETRAIN_70B = [{"id": "pt-70b", "model": "70b", "max_gpus": 16}]


def placed_plans(response):
    return [placement["plan"] for placement in response["placements"] if placement["admitted"]]


def test_generic_pack_places_the_plan_deepspeed_refuses_and_deepspeed_pack_does_not():
    nodes = parse_cluster(TWO_NODES)
    generic = placed_plans(solve_pack(parse_jobs(PRETRAIN_70B), nodes))
    assert generic and generic[0]["pipeline_parallel"] > 1 and generic[0]["zero_stage"] >= 2
    deepspeed = placed_plans(solve_pack(parse_jobs(PRETRAIN_70B), nodes, framework="deepspeed"))
    assert deepspeed
    for plan in deepspeed:
        assert not (plan["pipeline_parallel"] > 1 and plan["zero_stage"] >= 2), plan
        assert first_refusal("deepspeed", plan_columns(plan)) is None


def test_a_pack_option_is_the_plan_solve_finds_under_the_framework():
    from vramopt.optimizer.search import solve

    nodes = parse_cluster(TWO_NODES)
    options, _ = job_options(parse_jobs(PRETRAIN_70B), nodes, framework="deepspeed")
    by_count = {option.gpus: option for option in options[0]}
    space = SearchSpace(gpus=("b200",), max_gpus=16, pin={"gpus": "16"}, framework="deepspeed", workers=1,
                        whole_nodes=True)
    solved = solve(TrainingWorkload(model="70b"), space)
    assert by_count[16].tokens_per_s == pytest.approx(solved.estimate.tokens_per_s, rel=1e-9)
    # And its memory is DeepSpeed's accounting, not the generic one.
    plan = TrainingPlan(**{key: by_count[16].response["plan"][key] for key in TrainingPlan.__slots__
                           if key in by_count[16].response["plan"]})
    framework_estimate = estimate_training(TrainingWorkload(model="70b"), plan, "deepspeed")
    assert by_count[16].response["memory"] == framework_estimate.to_dict()["memory"]


TEMPLATES = [
    {"model": "8b", "workload": "train", "global_batch": 64, "seq_len": 2048},
    {"model": "70b", "workload": "train", "global_batch": 64, "seq_len": 2048},
    {"model": "8b", "workload": "infer", "context": 4096},
]


@st.composite
def instances(draw):
    nodes = [{"name": f"n{index}", "gpu": draw(st.sampled_from(("h100", "b200"))), "gpus": 8,
              "free_gpus": sorted(draw(st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True)))}
             for index in range(draw(st.integers(1, 2)))]
    jobs = [{**draw(st.sampled_from(TEMPLATES)), "id": f"j{index}", "max_gpus": draw(st.sampled_from((2, 4, 8, 16))),
             "weight": draw(st.sampled_from((0.5, 1.0, 3.0)))}
            for index in range(draw(st.integers(1, 3)))]
    return nodes, jobs, draw(st.sampled_from(("deepspeed", "megatron", "torchtitan")))


@settings(deadline=None, max_examples=12, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_framework_pack_keeps_the_rules_and_equals_brute_force(instance):
    cluster, job_list, framework = instance
    nodes = parse_cluster({"nodes": cluster})
    jobs = parse_jobs(job_list)
    options, best = job_options(jobs, nodes, framework=framework)
    for job, job_options_list in zip(jobs, options):
        for option in job_options_list:
            if job.workload != "infer":
                assert first_refusal(framework, plan_columns(option.response["plan"])) is None, option.response["plan"]
    expected = brute_force(jobs, nodes, options, best)
    response = solve_pack(jobs, nodes, time_limit_s=30.0, workers=1, framework=framework)
    assert response["summary"]["solver"]["status"] == "optimal"
    admitted = {}
    for job_index, placement in enumerate(response["placements"]):
        if placement["admitted"]:
            option_index = next(index for index, option in enumerate(options[job_index])
                                if option.response["plan"] == placement["plan"])
            admitted[job_index] = (option_index, [])
    value, gpus = objective_of(Values(jobs, options, best), options, admitted)
    assert (value, -gpus) == expected


def test_a_pin_the_framework_cannot_run_names_the_job_and_the_rule():
    jobs = parse_jobs([{"id": "pt", "model": "70b", "pin": {"zero_stage": "3", "pipeline_parallel": "2"}}])
    with pytest.raises(InputError, match="job 'pt'.*cannot run under --framework deepspeed.*pipeline parallelism"):
        solve_pack(jobs, parse_cluster(ONE_NODE), framework="deepspeed")


def test_cli_and_api_pack_take_the_framework(tmp_path):
    cluster, jobs = tmp_path / "cluster.json", tmp_path / "jobs.json"
    cluster.write_text(json.dumps(TWO_NODES))
    jobs.write_text(json.dumps(PRETRAIN_70B))
    result = invoke(["pack", "--cluster", str(cluster), "--jobs", str(jobs), "--framework", "deepspeed", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    by_cli = json.loads(result.stdout)
    plan = placed_plans(by_cli)[0]
    assert not (plan["pipeline_parallel"] > 1 and plan["zero_stage"] >= 2)
    by_api = api.pack({"cluster": TWO_NODES, "jobs": PRETRAIN_70B, "framework": "deepspeed"}).data
    assert placed_plans(by_api) == placed_plans(by_cli)
    assert api.PackRequest.from_dict({"cluster": TWO_NODES, "jobs": PRETRAIN_70B, "framework": "deepspeed"}).to_dict()["framework"] == "deepspeed"
    unknown = invoke(["pack", "--cluster", str(cluster), "--jobs", str(jobs), "--framework", "deepsped"])
    assert unknown.exit_code == 2 and "deepspeed" in unknown.stderr
