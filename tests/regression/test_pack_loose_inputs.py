"""Issue 11 item 18: loose cluster and running files.

Before: MIG keys "+1" and non-ASCII digits ("\u0661", Arabic-Indic one) were read as GPU 1;
a running entry without "job" was accepted; a running job id that was also queued was
placed again; docs/pack.md said the key `network` is accepted and unused while the code
refused it unless it was empty. Each is now one error line and exit status 2 (an
InputError from the API), and the docs say what the code does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vramopt
from tests.cli_runner import invoke
from vramopt.errors import InputError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "pack.md"
NODE = {"name": "n1", "gpu": "h100", "gpus": 8, "free_gpus": [0, 2, 3]}
JOBS = [{"id": "chat", "model": "8b", "workload": "infer", "max_gpus": 1}]


def pack_cli(tmp_path, cluster, jobs=JOBS, running=None):
    (tmp_path / "cluster.json").write_text(json.dumps(cluster))
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    args = ["pack", "--cluster", str(tmp_path / "cluster.json"), "--jobs", str(tmp_path / "jobs.json")]
    if running is not None:
        (tmp_path / "running.json").write_text(json.dumps(running))
        args += ["--running", str(tmp_path / "running.json")]
    return invoke(args)


@pytest.mark.parametrize("key", ["+1", "\u0661", " 1", "01", "1.0"])
def test_a_mig_key_that_is_not_plain_digits_is_refused(tmp_path, key):
    """issue 11 item 18"""
    cluster = {"nodes": [{**NODE, "mig": {key: ["3g.40gb", "3g.40gb"]}}]}
    result = pack_cli(tmp_path, cluster)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, (result.stdout, result.stderr)
    assert "is not a GPU index" in result.stderr
    with pytest.raises(InputError):
        vramopt.pack({"cluster": cluster, "jobs": JOBS})


def test_plain_mig_keys_still_work(tmp_path):
    """issue 11 item 18: the canonical form is unchanged."""
    result = pack_cli(tmp_path, {"nodes": [{**NODE, "mig": {"1": ["3g.40gb", "3g.40gb"]}}]})
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("running, fragment", [
    ([{"gpus_by_node": {"n1": [0]}}], "'job'"),
    ([{"job": "", "gpus_by_node": {"n1": [0]}}], "job must be a non-empty string"),
    ([{"job": 7, "gpus_by_node": {"n1": [0]}}], "job must be a non-empty string"),
    ([{"job": "chat", "gpus_by_node": {"n1": [0]}}], "both running"),
    ([{"job": "old", "gpus_by_node": {"n1": [0]}}, {"job": "old", "gpus_by_node": {"n1": [2]}}], "appears twice"),
    ([{"job": "old", "gpus_by_node": {"n1": ["\u0660"]}}], "neither a GPU index"),
    ([{"job": "old", "gpus_by_node": {"n1": ["+0"]}}], "neither a GPU index"),
])
def test_loose_running_entries_are_refused(tmp_path, running, fragment):
    """issue 11 item 18"""
    result = pack_cli(tmp_path, {"nodes": [NODE]}, running=running)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, (result.stdout, result.stderr)
    assert fragment in result.stderr, result.stderr
    with pytest.raises(InputError):
        vramopt.pack({"cluster": {"nodes": [NODE]}, "jobs": JOBS, "running": running})


@pytest.mark.parametrize("network", [{}, None, {"gbps": 400}])
def test_network_is_refused_whatever_its_value_and_the_docs_say_so(tmp_path, network):
    """issue 11 item 18"""
    result = pack_cli(tmp_path, {"nodes": [NODE], "network": network})
    assert result.exit_code == 2 and "'network' is not used" in result.stderr, result.stderr
    text = DOCS.read_text()
    assert "is accepted at the top level but not used" not in text
    assert "`network`" in text and "refused" in text
