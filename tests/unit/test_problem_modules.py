"""Training and serving are two reductions to one Problem through optimizer/tables.py; the
serving builder does not import the training one (issue 12 architecture: no import cycle)."""

from __future__ import annotations

import subprocess
import sys


def test_the_serving_builder_imports_without_the_training_builder():
    code = ("import sys, vramopt.optimizer.serving_problem as serving; "
            "print('vramopt.optimizer.problem' in sys.modules, serving.Problem.__module__)")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert output == ["False", "vramopt.optimizer.tables"]


def test_both_reductions_build_the_same_problem_type():
    from vramopt.optimizer import problem, serving_problem, tables

    assert problem.Problem is serving_problem.Problem is tables.Problem
    assert callable(problem.build_training_problem) and callable(serving_problem.build_serving_problem)
