"""Solve latency: CP-SAT vs the exhaustive engine, in-process and through the CLI.

Run: python benchmarks/solve_latency.py [--repeats 3] [--targets]
With --targets, only issue 18's table: the median in-process solve (tables, pruning, search,
decode, re-verification; no runner-ups) of each engine for 2t, 70b, 405b and 8b at 16 GPUs,
2t and 70b at 64 and 256, and 2t at 16,384, median of --repeats (default 5 there), and the
CP-SAT / exhaustive ratio (issue 18's must-show: at most 1.2); with --least, the least of the
repeats instead of the median (the figure other processes disturb least).
Prints, for 2t and 70b at max-gpus 16, 256, 1,024 and 16,384 (training, default space):
the candidate rows, the size of the full configuration space the exhaustive engine scans,
the wall time of each engine end to end (tables + search + decode + re-verification,
runner-up search excluded and reported apart), and their ratio. Then 70b at 131,072 tokens (context
parallelism in the default domain) against the same space with cp allowed only at 1. Then the end-to-end CLI time of
`vramopt solve --model 2t --max-gpus 16` (process start included). Best of --repeats.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

from vramopt.optimizer.oracle import feasible_mask
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.search import solve, solve_training
from vramopt.types import SearchSpace, ServingWorkload, TrainingWorkload

CASES = [(model, gpus) for model in ("2t", "70b") for gpus in (16, 256, 1024, 16384)]
SERVING_CASES = [(model, gpus) for model in ("70b", "8b") for gpus in (1, 8, 64, 256)]
LONG_CONTEXT_CASES = [("70b", gpus) for gpus in (16, 64, 256, 1024)]


TARGET_CASES = [("2t", 16), ("70b", 16), ("405b", 16), ("8b", 16), ("2t", 64), ("70b", 64), ("2t", 256), ("70b", 256), ("2t", 16384)]
"""Issue 18's latency targets: 16 GPUs <= 50 ms, 64 and 256 <= 150 ms, 16,384 <= 300 ms (2 cores)."""


def median_time(function, repeats: int, statistic=statistics.median) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds of this process, all threads): on a shared
    machine the CPU time is the steadier figure (``statistic=min``: the least of each, the
    figure least disturbed by other processes)."""
    walls, cpus = [], []
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        function()
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - started_cpu)
    return statistic(walls), statistic(cpus)


def targets(repeats: int, best: bool = False) -> None:
    statistic = min if best else statistics.median
    print(f"load average at start: {os.getloadavg()[0]:.2f} (1 min), cores: {os.cpu_count()}; wall / CPU seconds, "
          f"{'least' if best else 'median'} of {repeats}")
    print(f"{'model':>5} {'max_gpus':>8} {'keys':>6} {'tables_s':>13} {'cp_sat_s':>13} {'exhaustive_s':>13} {'cp/ex':>6} same   status")
    for model, gpus in TARGET_CASES:
        workload, space = TrainingWorkload(model=model), SearchSpace(max_gpus=gpus, workers=1, time_limit_s=60.0)
        cp = solve_training(workload, space, runner_up_count=0)  # warm the catalogs and imports
        ex = solve_training(workload, space, engine="exhaustive", runner_up_count=0)
        same = cp.solver.objective_value == ex.solver.objective_value
        tables = median_time(lambda: build_problem(workload, space), repeats, statistic)
        cp_s = median_time(lambda: solve_training(workload, space, runner_up_count=0), repeats, statistic)
        ex_s = median_time(lambda: solve_training(workload, space, engine="exhaustive", runner_up_count=0), repeats, statistic)
        print(f"{model:>5} {gpus:>8} {build_problem(workload, space).key_count:>6} {tables[0]:>6.3f}/{tables[1]:<6.3f} "
              f"{cp_s[0]:>6.3f}/{cp_s[1]:<6.3f} {ex_s[0]:>6.3f}/{ex_s[1]:<6.3f} {cp_s[1] / ex_s[1]:>6.2f} {str(same):<6} {cp.solver.status}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


def best_time(function, repeats: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - started)
    return best, result


def configurations(problem) -> tuple[int, int]:
    """(well-formed configurations, of which fit) in the space the oracle enumerates."""
    state, activation = problem.state, problem.activation
    well_formed = int((state.valid.sum(axis=1) * activation.valid.sum(axis=1)).sum())
    fitting = 0
    for start in range(0, problem.key_count, 256):
        keys = np.arange(start, min(start + 256, problem.key_count))
        fitting += int(feasible_mask(problem, keys).sum())
    return well_formed, fitting


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--targets", action="store_true", help="only issue 18's table of medians")
    parser.add_argument("--least", action="store_true", help="with --targets: the least of the repeats instead of the median")
    arguments = parser.parse_args()
    if arguments.targets:
        targets(arguments.repeats or 5, arguments.least)
        return
    arguments.repeats = arguments.repeats or 3
    print(f"{'model':>5} {'max_gpus':>8} {'keys':>6} {'configs':>12} {'fit':>11} {'build_s':>8} {'cp_sat_s':>9} {'exhaustive_s':>12} {'ratio':>6} {'runners_up_s':>12} status   plan")
    for model, gpus in CASES:
        workload, space = TrainingWorkload(model=model), SearchSpace(max_gpus=gpus, workers=1)
        solve_training(workload, space, runner_up_count=0)  # warm the catalogs and imports
        build_s, problem = best_time(lambda: build_problem(workload, space), arguments.repeats)
        cp_s, cp = best_time(lambda: solve_training(workload, space, runner_up_count=0), arguments.repeats)
        ex_s, ex = best_time(lambda: solve_training(workload, space, engine="exhaustive", runner_up_count=0), arguments.repeats)
        full_s, _ = best_time(lambda: solve_training(workload, space), 1)
        assert cp.solver.objective_value == ex.solver.objective_value, (model, gpus)
        well_formed, fitting = configurations(problem)
        plan = cp.estimate.plan if cp.estimate else None
        summary = f"{plan.gpus}x tp{plan.tensor_parallel} pp{plan.pipeline_parallel} z{plan.zero_stage} {plan.precision} {plan.offload} {plan.checkpointing}" if plan else "-"
        print(
            f"{model:>5} {gpus:>8} {problem.key_count:>6} {well_formed:>12,} {fitting:>11,} {build_s:>8.3f} {cp_s:>9.3f} {ex_s:>12.3f} "
            f"{ex_s / cp_s:>6.2f} {full_s - cp_s:>12.3f} {cp.solver.status:<8} {summary}"
        )
    print()
    print("long context (seq_len 131072, global batch 64): context parallelism searched vs allowed only at cp=1")
    print(f"{'model':>5} {'max_gpus':>8} {'cp':>7} {'keys':>6} {'build_s':>8} {'cp_sat_s':>9} {'exhaustive_s':>12} status   plan")
    for model, gpus in LONG_CONTEXT_CASES:
        workload = TrainingWorkload(model=model, seq_len=131072, global_batch=64)
        for label, allow in (("default", {}), ("cp=1", {"context_parallel": ("1",)})):
            space = SearchSpace(max_gpus=gpus, workers=1, allow=allow)
            solve_training(workload, space, runner_up_count=0)
            build_s, problem = best_time(lambda: build_problem(workload, space), arguments.repeats)
            cp_s, cp = best_time(lambda: solve_training(workload, space, runner_up_count=0), arguments.repeats)
            ex_s, ex = best_time(lambda: solve_training(workload, space, engine="exhaustive", runner_up_count=0), arguments.repeats)
            assert cp.solver.objective_value == ex.solver.objective_value, (model, gpus, label)
            plan = cp.estimate.plan if cp.estimate else None
            summary = (f"{plan.gpus}x tp{plan.tensor_parallel} cp{plan.context_parallel} pp{plan.pipeline_parallel} z{plan.zero_stage} "
                       f"{plan.precision} {plan.offload} {plan.checkpointing} {cp.estimate.values['tokens_per_s']:,.0f} tok/s") if plan else "-"
            print(f"{model:>5} {gpus:>8} {label:>7} {problem.key_count:>6} {build_s:>8.3f} {cp_s:>9.3f} {ex_s:>12.3f} {cp.solver.status:<8} {summary}")
    print()
    print("serving (--workload infer, context 8192, max tokens/s)")
    print(f"{'model':>5} {'max_gpus':>8} {'keys':>6} {'configs':>10} {'build_s':>8} {'cp_sat_s':>9} {'exhaustive_s':>12} {'ratio':>6} status   plan")
    for model, gpus in SERVING_CASES:
        workload, space = ServingWorkload(model=model, context=8192), SearchSpace(max_gpus=gpus, workers=1)
        solve(workload, space, runner_up_count=0)
        build_s, problem = best_time(lambda: build_problem(workload, space), arguments.repeats)
        cp_s, cp = best_time(lambda: solve(workload, space, runner_up_count=0), arguments.repeats)
        ex_s, ex = best_time(lambda: solve(workload, space, engine="exhaustive", runner_up_count=0), arguments.repeats)
        assert cp.solver.objective_value == ex.solver.objective_value, (model, gpus)
        plan = cp.estimate.plan if cp.estimate else None
        summary = f"{plan.gpus}x tp{plan.tensor_parallel} {plan.quantization} kv={plan.kv_cache_dtype} slots={plan.slots} spec={plan.speculative_decoding} {cp.estimate.tokens_per_s:,.0f} tok/s" if plan else "-"
        configs = int(problem.state.valid.sum())
        print(f"{model:>5} {gpus:>8} {problem.key_count:>6} {configs:>10,} {build_s:>8.3f} {cp_s:>9.3f} {ex_s:>12.3f} {ex_s / cp_s:>6.2f} {cp.solver.status:<8} {summary}")
    executable = shutil.which("vramopt")
    if executable:
        command = [executable, "solve", "--model", "2t", "--max-gpus", "16"]
        cli_s, _ = best_time(lambda: subprocess.run(command, check=True, capture_output=True), arguments.repeats)
        import_s, _ = best_time(lambda: subprocess.run([sys.executable, "-c", "import vramopt.cli"], check=True), arguments.repeats)
        print(f"CLI end to end: {' '.join(command[1:])}: {cli_s:.3f} s (of which python start + imports: {import_s:.3f} s)")
    else:
        print("CLI end to end: 'vramopt' is not on PATH (pip install -e .)")


if __name__ == "__main__":
    main()
