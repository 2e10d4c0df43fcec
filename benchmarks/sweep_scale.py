#!/usr/bin/env python
"""Cells per second of ``vramopt sweep`` with 1 and 2 local workers and through Ray, on the
issue-17 grid: the 14 catalog models x 3 GPU types (h100, h200, b200) x 6 GPU counts
(1, 2, 4, 8, 16, 64) x 2 workloads (train, infer) = 504 cells, at each workload's default
sequence length (4,096 training tokens, an 8,192-token serving context).

    python benchmarks/sweep_scale.py                 # the 504 cells, three runs
    python benchmarks/sweep_scale.py --models 4      # the first 4 catalog models only (144 cells)
    python benchmarks/sweep_scale.py --no-ray        # local runs only

Each run is the command itself (``vramopt sweep ... --output --parquet``) in a fresh
process, timed from start to exit, so the figure includes the interpreter's start, the
pool's or Ray's start and the writing of both files. Run from a terminal, each run draws
its progress bar. The three CSVs and the three Parquet files are then compared byte for
byte. Ray runs on a local Ray instance the command starts (``--ray local``, all CPUs).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vramopt.models import model_names  # noqa: E402

GPUS = ("h100", "h200", "b200")
GPU_COUNTS = (1, 2, 4, 8, 16, 64)
WORKLOADS = ("train", "infer")


def run(axes: list[str], backend: list[str], folder: Path, name: str) -> tuple[float, bytes, bytes]:
    csv_path, parquet_path = folder / f"{name}.csv", folder / f"{name}.parquet"
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from vramopt.cli import main; main()", "sweep", *axes, *backend,
                    "--output", str(csv_path), "--parquet", str(parquet_path)], env=environment, check=True)
    elapsed_s = time.perf_counter() - started
    return elapsed_s, csv_path.read_bytes(), parquet_path.read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=len(model_names()), help="Use the first N catalog models.")
    parser.add_argument("--no-ray", action="store_true", help="Skip the Ray run.")
    options = parser.parse_args()
    models = model_names()[: options.models]
    axes = [item for model in models for item in ("--model", model)]
    axes += [item for gpu in GPUS for item in ("--gpu", gpu)]
    axes += [item for count in GPU_COUNTS for item in ("--max-gpus", str(count))]
    axes += [item for workload in WORKLOADS for item in ("--workload", workload)]
    cell_count = len(models) * len(GPUS) * len(GPU_COUNTS) * len(WORKLOADS)
    backends = [("1 worker", ["--workers", "1"]), ("2 workers", ["--workers", "2"])]
    if not options.no_ray:
        backends.append(("Ray (local)", ["--ray", "local"]))
    print(f"{cell_count} cells: {len(models)} models x {len(GPUS)} GPU types x {len(GPU_COUNTS)} GPU counts x "
          f"{len(WORKLOADS)} workloads; {os.cpu_count()} CPUs", flush=True)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for label, backend in backends:
            elapsed_s, csv_bytes, parquet_bytes = run(axes, backend, Path(folder), label.split()[0])
            results.append((label, elapsed_s, csv_bytes, parquet_bytes))
            print(f"{label:>12}: {elapsed_s:7.1f} s  {cell_count / elapsed_s:6.1f} cells/s", flush=True)
    reference = results[0]
    for label, _, csv_bytes, parquet_bytes in results[1:]:
        same = csv_bytes == reference[2] and parquet_bytes == reference[3]
        print(f"{label} vs 1 worker: CSV and Parquet {'byte-identical' if same else 'DIFFER'}")
    rows = reference[2].decode().splitlines()[1:]
    feasible = sum(1 for row in rows if ",true," in row)
    print(f"{len(rows)} rows: {feasible} with a plan, {len(rows) - feasible} without (infeasible or invalid)")


if __name__ == "__main__":
    main()
