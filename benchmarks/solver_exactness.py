"""The larger exactness run: the property tests with the 'long' hypothesis profile.

Run: python benchmarks/solver_exactness.py [--examples 2000]
Runs tests/property/test_solver_properties.py::test_cp_sat_optimum_equals_exhaustive_optimum
and the headroom property with HYPOTHESIS_PROFILE=long (2,000 examples each unless
--examples is given) and prints pytest's summary and hypothesis' statistics (how many
examples were feasible, infeasible, per workload kind).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000)
    arguments = parser.parse_args()
    environment = dict(os.environ, HYPOTHESIS_PROFILE="long", VRAMOPT_LONG_EXAMPLES=str(arguments.examples))
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics",
        "tests/property/test_solver_properties.py::test_cp_sat_optimum_equals_exhaustive_optimum",
        "tests/property/test_solver_properties.py::test_every_returned_plan_keeps_headroom_in_floating_point",
    ]
    completed = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True)
    for line in completed.stdout.splitlines():
        if any(marker in line for marker in ("passing examples", "%", "passed", "failed", "Falsifying")):
            print(line)
    sys.exit(completed.returncode)


if __name__ == "__main__":
    main()
