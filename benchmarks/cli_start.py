"""How long the ``vramopt`` CLI takes from process start to exit, per command.

Each command runs as a fresh subprocess, as a user's shell would start it (the console
script's two lines: ``from vramopt.cli import main; main()``), ``--runs`` times; the best
and the median wall times are printed, with the import of ``vramopt.cli`` alone and a bare
interpreter for reference. Targets (issue 11): ``gpus``, ``models``, ``estimate`` and
``--help`` in about 0.3 s; ``solve --model 2t --max-gpus 16`` end to end in 0.8 s or less
on 2 cores.

    python benchmarks/cli_start.py [--runs 7]
    python benchmarks/cli_start.py --version before=/path/to/old/checkout --version after=.
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


def run_once(command: list[str], pythonpath: str | None) -> tuple[float, int]:
    environment = dict(os.environ)
    if pythonpath is not None:
        environment["PYTHONPATH"] = pythonpath
    started = time.perf_counter()
    completed = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment)
    return time.perf_counter() - started, completed.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command and version (default 7)")
    parser.add_argument("--version", dest="versions", action="append", default=[], metavar="LABEL=PATH",
                        help="also time the checkout at PATH (put first on PYTHONPATH); repeat to compare several. "
                             "The runs of all versions alternate, so that they share the machine's load.")
    options = parser.parse_args()
    versions: list[tuple[str, str | None]] = [("installed", os.environ.get("PYTHONPATH"))] if not options.versions else []
    for item in options.versions:
        label, _, path = item.partition("=")
        versions.append((label, path or None))
    print(f"vramopt CLI start-up: wall seconds, best and median of {options.runs} runs, {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.2f} at the start")
    header = "".join(f"  {label + ' best':>14}  {label + ' median':>16}" for label, _ in versions)
    print(f"{'command':48}{header}")
    for name, command in COMMANDS:
        times: dict[str, list[float]] = {label: [] for label, _ in versions}
        statuses: dict[str, int] = {}
        for _ in range(options.runs):
            for label, path in versions:
                elapsed, statuses[label] = run_once(command, path)
                times[label].append(elapsed)
        cells = "".join(f"  {min(times[label]):14.3f}  {statistics.median(times[label]):16.3f}" for label, _ in versions)
        failed = [label for label, status in statuses.items() if status != 0]
        print(f"{name:48}{cells}" + (f"  (exit status not 0: {', '.join(failed)})" if failed else ""))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
