"""Evaluate one given training plan: the library side of ``vramopt estimate``."""

from __future__ import annotations

import math

import numpy as np

from vramopt.costs.coefficients import coefficient
from vramopt.costs.lora import adapter_parameters, frozen_bytes_per_parameter
from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.errors import InputError
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.plan import check_plan, nodes_used
from vramopt.results import TrainingEstimate
from vramopt.types import TRAINING_KINDS, TrainingPlan, TrainingWorkload


def check_headroom(headroom_fraction: float) -> None:
    if not isinstance(headroom_fraction, (int, float)) or not math.isfinite(headroom_fraction) or not 0.0 <= headroom_fraction < 1.0:
        raise InputError(f"headroom must be a fraction in [0, 1), got {headroom_fraction!r}")


def training_case(workload: TrainingWorkload, gpu_name: str) -> TrainingCase:
    check_headroom(workload.headroom_fraction)
    for name in ("seq_len", "global_batch"):
        value = getattr(workload, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    if workload.kind not in TRAINING_KINDS:
        raise InputError(f"workload '{workload.kind}' is not one of {', '.join(TRAINING_KINDS)} (serving uses the infer workload)")
    model = load_model(workload.model)
    trainable, frozen, overhead = 1.0, None, 0.0
    if workload.kind in ("lora", "qlora"):
        trainable = adapter_parameters(model, workload.lora_rank, tuple(workload.lora_targets)) / model.params_total
        frozen = frozen_bytes_per_parameter(model, workload.kind)
        overhead = coefficient("qlora_dequantization_overhead") if workload.kind == "qlora" else 0.0
    return TrainingCase(
        model=model,
        gpu=load_gpu(gpu_name),
        seq_len=workload.seq_len,
        global_batch=workload.global_batch,
        headroom_fraction=float(workload.headroom_fraction),
        trainable_fraction=trainable,
        frozen_bytes_per_param=frozen,
        compute_overhead_fraction=overhead,
    )


def estimate_training(workload: TrainingWorkload, plan: TrainingPlan) -> TrainingEstimate:
    case = training_case(workload, plan.gpu)
    plan = TrainingPlan(**{**_plan_fields(plan), "gpu": case.gpu.name})
    columns = check_plan(case, plan)
    values = {name: np.asarray(array).reshape(-1)[0].item() for name, array in evaluate_training(case, columns).items()}
    return TrainingEstimate(
        case=case,
        model=case.model,
        plan=plan,
        workload=workload,
        nodes=nodes_used(plan.gpus, case.gpu.node.gpus_per_node),
        values=values,
    )


def _plan_fields(plan: TrainingPlan) -> dict:
    return {name: getattr(plan, name) for name in plan.__slots__}
