"""Issue 11 item 12 (JSON part): a key given twice in a JSON object used to be read with
the last value winning, silently. Every JSON vramopt reads refuses it: request files and
stdin, the API's JSON text, cluster/jobs/running files and Hugging Face config.json. TOML
already refused a key given twice (tomllib); that stays checked here too.
"""

from __future__ import annotations

import json

import pytest

import vramopt
from tests.cli_runner import invoke
from vramopt.errors import CatalogError, InputError

DUPLICATED_REQUEST = '{"workload": {"model": "8b", "seq_len": 2048, "seq_len": 4096}, "space": {"max_gpus": 2}}'
CLUSTER = '{"nodes": [{"name": "n1", "gpu": "h100", "gpus": 8}]}'
JOBS = '[{"id": "a", "model": "8b", "max_gpus": 2, "global_batch": 64}]'


def assert_refused(result, fragment: str = "given twice") -> None:
    context = (result.exit_code, result.stdout[-300:], result.stderr[-1000:])
    assert result.exit_code == 2, context
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, context
    assert fragment in result.stderr, context


def test_request_file_and_stdin_refuse_a_duplicate_key(tmp_path):
    """issue 11 item 12: solve --request (file and '-')."""
    path = tmp_path / "request.json"
    path.write_text(DUPLICATED_REQUEST)
    assert_refused(invoke(["solve", "--request", str(path)]), '"seq_len" is given twice')
    assert_refused(invoke(["solve", "--request", "-"], stdin=DUPLICATED_REQUEST))
    top_level = '{"workload": {"model": "8b"}, "workload": {"model": "70b"}}'
    assert_refused(invoke(["solve", "--request", "-"], stdin=top_level), '"workload" is given twice')


@pytest.mark.parametrize("call", [vramopt.solve, vramopt.pareto])
def test_api_json_text_refuses_a_duplicate_key(call):
    """issue 11 item 12: the API's JSON strings, and Response.from_json."""
    with pytest.raises(InputError, match="given twice"):
        call(DUPLICATED_REQUEST)
    with pytest.raises(InputError, match="given twice"):
        vramopt.Response.from_json('{"schema": "vramopt/v1", "plan": null, "plan": {}}')


def test_pack_files_refuse_a_duplicate_key(tmp_path):
    """issue 11 item 12: --cluster, --jobs and --running JSON files."""
    good_cluster, good_jobs = tmp_path / "cluster.json", tmp_path / "jobs.json"
    good_cluster.write_text(CLUSTER)
    good_jobs.write_text(JOBS)
    bad_cluster = tmp_path / "bad-cluster.json"
    bad_cluster.write_text('{"nodes": [{"name": "n1", "gpu": "h100", "gpus": 8, "gpus": 4}]}')
    bad_jobs = tmp_path / "bad-jobs.json"
    bad_jobs.write_text('[{"id": "a", "model": "8b", "model": "70b", "max_gpus": 2}]')
    bad_running = tmp_path / "running.json"
    bad_running.write_text('[{"job": "old", "gpus_by_node": {"n1": [0], "n1": [1]}}]')
    assert_refused(invoke(["pack", "--cluster", str(bad_cluster), "--jobs", str(good_jobs)]), '"gpus" is given twice')
    assert_refused(invoke(["pack", "--cluster", str(good_cluster), "--jobs", str(bad_jobs)]), '"model" is given twice')
    assert_refused(invoke(["pack", "--cluster", str(good_cluster), "--jobs", str(good_jobs), "--running", str(bad_running)]),
                   '"n1" is given twice')


def test_pack_toml_files_refuse_a_duplicate_key(tmp_path):
    """TOML: tomllib refuses a key given twice; the pack files say so in one line."""
    jobs = tmp_path / "jobs.toml"
    jobs.write_text('[[jobs]]\nid = "a"\nmodel = "8b"\nmodel = "70b"\n')
    cluster = tmp_path / "cluster.json"
    cluster.write_text(CLUSTER)
    assert_refused(invoke(["pack", "--cluster", str(cluster), "--jobs", str(jobs)]), "not valid TOML")


def test_hugging_face_config_refuses_a_duplicate_key(tmp_path):
    """issue 11 item 12: config.json given to --model (and to load_model)."""
    from vramopt.models.huggingface import load_config_json

    config = json.loads((__import__("pathlib").Path(__file__).parents[1] / "fixtures" / "hf_configs" / "llama-3.1-8b" / "config.json").read_text())
    text = json.dumps(config)[:-1] + ', "hidden_size": 1024}'
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(CatalogError, match='"hidden_size" is given twice'):
        load_config_json(path)
    assert_refused(invoke(["estimate", "--model", str(path)]), '"hidden_size" is given twice')
