"""Each input the fuzzers found that ended in a traceback, ``internal error``, a hang or a
left-over file -- kept as a fixed example. Every one must now end in exit 0 with output,
or one line ``error: ...`` and exit 2 (fuzz_support.check_cli / check_api)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import vramopt
from fuzz_support import check_api, check_cli, run
from vramopt.api import PackRequest, SolveRequest
from vramopt.types import SearchSpace, TrainingWorkload

LLAMA = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs" / "llama-3.1-8b" / "config.json").read_text())
HUGE = 99999999999999999999


@pytest.mark.parametrize("args, status", [
    # Integers beyond int64 reached numpy (OverflowError).
    (["estimate", "--model", "8b", "--micro-batch", str(HUGE)], 2),
    (["estimate", "--model", "8b", "--gpus", str(HUGE)], 2),
    (["estimate", "--model", "8b", "--workload", "infer", "--slots", str(HUGE)], 2),
    (["solve", "--model", "8b", "--max-gpus", "2", "--pin", f"checkpointing=every:{HUGE}"], 2),
    (["solve", "--model", "8b", "--max-gpus", "2", "--workload", "infer", "--pin", f"slots={HUGE}"], 2),
    (["solve", "--model", "8b", "--max-gpus", "2", "--pin", f"micro_batch={HUGE}"], 2),
    # A tiny throughput target made the step-time bound infinite.
    (["solve", "--model", "8b", "--max-gpus", "2", "--objective", "min-gpus", "--min-tokens-per-s", "1e-300"], 0),
    (["solve", "--model", "8b", "--max-gpus", "2", "--workload", "infer", "--objective", "min-gpus", "--min-tokens-per-s", "1e-300"], 0),
    # The divisors of a huge global batch were found by trying every number below it.
    (["solve", "--model", "8b", "--max-gpus", "2", "--global-batch", "2147483647", "--time-limit", "5"], 0),
    # NUL bytes in paths (ValueError from the OS layer).
    (["solve", "--request", "a\x00b.json"], 2),
    (["pack", "--cluster", "a\x00b.toml", "--jobs", "j.json"], 2),
    (["estimate", "--model", "x\x00.json"], 2),
    # A model name longer than the file system allows (OSError ENAMETOOLONG).
    (["estimate", "--model", "x" * 5000], 2),
])
def test_fixed_command_lines(args, status, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run(args)
    check_cli(result, "regressions", "table", (), str(tmp_path))
    assert result.exit_code == status, result.stderr


@pytest.mark.parametrize("name, text", [
    ("request.json", "[" * 100_000),  # RecursionError in json.loads
    ("config.json", "[" * 100_000),
    ("cluster.json", "[" * 100_000),
    ("cluster.toml", "a = " + "[" * 100_000),  # RecursionError in tomllib
    ("cluster.toml", "a = " + "{b=" * 10_000),
])
def test_deeply_nested_documents(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    (tmp_path / "jobs.json").write_text("[]")
    args = {"request.json": ["solve", "--request", str(path)], "config.json": ["estimate", "--model", str(path)]}.get(
        name, ["pack", "--cluster", str(path), "--jobs", str(tmp_path / "jobs.json")])
    assert check_cli(run(args), "regressions", None, (), str(tmp_path))
    if name == "request.json":
        assert check_cli(run(["solve", "--request", "-"], stdin=text), "regressions", None, (), str(tmp_path))


@pytest.mark.parametrize("change", [
    {"hidden_size": 2**63},  # int64 overflow
    {"num_hidden_layers": 2**30},  # minutes of divisor search and relaxations
    {"vocab_size": 2**31 - 1, "hidden_size": 2**31 - 1},  # memory above 2**63 bytes wrapped to negative MiB
    {"_name_or_path": "\ud800"},  # a lone surrogate that stdout cannot encode
])
def test_absurd_config_json(tmp_path, change):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, **change}))
    for args, output_format in ((["estimate", "--model", str(path), "--seq-len", "512"], "table"),
                                (["solve", "--model", str(path), "--max-gpus", "2", "--seq-len", "512", "--time-limit", "2",
                                  "--format", "json"], "json")):
        started = time.perf_counter()
        check_cli(run(args), "regressions", output_format, (), str(tmp_path))
        assert time.perf_counter() - started < 20


def test_pareto_outputs(tmp_path):
    pytest.importorskip("matplotlib")  # --plot needs the 'plot' extra, which CI does not install
    # A plot named .csv used to reach matplotlib's format guessing (internal error); it is a PNG.
    plot = tmp_path / "front.csv"
    check_cli(run(["pareto", "--model", "8b", "--max-gpus", "1", "--plot", str(plot)]), "regressions", "table", [str(plot)], str(tmp_path))
    assert plot.read_bytes().startswith(b"\x89PNG")
    # The same file for both outputs would silently lose the CSV.
    same = tmp_path / "same.png"
    result = run(["pareto", "--model", "8b", "--max-gpus", "1", "--output", str(same), "--plot", str(same)])
    assert check_cli(result, "regressions", None, [str(same)], str(tmp_path)) and "same file" in result.stderr


@pytest.mark.parametrize("request_dict", [
    {"workload": {"model": "8b"}, "space": {"workers": 10**30, "max_gpus": 1}},  # ortools TypeError
    {"workload": {"model": "8b"}, "space": {"gpus": frozenset({"h100"})}},  # json.dumps in the error message
    {"workload": {"model": "8b"}, "space": {1: 2, "a": 3}},  # sorting mixed-type keys
    {"workload": {"model": "x" * 2000}, "space": {"max_gpus": 1}},
    '{"workload": {"model": "8b"}, "space": {"pin": ' * 400 + "1" + "}}" * 400,
    b'{"workload": {"model": "\xff"}}',  # bytes that are not UTF-8
])
def test_fixed_api_requests(request_dict):
    assert check_api(vramopt.solve, request_dict, "regressions") is None


def test_fixed_api_dataclasses():
    # Dataclasses built with wrong types are read by the same strict reader as dicts.
    for request in (SolveRequest(TrainingWorkload(model=1.5), SearchSpace(max_gpus=1)),  # type: ignore[arg-type]
                    SolveRequest(TrainingWorkload(model="8b", seq_len=None), SearchSpace(max_gpus=1)),  # type: ignore[arg-type]
                    SolveRequest(TrainingWorkload(model="8b"), SearchSpace(max_gpus=1, pin="zero_stage=1")),  # type: ignore[arg-type]
                    PackRequest(cluster={"nodes": []}, jobs=1.5, time_limit_s=1.0)):  # type: ignore[arg-type]
        call = vramopt.pack if isinstance(request, PackRequest) else vramopt.solve
        assert check_api(call, request, "regressions") is None


@pytest.mark.parametrize("node, job", [
    ({"host_ram_bytes": 1e300, "nvme_bytes": 1e308}, {"pin": {"offload": "cpu", "zero_stage": "1"}}),  # int beyond int64 for CP-SAT
    ({}, {"weight": 1e300}),  # infinite objective coefficient
    ({}, {"weight": 1e20}),
    ({}, {"headroom_fraction": 2}),  # silently 'not admitted'; now an error naming the job
])
def test_fixed_pack_requests(node, job):
    request = {"cluster": {"nodes": [{"name": "n", "gpu": "h100", "gpus": 8, **node}]},
               "jobs": [{"id": "a", "model": "8b", "max_gpus": 1, "global_batch": 8, **job}], "time_limit_s": 5}
    data = check_api(vramopt.pack, request, "regressions")
    if "host_ram_bytes" in node:
        assert data is not None and data["placements"][0]["admitted"]
    else:
        assert data is None
