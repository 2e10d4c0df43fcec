"""Pareto front latency: the 70B front at 64 and 1,024 GPUs (training), and serving.

Run: python benchmarks/pareto_latency.py [--repeats 3] [--verify]
Prints the number of non-dominated plans, the candidate layouts, and the wall time of
`vramopt.pareto` end to end (tables, exact front, float re-evaluation of every point).
--verify also times the CP-SAT certificate of every point. Target: within 5 s at 1,024.
"""

from __future__ import annotations

import argparse
import time

from vramopt.optimizer.front import pareto_response
from vramopt.types import SearchSpace, ServingWorkload, TrainingWorkload

CASES = [
    ("train 70b", TrainingWorkload(model="70b"), 64),
    ("train 70b", TrainingWorkload(model="70b"), 1024),
    ("train 2t", TrainingWorkload(model="2t"), 1024),
    ("infer 70b", ServingWorkload(model="70b"), 64),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--verify", action="store_true")
    arguments = parser.parse_args()
    print(f"{'case':<10} {'max_gpus':>8} {'layouts':>8} {'points':>7} {'wall_s':>8}" + ("  verify_s" if arguments.verify else ""))
    for label, workload, gpus in CASES:
        space = SearchSpace(max_gpus=gpus, workers=1)
        best, response = float("inf"), None
        for _ in range(arguments.repeats):
            started = time.perf_counter()
            response = pareto_response(workload, space)
            best = min(best, time.perf_counter() - started)
        line = f"{label:<10} {gpus:>8} {response['solver']['candidate_layouts']:>8} {response['solver']['points']:>7} {best:>8.3f}"
        if arguments.verify:
            started = time.perf_counter()
            pareto_response(workload, space, verify=True)
            line += f"  {time.perf_counter() - started:>8.2f}"
        print(line)


if __name__ == "__main__":
    main()
