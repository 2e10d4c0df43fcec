"""How long the ``vramopt`` CLI takes from process start to exit, per command.

Each command runs as a fresh subprocess, as a user's shell would start it (the console
script's two lines: ``from vramopt.cli import main; main()``), ``--runs`` times; the best
and the median wall times are printed, with the import of ``vramopt.cli`` alone and a bare
interpreter for reference. Targets (issue 11): ``gpus``, ``models``, ``estimate`` and
``--help`` in about 0.3 s; ``solve --model 2t --max-gpus 16`` end to end in 0.8 s or less
on 2 cores.

    python benchmarks/cli_start.py [--runs 7]
    PYTHONPATH=/path/to/other/checkout python benchmarks/cli_start.py   # another version
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

LAUNCH = "import sys; from vramopt.cli import main; sys.argv[0] = 'vramopt'; main()"

COMMANDS: tuple[tuple[str, list[str]], ...] = (
    ("python (bare interpreter)", [sys.executable, "-c", "pass"]),
    ("import vramopt.cli", [sys.executable, "-c", "import vramopt.cli"]),
    ("vramopt --help", [sys.executable, "-c", LAUNCH, "--help"]),
    ("vramopt gpus", [sys.executable, "-c", LAUNCH, "gpus"]),
    ("vramopt models", [sys.executable, "-c", LAUNCH, "models"]),
    ("vramopt estimate --model 70b --gpus 8 --zero 3", [sys.executable, "-c", LAUNCH, "estimate", "--model", "70b", "--gpus", "8", "--zero", "3"]),
    ("vramopt solve --model 2t --max-gpus 16", [sys.executable, "-c", LAUNCH, "solve", "--model", "2t", "--max-gpus", "16"]),
)


def time_command(command: list[str], runs: int) -> tuple[float, float, int]:
    """Best and median wall seconds over ``runs`` runs, and the last exit status."""
    times = []
    status = 0
    for _ in range(runs):
        started = time.perf_counter()
        completed = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
        status = completed.returncode
    return min(times), statistics.median(times), status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command (default 7)")
    options = parser.parse_args()
    source = os.environ.get("PYTHONPATH") or "installed vramopt"
    print(f"vramopt CLI start-up, {options.runs} runs each, {os.cpu_count()} CPUs, {source}")
    print(f"{'command':52}  {'best s':>7}  {'median s':>8}  exit")
    for name, command in COMMANDS:
        best, median, status = time_command(command, options.runs)
        print(f"{name:52}  {best:7.3f}  {median:8.3f}  {status:4d}")


if __name__ == "__main__":
    main()
