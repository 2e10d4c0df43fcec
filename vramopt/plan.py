"""Training plans <-> the numeric columns of the cost model, with validation.

``encode`` turns plans into ``PlanColumns``; ``check_plan`` raises ``InputError`` with the
first reason a plan is malformed (the same masks the exhaustive enumerator uses), so
``estimate`` and the solver agree on what a valid plan is.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from vramopt.constraints.checkpointing import checkpointing_name, parse_checkpointing  # noqa: F401 (re-exported: callers import them from here)
from vramopt.constraints.validity import training_invalid_reasons as invalid_reasons
from vramopt.costs.columns import PlanColumns
from vramopt.costs.training import TrainingCase
from vramopt.errors import InputError
from vramopt.parallel_layout import ParallelLayout
from vramopt.plan_record import TrainingPlan, plan_techniques


def data_parallel_degree(plan: TrainingPlan) -> int:
    return ParallelLayout.from_plan(plan).data_parallel


def nodes_used(gpus: int, gpus_per_node: int) -> int:
    return math.ceil(gpus / gpus_per_node)


def check_sizes(plan: TrainingPlan) -> None:
    """Each field well formed by its technique's declaration (``PlanField.problem``, in
    ``registry.PLAN_ORDER``), then the layout's product dividing the GPUs."""
    for technique in plan_techniques():
        problem = technique.plan_field.problem(technique.field, getattr(plan, technique.field))
        if problem:
            raise InputError(problem)
    layout = ParallelLayout.from_plan(plan)
    if not layout.divides(plan.gpus):
        raise InputError(layout.replica_mismatch_text(plan.gpus))


def encode(plans: Sequence[TrainingPlan]) -> PlanColumns:
    """Each plan's values written into the cost model's columns by its techniques
    (``Technique.columns``); data parallel is the layout's, not a plan value."""
    rows: dict[str, list[int]] = {}
    for plan in plans:
        check_sizes(plan)
        codes = {"data_parallel": data_parallel_degree(plan)}
        for technique in plan_techniques():
            codes.update(technique.columns(getattr(plan, technique.field)))
        for name, code in codes.items():
            rows.setdefault(name, []).append(int(code))
    return PlanColumns(**{name: np.array(values, dtype=np.int64) for name, values in rows.items()})


def check_plan(case: TrainingCase, plan: TrainingPlan) -> PlanColumns:
    """Encode one plan, or raise ``InputError`` with the first reason it is malformed."""
    if case.seq_len < 1 or case.global_batch < 1:
        raise InputError("seq_len and global_batch must be positive integers")
    if case.seq_len > case.model.max_context:
        raise InputError(
            f"seq_len {case.seq_len} is longer than {case.model.name}'s context of {case.model.max_context} tokens"
        )
    columns = encode([plan])
    for reason, mask in invalid_reasons(case, columns).items():
        if bool(np.asarray(mask).any()):
            for technique in plan_techniques():  # a technique's own message with this plan's numbers
                detail = technique.contribution.invalid_detail
                message = detail(case, plan, reason) if detail is not None else None
                if message:
                    raise InputError(message)
            raise InputError(f"{reason} (plan: {describe(plan)}; model {case.model.name}: "
                             f"{case.model.heads} heads, {case.model.layers} layers; GPU {case.gpu.name})")
    return columns


def describe(plan: TrainingPlan) -> str:
    from vramopt.plan_brief import layout_brief, plan_mapping

    return f"{plan.gpus}x {plan.gpu}, {layout_brief(plan_mapping(plan))}, zero={plan.zero_stage}, micro_batch={plan.micro_batch}"


def decode(columns: PlanColumns, index: int, gpu_name: str) -> TrainingPlan:
    """The plan of row ``index`` of ``columns``, read back by each technique's ``decode``."""
    codes = {name: int(np.broadcast_to(getattr(columns, name), (len(columns),))[index]) for name in columns.column_names()}
    values = {technique.field: technique.decode(codes) for technique in plan_techniques() if technique.field != "gpu"}
    return TrainingPlan(gpu=gpu_name, **values)
