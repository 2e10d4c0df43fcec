"""Issue 11 items 10 and 14, the pack parts.

Item 10 before: a pack job's fields of the other workload (``context`` on a train job,
``seq_len`` on an infer job, ``lora_rank`` off lora/qlora) and a training job's
``"pin": {"slots": 4}`` were accepted and ignored. Now one error line naming the job, exit
status 2, an InputError from the API.

Item 14 before: a job pinned to a GPU type absent from the cluster was reported as "no plan
of 8b fits the free GPUs"; now the reason names the pinned type and says it is not in the
cluster.
"""

from __future__ import annotations

import json

import pytest

import vramopt
from tests.cli_runner import invoke
from vramopt.errors import InputError, VramoptError

CLUSTER = {"nodes": [{"name": "n1", "gpu": "h100", "gpus": 8}]}


@pytest.mark.parametrize("job, fragment", [
    ({"id": "t", "model": "8b", "context": 4096}, "'context'"),
    ({"id": "t", "model": "8b", "workload": "finetune", "min_slots": 4}, "'min_slots'"),
    ({"id": "t", "model": "8b", "max_latency_ms": 20}, "'max_latency_ms'"),
    ({"id": "s", "model": "8b", "workload": "infer", "seq_len": 4096}, "'seq_len'"),
    ({"id": "s", "model": "8b", "workload": "infer", "global_batch": 64}, "'global_batch'"),
    ({"id": "s", "model": "8b", "workload": "infer", "lora_rank": 8}, "'lora_rank'"),
    ({"id": "t", "model": "8b", "lora_rank": 8}, "'lora_rank'"),
    ({"id": "t", "model": "8b", "pin": {"slots": 4}}, "slots"),
    ({"id": "t", "model": "8b", "workload": "lora", "allow": {"quantization": ["fp8"]}}, "quantization"),
    ({"id": "s", "model": "8b", "workload": "infer", "forbid": {"zero_stage": [3]}}, "zero_stage"),
])
def test_fields_of_the_other_workload_are_refused(tmp_path, job, fragment):
    """issue 11 item 10"""
    (tmp_path / "cluster.json").write_text(json.dumps(CLUSTER))
    (tmp_path / "jobs.json").write_text(json.dumps([job]))
    result = invoke(["pack", "--cluster", str(tmp_path / "cluster.json"), "--jobs", str(tmp_path / "jobs.json")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, (result.stdout, result.stderr)
    assert f"job '{job['id']}'" in result.stderr and fragment in result.stderr, result.stderr
    with pytest.raises(InputError):
        vramopt.pack({"cluster": CLUSTER, "jobs": [job]})


def test_fields_of_the_own_workload_are_kept():
    """issue 11 item 10: the right fields still work."""
    data = vramopt.pack({"cluster": CLUSTER, "jobs": [
        {"id": "a", "model": "8b", "workload": "lora", "lora_rank": 8, "seq_len": 2048, "global_batch": 16, "max_gpus": 2},
        {"id": "b", "model": "8b", "workload": "infer", "context": 4096, "min_slots": 4, "pin": {"slots": 64}, "max_gpus": 1},
    ]}).to_dict()
    assert [placement["admitted"] for placement in data["placements"]] == [True, True]
    assert data["placements"][1]["plan"]["slots"] == 64


@pytest.mark.parametrize("choice", [{"pin": {"gpu": "b200"}}, {"allow": {"gpu": ["b200", "a100-80gb"]}}])
def test_a_gpu_type_absent_from_the_cluster_is_the_reason(choice):
    """issue 11 item 14"""
    try:
        data = vramopt.pack({"cluster": CLUSTER, "jobs": [{"id": "a", "model": "8b", "workload": "infer", **choice}]}).to_dict()
    except VramoptError as error:  # refusing the job outright would name it too
        assert "b200" in str(error) and "cluster" in str(error)
        return
    placement = data["placements"][0]
    assert not placement["admitted"]
    assert "b200" in placement["reason"] and "h100" in placement["reason"], placement["reason"]
    assert "fits the free GPUs" not in placement["reason"]
