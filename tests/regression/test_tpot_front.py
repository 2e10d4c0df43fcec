"""The serving front of output tokens/s per GPU against the time per output token (issue 16
objective 5: "the Pareto front of throughput per GPU vs TPOT, the plot users know"), on
``pareto --axes tpot`` with CSV and PNG, and exact: checked against a brute-force
non-dominated set of every candidate the serving table holds."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from tests.cli_runner import invoke
from vramopt.optimizer.serving_problem import build_serving_problem
from vramopt.optimizer.tpot_front import candidates, exact_tpot_front, tpot_front_response, verify_tpot_front
from vramopt.types import SearchSpace, ServingWorkload

CASES = [
    (ServingWorkload(model="llama-3.1-8b", context=4096, input_tokens=1000, output_tokens=200), SearchSpace(gpus=("h100",), max_gpus=4)),
    (ServingWorkload(model="llama-3.1-70b", context=4096, input_tokens=1000, output_tokens=1000, rate_per_s=4.0, ttft_p99_ms=3000),
     SearchSpace(gpus=("h100", "a100-80gb"), max_gpus=8)),
    (ServingWorkload(model="mixtral-8x7b", context=4096, input_tokens=1000, output_tokens=300, concurrency=64), SearchSpace(gpus=("h100",), max_gpus=8)),
]


def _brute_force(x: np.ndarray, y: np.ndarray) -> set[tuple[float, float]]:
    """The non-dominated (x down, y up) values, by comparing every pair."""
    kept = set()
    for index in range(x.size):
        dominated = np.any((x <= x[index]) & (y >= y[index]) & ((x < x[index]) | (y > y[index])))
        if not dominated:
            kept.add((float(x[index]), float(y[index])))
    return kept


@pytest.mark.parametrize("workload,space", CASES)
def test_the_tpot_front_is_the_brute_force_non_dominated_set(workload, space):
    """issue 16 objective 5: the front's (TPOT, tokens/s per GPU) values are exactly the
    non-dominated values of every feasible candidate, one point per value."""
    problem = build_serving_problem(workload, space, prune_counts=False)
    found = candidates(problem, workload)
    assert found.keys.size > 10
    front = exact_tpot_front(found)
    values = [(float(found.tpot_s[position]), float(found.tokens_per_s_per_gpu[position])) for position in front]
    assert len(set(values)) == len(values)
    assert set(values) == _brute_force(found.tpot_s, found.tokens_per_s_per_gpu)
    assert verify_tpot_front(found, front) == []
    # The check is no rubber stamp: a front missing a point, or holding a dominated one, fails.
    assert verify_tpot_front(found, front[1:]) != []
    x, y = found.tpot_s, found.tokens_per_s_per_gpu
    fx, fy = x[front][:, None], y[front][:, None]
    strictly = np.flatnonzero(((fx <= x) & (fy >= y) & ((fx < x) | (fy > y))).any(axis=0))
    assert strictly.size
    assert verify_tpot_front(found, np.append(front, strictly[0])) != []
    tie = np.flatnonzero((x == x[front[0]]) & (y == y[front[0]]) & (np.arange(x.size) != front[0]))
    if tie.size:
        assert verify_tpot_front(found, np.append(front, tie[0])) != []


def test_the_front_points_are_the_estimates_of_their_plans():
    """issue 16 objective 5: each point's axes are its plan's own estimate (TPOT at the load,
    output tokens/s at the load over the GPUs), and the chosen point is the most tokens/s per
    GPU within the TPOT target."""
    from vramopt.estimate import estimate_serving
    from vramopt.types import ServingPlan

    workload = ServingWorkload(model="llama-3.1-70b", context=4096, input_tokens=1000, output_tokens=1000, rate_per_s=4.0, tpot_ms=40.0)
    response = tpot_front_response(workload, SearchSpace(gpus=("h100",), max_gpus=8), verify=True)
    front = response["front"]
    assert [point["tpot_ms"] for point in front] == sorted(point["tpot_ms"] for point in front)
    per_gpu = [point["output_tokens_per_s_per_gpu"] for point in front]
    assert per_gpu == sorted(per_gpu)  # along a front, less TPOT costs tokens/s per GPU
    for point in front:
        fields = {name: point["plan"][name] for name in ServingPlan.__slots__}
        values = estimate_serving(workload, ServingPlan(**fields)).values
        assert point["tpot_ms"] == pytest.approx(values["tpot_s"] * 1e3, rel=1e-9)
        assert point["output_tokens_per_s_per_gpu"] == pytest.approx(4.0 * 1000 / fields["gpus"], rel=1e-9)
    chosen = [point for point in front if point["chosen"]]
    assert len(chosen) == 1 and chosen[0]["tpot_ms"] <= 40.0
    assert chosen[0]["output_tokens_per_s_per_gpu"] == max(point["output_tokens_per_s_per_gpu"] for point in front if point["tpot_ms"] <= 40.0)


def test_pareto_axes_tpot_writes_csv_png_and_json(tmp_path):
    """issue 16 objective 5: the `pareto` command draws it (CSV and PNG) and --verify runs the
    pairwise check."""
    pytest.importorskip("matplotlib")
    csv_path, png_path = tmp_path / "front.csv", tmp_path / "front.png"
    args = ["pareto", "--workload", "infer", "--model", "8b", "--gpu", "h100", "--max-gpus", "2", "--axes", "tpot",
            "--input-tokens", "500", "--output-tokens", "200", "--verify"]
    result = invoke(args + ["--output", str(csv_path), "--plot", str(png_path)])
    assert result.exit_code == 0, result.output
    assert "non-dominated serving plans" in result.stdout and "checked pairwise" in result.stdout
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    assert rows and {"tpot_ms", "output_tokens_per_s_per_gpu", "plan.gpus", "plan.slots"} <= set(rows[0])
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(invoke(args + ["--format", "json"]).stdout)
    assert data["objectives"][0].startswith("time per output token") and len(data["front"]) == len(rows)


def test_the_tpot_front_of_a_training_workload_is_one_line():
    """issue 16 (bad input): one line, exit 2."""
    result = invoke(["pareto", "--model", "8b", "--gpu", "h100", "--max-gpus", "2", "--axes", "tpot"])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "--workload infer" in result.stderr, result.stderr
