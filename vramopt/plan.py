"""Training plans <-> the numeric columns of the cost model, with validation.

``encode`` turns plans into ``PlanColumns``; ``check_plan`` raises ``InputError`` with the
first reason a plan is malformed (the same masks the exhaustive enumerator uses), so
``estimate`` and the solver agree on what a valid plan is.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from vramopt.costs.columns import (
    CHECKPOINT_EVERY,
    CHECKPOINT_NONE,
    CHECKPOINT_SELECTIVE,
    OFFLOAD_NAMES,
    PlanColumns,
)
from vramopt.costs.optimizer_states import OPTIMIZER_NAMES
from vramopt.costs.training import TrainingCase, invalid_reasons
from vramopt.errors import InputError
from vramopt.parallel_layout import ParallelLayout
from vramopt.types import MAX_COUNT, PRECISIONS, TrainingPlan


def parse_checkpointing(text: str) -> tuple[int, int]:
    """'none' -> (0, 0); 'selective' -> (1, 0); 'every:K' / 'full' -> (2, K)."""
    value = str(text).strip().lower()
    if value == "none":
        return CHECKPOINT_NONE, 0
    if value == "selective":
        return CHECKPOINT_SELECTIVE, 0
    if value == "full":
        return CHECKPOINT_EVERY, 1
    if value.startswith("every:"):
        try:
            every = int(value.split(":", 1)[1])
        except ValueError:
            every = 0
        if 1 <= every <= MAX_COUNT:
            return CHECKPOINT_EVERY, every
    raise InputError(f"checkpointing '{text}' is not one of none, selective, full, every:K (K a positive integer)")


def checkpointing_name(kind: int, every: int) -> str:
    if kind == CHECKPOINT_NONE:
        return "none"
    if kind == CHECKPOINT_SELECTIVE:
        return "selective"
    return f"every:{every}"


def precision_code(name: str, field: str = "precision") -> int:
    if name not in PRECISIONS:
        raise InputError(f"{field} '{name}' is not one of {', '.join(PRECISIONS)}")
    return PRECISIONS.index(name)


def offload_code(name: str) -> int:
    if name not in OFFLOAD_NAMES:
        raise InputError(f"offload '{name}' is not one of {', '.join(OFFLOAD_NAMES)}")
    return OFFLOAD_NAMES.index(name)


def optimizer_code(name: str) -> int:
    if name not in OPTIMIZER_NAMES:
        raise InputError(f"optimizer '{name}' is not one of {', '.join(OPTIMIZER_NAMES)}")
    return OPTIMIZER_NAMES.index(name)


def data_parallel_degree(plan: TrainingPlan) -> int:
    return ParallelLayout.from_plan(plan).data_parallel


def nodes_used(gpus: int, gpus_per_node: int) -> int:
    return math.ceil(gpus / gpus_per_node)


def check_sizes(plan: TrainingPlan) -> None:
    for field in ("gpus", "tensor_parallel", "context_parallel", "pipeline_parallel", "virtual_stages", "micro_batch"):
        value = getattr(plan, field)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
            raise InputError(f"{field} must be an integer from 1 to {MAX_COUNT:,}, got {value!r}")
    if plan.zero_stage not in (0, 1, 2, 3) or isinstance(plan.zero_stage, bool):
        raise InputError(f"zero_stage must be 0, 1, 2 or 3, got {plan.zero_stage!r}")
    product = ParallelLayout.from_plan(plan).replica_gpus
    if plan.gpus % product != 0:
        raise InputError(
            f"tensor_parallel x context_parallel x pipeline_parallel = {plan.tensor_parallel} x {plan.context_parallel} x "
            f"{plan.pipeline_parallel} = {product} does not divide the {plan.gpus} GPUs (gpus = tp x cp x pp x dp)"
            if plan.context_parallel > 1
            else f"tensor_parallel x pipeline_parallel = {product} does not divide the {plan.gpus} GPUs"
        )


def encode(plans: Sequence[TrainingPlan]) -> PlanColumns:
    rows = []
    for plan in plans:
        check_sizes(plan)
        kind, every = parse_checkpointing(plan.checkpointing)
        rows.append(
            (
                plan.gpus, plan.tensor_parallel, plan.pipeline_parallel, data_parallel_degree(plan),
                int(plan.sequence_parallel), plan.virtual_stages, plan.zero_stage, kind, every,
                precision_code(plan.precision), precision_code(plan.grad_comm_precision, "grad_comm_precision"),
                offload_code(plan.offload), int(plan.flash_attention), plan.micro_batch, plan.context_parallel,
                optimizer_code(plan.optimizer),
            )
        )
    matrix = np.array(rows, dtype=np.int64).T
    return PlanColumns(*matrix)


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
            if "precision" in reason:
                raise InputError(f"{case.gpu.name} does not support {plan.precision} (its tensor cores run: "
                                 f"{', '.join(case.gpu.peak_flops_per_s)})")
            if reason.startswith("context_parallel must split"):
                raise InputError(f"{reason}: seq_len {case.seq_len} / (2 x {plan.context_parallel}) = "
                                 f"{case.seq_len / (2 * plan.context_parallel):g} tokens per chunk (plan: {describe(plan)})")
            raise InputError(f"{reason} (plan: {describe(plan)}; model {case.model.name}: "
                             f"{case.model.heads} heads, {case.model.layers} layers; GPU {case.gpu.name})")
    return columns


def describe(plan: TrainingPlan) -> str:
    return (
        f"{plan.gpus}x {plan.gpu}, tp={plan.tensor_parallel} "
        + (f"cp={plan.context_parallel} " if plan.context_parallel > 1 else "")
        + f"pp={plan.pipeline_parallel} dp={data_parallel_degree(plan)}, zero={plan.zero_stage}, micro_batch={plan.micro_batch}"
    )


def decode(columns: PlanColumns, index: int, gpu_name: str) -> TrainingPlan:
    """The plan of row ``index`` of ``columns``."""
    value = lambda name: int(np.broadcast_to(getattr(columns, name), (len(columns),))[index])  # noqa: E731
    return TrainingPlan(
        gpu=gpu_name,
        gpus=value("gpus"),
        tensor_parallel=value("tensor_parallel"),
        context_parallel=value("context_parallel"),
        pipeline_parallel=value("pipeline_parallel"),
        sequence_parallel=bool(value("sequence_parallel")),
        virtual_stages=value("virtual_stages"),
        zero_stage=value("zero_stage"),
        checkpointing=checkpointing_name(value("checkpoint_kind"), value("checkpoint_every")),
        precision=PRECISIONS[value("precision")],
        grad_comm_precision=PRECISIONS[value("grad_comm_precision")],
        offload=OFFLOAD_NAMES[value("offload")],
        flash_attention=bool(value("flash_attention")),
        micro_batch=value("micro_batch"),
        optimizer=OPTIMIZER_NAMES[value("optimizer")],
    )
