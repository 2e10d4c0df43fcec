"""Issue 11 item 6: tiny pack weights.

Before: the objective counted weight x normalized throughput in absolute millionths, so a
job of weight 1e-7 was worth 0: alone on an empty node it was not admitted, with the reason
"its smallest plan needs 1 whole h100 on one node; after the admitted jobs ... the most
left on one node is 8", which contradicts the placement. Now the objective counts in steps
of the smallest weight (scaling every weight changes nothing), every positive weight counts,
and weights spanning more than 1e6 to 1 are refused.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import vramopt
from tests.cli_runner import invoke
from vramopt.errors import InputError

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
ONE_NODE = {"nodes": [{"name": "n1", "gpu": "h100", "gpus": 8}]}


def answer(cluster, jobs) -> dict:
    data = vramopt.pack({"cluster": cluster, "jobs": jobs, "time_limit_s": 60, "workers": 1}).to_dict()
    return {placement["job"]: (placement["admitted"], placement["gpus_by_node"], placement["plan"]) for placement in data["placements"]}


@pytest.mark.parametrize("weight", [1e-7, 1e-300, 3e5])
def test_a_lone_job_keeps_its_best_option_whatever_its_weight(weight):
    """issue 11 item 6"""
    jobs = [{"id": "chat", "model": "8b", "workload": "infer", "max_gpus": 2}]
    reference = answer(ONE_NODE, jobs)
    assert reference["chat"][0]
    assert answer(ONE_NODE, [{**jobs[0], "weight": weight}]) == reference


def test_scaling_every_weight_of_a_queue_changes_nothing():
    """issue 11 item 6: the docs worked example with every weight times 1e-7."""
    cluster = json.loads((EXAMPLES / "cluster.json").read_text())
    jobs = json.loads((EXAMPLES / "jobs.json").read_text())
    scaled = [{**job, "weight": job.get("weight", 1) * 1e-7} for job in jobs]
    assert answer(cluster, scaled) == answer(cluster, jobs)


def test_reasons_agree_with_what_is_left():
    """issue 11 item 6: a job left out for want of GPUs was never left out beside enough of them."""
    jobs = [{"id": "big", "model": "8b", "workload": "infer", "weight": 0.1, "max_gpus": 6},
            {"id": "tiny", "model": "8b", "workload": "infer", "weight": 1e-7, "max_gpus": 2}]
    data = vramopt.pack({"cluster": ONE_NODE, "jobs": jobs, "time_limit_s": 60, "workers": 1}).to_dict()
    assert all(placement["admitted"] for placement in data["placements"]), data["placements"]
    for placement in data["placements"]:
        found = re.search(r"needs (\d+) whole \S+ on one node; .* the most left on one node is (\d+)", placement["reason"])
        if found:
            assert int(found.group(2)) < int(found.group(1)), placement["reason"]


def test_weights_spanning_more_than_a_million_to_one_are_refused(tmp_path):
    """issue 11 item 6: one line, exit status 2; an InputError from the API."""
    jobs = [{"id": "a", "model": "8b", "workload": "infer", "weight": 1e-7}, {"id": "b", "model": "8b", "weight": 1.0}]
    (tmp_path / "cluster.json").write_text(json.dumps(ONE_NODE))
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    result = invoke(["pack", "--cluster", str(tmp_path / "cluster.json"), "--jobs", str(tmp_path / "jobs.json")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "job 'a' weight 1e-07" in result.stderr
    with pytest.raises(InputError, match="weights are relative"):
        vramopt.pack({"cluster": ONE_NODE, "jobs": jobs})
