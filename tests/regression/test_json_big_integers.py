"""Issue 11 item 7: integers longer than 4,300 digits (Python's limit for converting them
to text) in a request, a cluster or a jobs file used to end in exit 70 ("internal error"),
and the API raised an untyped ValueError, also for dicts holding such integers. They are
bad input: exit 2 with one line, and a typed VramoptError from the API.
"""

from __future__ import annotations

import json

import pytest

import vramopt
from tests.cli_runner import invoke
from vramopt.errors import InputError, VramoptError

HUGE_DIGITS = "9" * 5000
"""5,000 digits: past CPython's 4,300-digit limit (sys.int_info.default_max_str_digits)."""


def assert_refused(result, fragment: str = "integer") -> None:
    context = (result.exit_code, result.stdout[-500:], result.stderr[-1000:])
    assert result.exit_code == 2, context
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, context
    assert "internal error" not in result.stderr and fragment in result.stderr, context
    assert len(result.stderr) < 400, context  # the integer itself is not echoed back


def test_request_file_with_a_huge_integer_exits_2(tmp_path):
    """issue 11 item 7: solve --request, file and stdin."""
    text = '{"workload": {"model": "8b", "seq_len": ' + HUGE_DIGITS + '}}'
    path = tmp_path / "request.json"
    path.write_text(text)
    assert_refused(invoke(["solve", "--request", str(path)]))
    assert_refused(invoke(["solve", "--request", "-"], stdin=text))


def test_request_with_a_float_overflowing_integer_exits_2(tmp_path):
    """issue 11 item 7: 400 digits is printable but overflows float() in the numeric checks."""
    path = tmp_path / "request.json"
    path.write_text('{"workload": {"model": "8b"}, "space": {"time_limit_s": ' + "1" * 400 + '}}')
    assert_refused(invoke(["solve", "--request", str(path)]))


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_cluster_and_jobs_files_with_a_huge_integer_exit_2(tmp_path, suffix):
    """issue 11 item 7: pack --cluster / --jobs, JSON and TOML."""
    good_cluster = tmp_path / "cluster.json"
    good_cluster.write_text('{"nodes": [{"name": "n1", "gpu": "h100", "gpus": 8}]}')
    good_jobs = tmp_path / "jobs.json"
    good_jobs.write_text('[{"id": "a", "model": "8b", "max_gpus": 2, "global_batch": 64}]')
    bad_cluster = tmp_path / f"bad-cluster{suffix}"
    bad_jobs = tmp_path / f"bad-jobs{suffix}"
    if suffix == ".json":
        bad_cluster.write_text('{"nodes": [{"name": "n1", "gpu": "h100", "gpus": ' + HUGE_DIGITS + '}]}')
        bad_jobs.write_text('[{"id": "a", "model": "8b", "max_gpus": ' + HUGE_DIGITS + '}]')
    else:
        bad_cluster.write_text('[[nodes]]\nname = "n1"\ngpu = "h100"\ngpus = ' + HUGE_DIGITS + "\n")
        bad_jobs.write_text('[[jobs]]\nid = "a"\nmodel = "8b"\nmax_gpus = ' + HUGE_DIGITS + "\n")
    assert_refused(invoke(["pack", "--cluster", str(bad_cluster), "--jobs", str(good_jobs)]))
    assert_refused(invoke(["pack", "--cluster", str(good_cluster), "--jobs", str(bad_jobs)]))


def test_hugging_face_config_with_a_huge_integer_exits_2(tmp_path):
    """issue 11 item 7: estimate --model config.json."""
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": ' + HUGE_DIGITS + '}')
    assert_refused(invoke(["estimate", "--model", str(path)]))


@pytest.mark.parametrize("call", [vramopt.solve, vramopt.pareto, vramopt.estimate])
def test_api_refuses_huge_integers_with_a_typed_error(call):
    """issue 11 item 7: the API, as JSON text, as a dict, and as a request dataclass."""
    if call is vramopt.estimate:
        elsewhere = {"workload": {"model": "8b"}, "plan": {"gpu": "b200", "gpus": 10**5000}}
        rest = ', "plan": {"gpu": "b200", "gpus": 1}'
    else:
        elsewhere = {"workload": {"model": "8b"}, "space": {"max_gpus": -(10**5000)}}
        rest = ""
    text = '{"workload": {"model": "8b", "seq_len": ' + HUGE_DIGITS + "}" + rest + "}"
    in_workload = {**json.loads("{" + rest.lstrip(", ") + "}"), "workload": {"model": "8b", "seq_len": 10**5000}}
    for request in (text, in_workload, elsewhere):
        with pytest.raises(InputError) as caught:
            call(request)
        assert "integer" in str(caught.value) and len(str(caught.value)) < 400, str(caught.value)[:400]
    request_class = {vramopt.solve: vramopt.SolveRequest, vramopt.pareto: vramopt.ParetoRequest}.get(call)
    if request_class is not None:
        with pytest.raises(VramoptError):
            call(request_class(vramopt.TrainingWorkload(model="8b", seq_len=10**5000)))


def test_api_pack_refuses_huge_integers_in_cluster_and_jobs():
    """issue 11 item 7: PackRequest dicts holding such integers."""
    cluster = {"nodes": [{"name": "n1", "gpu": "h100", "gpus": 8}]}
    jobs = [{"id": "a", "model": "8b", "max_gpus": 2, "global_batch": 64}]
    for request in ({"cluster": {"nodes": [{"name": "n1", "gpu": "h100", "gpus": 10**5000}]}, "jobs": jobs},
                    {"cluster": cluster, "jobs": [{**jobs[0], "weight": 10**5000}]},
                    json.dumps({"cluster": cluster, "jobs": jobs})[:-1] + ', "workers": ' + HUGE_DIGITS + "}"):
        with pytest.raises(InputError) as caught:
            vramopt.pack(request)
        assert "integer" in str(caught.value)


def test_library_entry_points_refuse_huge_integers_in_dataclasses():
    """issue 11 item 7: the dataclass entry points (estimate_training, estimate_serving,
    the solver's search) raise the typed error, not the ValueError of printing the value."""
    from vramopt.optimizer.search import solve

    cases = [
        lambda: vramopt.estimate_training(vramopt.TrainingWorkload(model="8b", seq_len=10**5000), vramopt.TrainingPlan(gpu="b200", gpus=1)),
        lambda: vramopt.estimate_training(vramopt.TrainingWorkload(model="8b"), vramopt.TrainingPlan(gpu="b200", gpus=10**5000)),
        lambda: vramopt.estimate_serving(vramopt.ServingWorkload(model="8b", context=10**5000), vramopt.ServingPlan(gpu="h100", gpus=1)),
        lambda: vramopt.estimate_serving(vramopt.ServingWorkload(model="8b", max_latency_ms=10**400), vramopt.ServingPlan(gpu="h100", gpus=1)),
        lambda: solve(vramopt.TrainingWorkload(model="8b", global_batch=10**5000), vramopt.SearchSpace(max_gpus=2)),
        lambda: solve(vramopt.TrainingWorkload(model="8b"), vramopt.SearchSpace(max_gpus=2, pin={"tensor_parallel": 10**5000})),
    ]
    for case in cases:
        with pytest.raises(InputError) as caught:
            case()
        assert "integer" in str(caught.value) and len(str(caught.value)) < 400
