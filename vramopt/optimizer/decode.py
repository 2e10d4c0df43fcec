"""Decode a chosen (key, state item, activation item) into a plan: the inverse of the
reduction that built the problem (``optimizer/reductions.py``), through each technique
module's own decode step."""

from __future__ import annotations

from vramopt.optimizer.oracle import Choice
from vramopt.optimizer.problem import REDUCTIONS
from vramopt.optimizer.reductions import PLAN_FIELDS, SERVING_PLAN_FIELDS, plan_codes, plan_values, reduction_of  # noqa: F401 (re-exported)
from vramopt.optimizer.tables import Problem


def decode_choice(problem: Problem, choice: Choice):
    """The chosen plan: a TrainingPlan, or a ServingPlan for the infer workload."""
    return reduction_of(REDUCTIONS, problem).invert(problem, choice)
