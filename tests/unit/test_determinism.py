"""The same request gives byte-identical JSON (apart from ``wall_time_s``) across repeated
runs, CP-SAT worker counts (1, 2, 8) and hash seeds (PYTHONHASHSEED 0, 1, 12345, random),
for solve (training and serving, feasible and infeasible), pareto and pack.

Hash seeds need fresh interpreters, so those runs are subprocesses of ``python -m
vramopt.cli``; worker counts and repetitions also run in-process through the API, whose
``to_json()`` must equal the CLI's output byte for byte.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import vramopt

REPOSITORY = Path(__file__).resolve().parents[2]
HASH_SEEDS = ("0", "1", "12345", "random")
WORKER_COUNTS = (1, 2, 8)
TIMING = re.compile(r'"wall_time_s": [0-9.eE+-]+')
GENEROUS_LIMIT_S = "120"
"""Large enough that every request below is solved to optimality (a timed-out answer with
several workers may legitimately differ)."""

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
    {"id": "chat-mig", "model": "8b", "workload": "infer", "weight": 1.0, "context": 4096, "max_gpus": 1},
]

CASES = {
    "solve-train": (["solve", "--model", "70b", "--max-gpus", "16", "--time-limit", GENEROUS_LIMIT_S], 0),
    "solve-infer": (["solve", "--workload", "infer", "--model", "70b", "--max-gpus", "8", "--gpu", "h100", "--gpu", "b200",
                     "--time-limit", GENEROUS_LIMIT_S], 0),
    "solve-infeasible": (["solve", "--model", "2t", "--max-gpus", "16", "--forbid", "offload=cpu,nvme", "--time-limit",
                          GENEROUS_LIMIT_S], 2),
    "pareto": (["pareto", "--model", "8b", "--max-gpus", "16", "--gpu", "h100"], 0),
    "pack": (["pack", "--cluster", "{cluster}", "--jobs", "{jobs}", "--time-limit", GENEROUS_LIMIT_S], 0),
}
API_REQUESTS = {
    "solve-train": (vramopt.solve, {"workload": {"model": "70b"}, "space": {"max_gpus": 16, "time_limit_s": float(GENEROUS_LIMIT_S)}}),
    "solve-infer": (vramopt.solve, {"workload": {"kind": "infer", "model": "70b"},
                                    "space": {"max_gpus": 8, "gpus": ["h100", "b200"], "time_limit_s": float(GENEROUS_LIMIT_S)}}),
    "solve-infeasible": (vramopt.solve, {"workload": {"model": "2t"}, "space": {"max_gpus": 16, "forbid": {"offload": ["cpu", "nvme"]},
                                                                                "time_limit_s": float(GENEROUS_LIMIT_S)}}),
    "pareto": (vramopt.pareto, {"workload": {"model": "8b"}, "space": {"max_gpus": 16, "gpus": ["h100"]}}),
    "pack": (vramopt.pack, {"cluster": CLUSTER, "jobs": JOBS, "time_limit_s": float(GENEROUS_LIMIT_S)}),
}


def without_timing(text: str) -> str:
    return TIMING.sub('"wall_time_s": 0', text)


def cli_run(case: str, hash_seed: str, workers: int, files: dict[str, str]) -> str:
    args, expected_status = CASES[case]
    args = [arg.format(**files) for arg in args] + ["--format", "json"]
    if args[0] in ("solve", "pack"):
        args += ["--workers", str(workers)]
    environment = {**os.environ, "PYTHONHASHSEED": hash_seed}
    completed = subprocess.run([sys.executable, "-m", "vramopt.cli", *args], capture_output=True, text=True,
                               cwd=REPOSITORY, env=environment, timeout=300)
    assert completed.returncode == expected_status, (case, completed.stderr)
    assert "Traceback" not in completed.stderr
    return completed.stdout


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("determinism")
    (directory / "cluster.json").write_text(json.dumps(CLUSTER))
    (directory / "jobs.json").write_text(json.dumps(JOBS))
    return {"cluster": str(directory / "cluster.json"), "jobs": str(directory / "jobs.json")}


@pytest.fixture(scope="module")
def cli_outputs(files) -> dict[str, list[tuple[str, int, str]]]:
    """Every case under every hash seed, each seed with a different worker count."""
    runs = [(case, seed, WORKER_COUNTS[index % len(WORKER_COUNTS)]) for case in CASES for index, seed in enumerate(HASH_SEEDS)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        outputs = list(pool.map(lambda run: cli_run(*run, files), runs))
    collected: dict[str, list[tuple[str, int, str]]] = {case: [] for case in CASES}
    for (case, seed, workers), output in zip(runs, outputs):
        collected[case].append((seed, workers, output))
    return collected


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_bytes_across_hash_seeds_and_worker_counts(case, cli_outputs):
    runs = cli_outputs[case]
    reference_seed, reference_workers, reference = runs[0]
    assert json.loads(reference)["schema"] == "vramopt/v1"
    for seed, workers, output in runs[1:]:
        assert without_timing(output) == without_timing(reference), (
            f"{case}: PYTHONHASHSEED={seed} workers={workers} differs from PYTHONHASHSEED={reference_seed} workers={reference_workers}")


@pytest.mark.parametrize("case", sorted(API_REQUESTS))
def test_api_repeated_runs_and_worker_counts_give_the_cli_bytes(case, cli_outputs):
    call, request = API_REQUESTS[case]
    reference = without_timing(cli_outputs[case][0][2]).rstrip("\n")
    for workers in WORKER_COUNTS + WORKER_COUNTS:  # every count, twice
        if call is vramopt.pareto:
            varied = request  # pareto enumerates its tables; workers only matter for --verify
        elif call is vramopt.pack:
            varied = {**request, "workers": workers}
        else:
            varied = {**request, "space": {**request["space"], "workers": workers}}
        text = without_timing(call(varied).to_json())
        assert text == reference, f"{case}: the API with {workers} workers differs from the CLI"


def test_solve_status_is_optimal_so_that_determinism_is_meaningful(cli_outputs):
    for case in ("solve-train", "solve-infer"):
        assert json.loads(cli_outputs[case][0][2])["solver"]["status"] == "optimal"
    assert json.loads(cli_outputs["pack"][0][2])["summary"]["solver"]["status"] == "optimal"
    infeasible = json.loads(cli_outputs["solve-infeasible"][0][2])
    assert infeasible["solver"]["status"] == "infeasible" and infeasible["explanation"]["relaxations"]
