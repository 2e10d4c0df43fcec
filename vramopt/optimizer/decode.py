"""Decode a chosen (key, state item, activation item) into a plan, through each technique
module's own decode step."""

from __future__ import annotations

from vramopt.constraints import registry
from vramopt.constraints.expert_parallel import SAME_AS_TENSOR_PARALLEL
from vramopt.constraints.precision import SAME_AS_PRECISION
from vramopt.optimizer.oracle import Choice
from vramopt.optimizer.problem import KEY_COLUMNS, Problem
from vramopt.types import ServingPlan, TrainingPlan

PLAN_FIELDS = tuple(TrainingPlan.__slots__)
SERVING_PLAN_FIELDS = tuple(ServingPlan.__slots__)


def plan_codes(problem: Problem, key: int, state_item: int, activation_item: int) -> dict[str, int]:
    """The PlanColumns codes of one candidate, written by the technique modules."""
    codes = {name: int(problem.keys[name][key]) for name in KEY_COLUMNS}
    values = {**problem.state.values[state_item], **problem.activation.values[activation_item]}
    for field, value in values.items():
        if field == "grad_comm_precision" and value == SAME_AS_PRECISION:
            codes["grad_comm_precision"] = codes["precision"]
            continue
        codes.update(registry.technique(field).columns(value))
    return codes


def decode_choice(problem: Problem, choice: Choice):
    """The chosen plan: a TrainingPlan, or a ServingPlan for the infer workload."""
    if problem.kind == "infer":
        values = plan_values(problem, choice.key, choice.state_item, choice.activation_item)
        fields = {"gpu": values["gpu"]}
        for technique in registry.TECHNIQUES:
            if technique.field in SERVING_PLAN_FIELDS and technique.field != "gpu":
                fields[technique.field] = technique.decode(values)
        return ServingPlan(**fields)
    codes = plan_codes(problem, choice.key, choice.state_item, choice.activation_item)
    fields = {"gpu": problem.gpu_of(choice.key).name}
    for technique in registry.TECHNIQUES:
        if technique.field in PLAN_FIELDS and technique.field != "gpu":
            fields[technique.field] = technique.decode(codes)
    return TrainingPlan(**fields)


def plan_values(problem: Problem, key: int, state_item: int, activation_item: int) -> dict:
    """Every technique field's value (data_parallel included) of one candidate."""
    values = problem.key_values(key)
    values.update(problem.state.values[state_item])
    values.update(problem.activation.values[activation_item])
    if values.get("grad_comm_precision") == SAME_AS_PRECISION:
        values["grad_comm_precision"] = values["precision"]
    if values.get("expert_tensor_parallel") == SAME_AS_TENSOR_PARALLEL:
        values["expert_tensor_parallel"] = values["tensor_parallel"]
    return values
