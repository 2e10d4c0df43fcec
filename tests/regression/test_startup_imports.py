"""Issue 11, start-up: OR-Tools (and pandas under it) used to be imported by every command,
0.63 s of the CLI's start, even for ``gpus`` and ``--help``. The solver is imported only by
the commands that solve. This checks the work (which modules are loaded, in a fresh
interpreter), not the time; benchmarks/cli_start.py prints the timings.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("ortools", "pandas", "matplotlib")
HANG_GUARD_S = 300

PROBE = """
import contextlib, io, json, sys
args = json.loads(sys.argv[1])
if args is None:
    import vramopt
else:
    from vramopt.cli import main
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(args, prog_name="vramopt")
        except SystemExit as exit:
            assert exit.code in (0, None), exit.code
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(json.loads(sys.argv[2])))
print(json.dumps(heavy))
"""


def loaded_heavy_modules(args: list[str] | None) -> list[str]:
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args), json.dumps(HEAVY)], capture_output=True,
                            text=True, timeout=HANG_GUARD_S)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "args",
    [None, ["--help"], ["--version"], ["gpus"], ["models"], ["gpus", "--format", "json"], ["estimate", "--model", "8b"],
     ["estimate", "--model", "8b", "--workload", "infer", "--gpu", "h100"], ["solve", "--help"], ["pack", "--help"],
     ["pareto", "--help"]],
    ids=lambda args: "import vramopt" if args is None else " ".join(args),
)
def test_commands_that_do_not_solve_do_not_import_the_solver(args):
    """issue 11, start-up: `import vramopt`, --help, gpus, models, estimate load no OR-Tools/pandas."""
    assert loaded_heavy_modules(args) == []


def test_solve_imports_the_solver_when_it_solves():
    """The other side: a CP-SAT solve does load OR-Tools (the check above can fail)."""
    assert "ortools" in loaded_heavy_modules(["solve", "--model", "8b", "--max-gpus", "2", "--workers", "1"])
