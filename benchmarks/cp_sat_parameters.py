"""CP-SAT parameters on the training model: the primary (fastest-step) solve alone, with the
solver's default probing and with probing off (what optimizer/solve.py sets).

Run: python benchmarks/cp_sat_parameters.py [--repeats 3]
Prints, for 2t and 70b at 16, 256, 1,024 and 16,384 GPUs (default space, one worker): the
literals of the model, the best-of-repeats wall time of the primary solve under each
setting, and that both settings reach the same optimum.
"""

from __future__ import annotations

import argparse
import time

from ortools.sat.python import cp_model

from vramopt.optimizer.cp_objective import stage_expressions
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.prune import reduce
from vramopt.optimizer.solve import build_model
from vramopt.types import SearchSpace, TrainingWorkload

SETTINGS = {"default probing": {}, "probing off": {"cp_model_probing_level": 0}}


def primary_solve_s(problem, reduced, parameters: dict, repeats: int) -> tuple[float, float, int]:
    best, objective, literals = float("inf"), 0.0, 0
    for _ in range(repeats):
        model = build_model(problem, reduced)
        model.cp.minimize(stage_expressions(model)[0])
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        for name, value in parameters.items():
            setattr(solver.parameters, name, value)
        started = time.perf_counter()
        solver.solve(model.cp)
        best = min(best, time.perf_counter() - started)
        objective, literals = solver.objective_value, model.count()
    return best, objective, literals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    print(f"{'model':>5} {'max_gpus':>8} {'literals':>8} " + " ".join(f"{name + ' ms':>20}" for name in SETTINGS) + "  same optimum")
    for model_name in ("2t", "70b"):
        for gpus in (16, 256, 1024, 16384):
            problem = build_problem(TrainingWorkload(model=model_name), SearchSpace(max_gpus=gpus, workers=1))
            reduced = reduce(problem)
            results = [primary_solve_s(problem, reduced, parameters, arguments.repeats) for parameters in SETTINGS.values()]
            same = len({objective for _, objective, _ in results}) == 1
            print(f"{model_name:>5} {gpus:>8} {results[0][2]:>8} " + " ".join(f"{seconds * 1000:>20.1f}" for seconds, _, _ in results)
                  + f"  {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
