"""Training and serving as explicit reductions of a request to the solver's tables.

As cvxpy's reductions (cvxpy/reductions/reduction.py: ``accepts``, ``apply``, ``invert``),
a reduction says whether it takes a request (``accepts(workload)``), turns the request into
the integer tables both engines read (``apply(workload, space) -> tables.Problem``: keys,
state and activation items, budgets, ticks), and maps a chosen candidate back into the
request's terms (``invert(problem, choice) -> TrainingPlan | ServingPlan``, through each
technique's ``decode``).

``problem.REDUCTIONS`` lists one ``TrainingReduction`` and one ``ServingReduction``, each
given its table builder (``problem.build_training_problem``,
``serving_problem.build_serving_problem`` behind its request checks); ``problem.build_problem``
and ``decode.decode_choice`` dispatch through that list. This module imports neither
builder, so the builders never import each other or the dispatch
(tests/unit/test_optimizer_imports.py fails on any import cycle under vramopt/optimizer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from vramopt.constraints import registry
from vramopt.constraints.expert_parallel import SAME_AS_TENSOR_PARALLEL
from vramopt.constraints.precision import SAME_AS_PRECISION
from vramopt.errors import InputError
from vramopt.optimizer.tables import KEY_COLUMNS, Problem
from vramopt.types import SearchSpace, ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload

PLAN_FIELDS = tuple(TrainingPlan.__slots__)
SERVING_PLAN_FIELDS = tuple(ServingPlan.__slots__)

Builder = Callable[[Any, SearchSpace], Problem]


def plan_codes(problem: Problem, key: int, state_item: int, activation_item: int) -> dict[str, int]:
    """The PlanColumns codes of one training candidate, written by the technique modules."""
    codes = {name: int(problem.keys[name][key]) for name in KEY_COLUMNS}
    values = {**problem.state.values[state_item], **problem.activation.values[activation_item]}
    for field, value in values.items():
        if field == "grad_comm_precision" and value == SAME_AS_PRECISION:
            codes["grad_comm_precision"] = codes["precision"]
            continue
        codes.update(registry.technique(field).columns(value))
    return codes


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


@dataclass(frozen=True, slots=True)
class TrainingReduction:
    """Pretraining, fine-tuning, LoRA and QLoRA: keys (GPU, layout, precision, micro-batch)
    x the separable state and activation items."""

    build: Builder
    problem_kind: str = "train"
    """``Problem.kind`` of the tables it builds (any training kind)."""

    def accepts(self, workload: Any) -> bool:
        return isinstance(workload, TrainingWorkload)

    def apply(self, workload: TrainingWorkload, space: SearchSpace) -> Problem:
        return self.build(workload, space)

    def invert(self, problem: Problem, choice) -> TrainingPlan:
        """The chosen candidate's codes, decoded field by field by each technique."""
        codes = plan_codes(problem, choice.key, choice.state_item, choice.activation_item)
        fields = {"gpu": problem.gpu_of(choice.key).name}
        for technique in registry.TECHNIQUES:
            if technique.field in PLAN_FIELDS and technique.field != "gpu":
                fields[technique.field] = technique.decode(codes)
        return TrainingPlan(**fields)


@dataclass(frozen=True, slots=True)
class ServingReduction:
    """Serving (``--workload infer``): keys (GPU, replica layout, weight format, MIG profile)
    x one group of KV cache / slots / speculative decoding items (not separable)."""

    build: Builder
    problem_kind: str = "infer"

    def accepts(self, workload: Any) -> bool:
        return isinstance(workload, ServingWorkload)

    def apply(self, workload: ServingWorkload, space: SearchSpace) -> Problem:
        return self.build(workload, space)

    def invert(self, problem: Problem, choice) -> ServingPlan:
        values = plan_values(problem, choice.key, choice.state_item, choice.activation_item)
        fields = {"gpu": values["gpu"]}
        for technique in registry.TECHNIQUES:
            if technique.field in SERVING_PLAN_FIELDS and technique.field != "gpu":
                fields[technique.field] = technique.decode(values)
        return ServingPlan(**fields)


def reduction_for(reductions, workload):
    """The first reduction that accepts the workload; a request none takes is an error."""
    for reduction in reductions:
        if reduction.accepts(workload):
            return reduction
    raise InputError(f"a {type(workload).__name__} is neither a TrainingWorkload nor a ServingWorkload")


def reduction_of(reductions, problem: Problem):
    """The reduction that built ``problem`` (by its kind), for ``invert``."""
    for reduction in reductions:
        if reduction.problem_kind == problem.kind:
            return reduction
    raise ValueError(f"no reduction builds problems of kind {problem.kind!r}")
