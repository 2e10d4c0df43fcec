"""Issue 11 item 2: the serving Pareto front is complete, and --verify proves it per GPU count.

The serving table kept only each replica layout's largest GPU count (exact for max tokens/s,
wrong for a front): ``pareto --workload infer --model 8b --gpu h100 --max-gpus 2`` returned
only 2-GPU points although one GPU serves 14,718 tokens/s; for 70b at ``--max-gpus 16`` the 2-
and 4-GPU plans were missing, dominated pp=5 plans appeared, and the table labelled them
"tp1". ``--verify`` passed anyway, since it only re-read the front's own table; it now also
solves the request pinned to each GPU count, on its own tables.
"""

from __future__ import annotations

import pytest

from tests.cli_runner import invoke
from vramopt.optimizer.front import pareto_response
from vramopt.optimizer.pareto import exact_front
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.search import solve
from vramopt.optimizer.serving_problem import build_serving_problem
from vramopt.types import SearchSpace, ServingWorkload, TrainingWorkload


def fastest_with(workload, space: SearchSpace, gpus: int):
    """The solver's best plan using exactly ``gpus`` GPUs (an independent, pinned solve)."""
    pinned = SearchSpace(**{**{name: getattr(space, name) for name in space.__dataclass_fields__}, "pin": {"gpus": str(gpus)}})
    return solve(workload, pinned, runner_up_count=0).estimate


def by_count(response) -> dict[int, list[dict]]:
    points: dict[int, list[dict]] = {}
    for point in response["front"]:
        points.setdefault(point["plan"]["gpus"], []).append(point)
    return points


def test_the_8b_front_on_two_h100s_keeps_the_one_gpu_plans():
    """issue 11 item 2: only 2-GPU points came back; solve --max-gpus 1 gives 14,718 tokens/s."""
    workload, space = ServingWorkload(model="8b"), SearchSpace(gpus=("h100",), max_gpus=2)
    points = by_count(pareto_response(workload, space))
    assert sorted(points) == [1, 2]
    one_gpu = solve(workload, SearchSpace(gpus=("h100",), max_gpus=1)).estimate
    assert max(point["throughput"]["tokens_per_s"] for point in points[1]) == pytest.approx(one_gpu.tokens_per_s, rel=1e-9)


def test_the_70b_front_on_sixteen_h100s_has_every_count_and_no_dominated_point():
    """issue 11 item 2: the 2- and 4-GPU plans were missing and dominated pp=5 plans appeared."""
    workload, space = ServingWorkload(model="70b"), SearchSpace(gpus=("h100",), max_gpus=16)
    points = by_count(pareto_response(workload, space))
    assert {2, 4, 8, 16} <= set(points)
    best = {}
    for gpus in range(1, 17):
        estimate = fastest_with(workload, space, gpus) if gpus <= 8 or gpus == 16 else None
        if estimate is not None:
            best[gpus] = estimate
    # The fastest plan of every count is on the front, or matched by one with fewer GPUs.
    for gpus, estimate in best.items():
        assert any(fewer <= gpus and point["throughput"]["tokens_per_s"] >= estimate.tokens_per_s * (1 - 1e-6)
                   and point["memory"]["total_bytes"] <= estimate.total_bytes + 2 * 2**20
                   for fewer, column in points.items() for point in column), gpus
    for gpus in (2, 4, 8, 16):
        top = max(point["throughput"]["tokens_per_s"] for point in points[gpus])
        assert top == pytest.approx(best[gpus].tokens_per_s, rel=1e-6)
    # No front point is beaten by the fastest plan of a count no larger than its own.
    for gpus, column in points.items():
        for point in column:
            for fewer, estimate in best.items():
                beaten = (fewer <= gpus and estimate.tokens_per_s > point["throughput"]["tokens_per_s"] * (1 + 1e-6)
                          and estimate.total_bytes <= point["memory"]["total_bytes"])
                assert not beaten, (point["plan"], fewer)
    # 9,723 tokens/s on 4 GPUs beat the old front's pp=5 plan (3,095 tokens/s on 5 GPUs, 68.9 GB).
    assert best[4].tokens_per_s > 3 * best[5].tokens_per_s


def test_verify_per_gpu_count_catches_a_front_of_the_largest_count_table():
    """issue 11 item 2: the check --verify now runs fails on the front the old table gave."""
    from vramopt.optimizer.pareto import verify_gpu_counts

    workload, space = ServingWorkload(model="8b"), SearchSpace(gpus=("h100",), max_gpus=2)
    pruned = build_serving_problem(workload, space)  # largest GPU count per layout: the old front's table
    missed = verify_gpu_counts(pruned, exact_front(pruned))
    assert len(missed) == 1 and missed[0].startswith("1 GPUs:")
    full = build_serving_problem(workload, space, prune_counts=False)
    assert verify_gpu_counts(full, exact_front(full)) == []


def test_the_training_front_passes_the_per_count_check():
    """issue 11 item 2: the training front has no count pruning; the per-count check confirms it."""
    from vramopt.optimizer.pareto import verify_gpu_counts

    problem = build_problem(TrainingWorkload(model="8b", seq_len=2048, global_batch=16), SearchSpace(gpus=("h100",), max_gpus=16))
    front = exact_front(problem)
    assert {point.gpus for point in front} >= {1, 2, 4, 8, 16}
    assert verify_gpu_counts(problem, front) == []


def test_cli_verify_runs_the_per_count_solves_and_the_table_names_pipeline_stages():
    """issue 11 item 2: --verify says what it proved; a pp=5 row reads 'tp1 pp5', not 'tp1'."""
    verified = invoke(["pareto", "--workload", "infer", "--model", "8b", "--gpu", "h100", "--max-gpus", "2", "--verify"])
    assert verified.exit_code == 0, verified.stderr
    assert "for each of the 2 GPU counts a solve pinned to that count finds no plan the front misses" in verified.stdout
    table = invoke(["pareto", "--workload", "infer", "--model", "70b", "--gpu", "h100", "--max-gpus", "16"])
    assert table.exit_code == 0, table.stderr
    five = [line for line in table.stdout.splitlines() if line.split()[:1] == ["5"]]
    assert five and all(" tp1 pp5 " in line for line in five)
