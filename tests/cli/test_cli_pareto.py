"""`vramopt pareto`: the CSV front is non-dominated, every row re-evaluates to its own
numbers, the plot is written (when matplotlib is installed), bad input is one line."""

from __future__ import annotations

import csv

import pytest

from tests.cli_runner import invoke
from vramopt import cli
from vramopt.estimate import estimate_serving, estimate_training
from vramopt.optimizer.pareto import exact_front, verify_with_cp_sat
from vramopt.optimizer.problem import build_problem
from vramopt.types import SearchSpace, ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload




def read_front(path):
    with open(path, newline="") as stream:
        return list(csv.DictReader(stream))


def dominates(a, b) -> bool:
    better_or_equal = a[0] >= b[0] and a[1] <= b[1] and a[2] <= b[2]
    return better_or_equal and (a[0] > b[0] or a[1] < b[1] or a[2] < b[2])


TRAINING_FIELDS = ("gpu", "gpus", "tensor_parallel", "pipeline_parallel", "sequence_parallel", "virtual_stages", "zero_stage",
                   "checkpointing", "precision", "grad_comm_precision", "offload", "flash_attention", "micro_batch")


def as_value(text: str):
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        return text


@pytest.mark.parametrize("args", [["--model", "70b", "--max-gpus", "16"], ["--model", "8b", "--max-gpus", "8", "--workload", "infer"]])
def test_csv_front_is_non_dominated_and_reevaluates_to_its_own_numbers(tmp_path, args):
    path = tmp_path / "front.csv"
    result = invoke(["pareto", *args, "--output", str(path)])
    assert result.exit_code == 0, result.stderr
    rows = read_front(path)
    assert len(rows) > 3 and sum(row["chosen"] == "true" for row in rows) == 1
    points = [(float(row["throughput.tokens_per_s"]), int(row["plan.gpus"]), float(row["memory.total_bytes"])) for row in rows]
    for index, point in enumerate(points):
        assert not any(dominates(other, point) for other_index, other in enumerate(points) if other_index != index)
    serving = "infer" in args
    model = args[args.index("--model") + 1]
    for row in rows:
        if serving:
            fields = ("gpu", "gpus", "tensor_parallel", "pipeline_parallel", "quantization", "kv_cache_dtype", "paged_kv", "slots", "mig_profile", "speculative_decoding")
            plan = ServingPlan(**{field: as_value(row[f"plan.{field}"]) for field in fields})
            estimate = estimate_serving(ServingWorkload(model=model, context=int(row["plan.context"])), plan)
        else:
            plan = TrainingPlan(**{field: as_value(row[f"plan.{field}"]) for field in TRAINING_FIELDS})
            estimate = estimate_training(TrainingWorkload(model=model), plan)
        assert estimate.fits
        assert estimate.tokens_per_s == pytest.approx(float(row["throughput.tokens_per_s"]), rel=1e-12)
        assert estimate.total_bytes == pytest.approx(float(row["memory.total_bytes"]), rel=1e-12)


def test_every_front_point_is_certified_by_cp_sat():
    problem = build_problem(TrainingWorkload(model="70b", seq_len=2048, global_batch=64), SearchSpace(max_gpus=8))
    front = exact_front(problem)
    assert front and verify_with_cp_sat(problem, front) == []


def test_the_chosen_plan_is_the_solvers_answer(tmp_path):
    path = tmp_path / "front.csv"
    invoke(["pareto", "--model", "70b", "--max-gpus", "8", "--output", str(path)])
    chosen = [row for row in read_front(path) if row["chosen"] == "true"][0]
    import json

    solved = json.loads(invoke(["solve", "--model", "70b", "--max-gpus", "8", "--format", "json"]).stdout)
    assert {key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in solved["plan"].items()} == {
        key[5:]: value for key, value in chosen.items() if key.startswith("plan.")
    }


def test_plot_is_written_when_matplotlib_is_installed(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "front.png"
    result = invoke(["pareto", "--model", "70b", "--max-gpus", "16", "--plot", str(path)])
    assert result.exit_code == 0, result.stderr
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_is_a_clear_error(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    result = invoke(["pareto", "--model", "8b", "--max-gpus", "2", "--plot", str(tmp_path / "f.png")])
    assert result.exit_code == 2 and "pip install 'vramopt[plot]'" in result.stderr


@pytest.mark.parametrize("args, fragment", [(["--max-gpus", "0"], "--max-gpus"), (["--pin", "zero=1"], "did you mean zero_stage")])
def test_bad_pareto_input_is_one_line(args, fragment):
    result = invoke(["pareto", "--model", "70b", *args])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and fragment in result.stderr
