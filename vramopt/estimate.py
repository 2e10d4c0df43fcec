"""Evaluate one given training plan: the library side of ``vramopt estimate``."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from vramopt.constraints.validity import serving_invalid_reasons
from vramopt.costs.inference import ServingCase, ServingColumns, evaluate_serving
from vramopt.costs.coefficients import coefficient
from vramopt.costs.request_serving import request_load
from vramopt.costs.lora import adapter_parameters, frozen_bytes_per_parameter
from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.errors import InputError
from vramopt.input_files import check_fields
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.models.checkpoint_quantization import check_plan_format
from vramopt.constraints.mig import mig_profile_code  # noqa: F401 (re-exported: callers import it from here)
from vramopt.plan import check_plan, nodes_used
from vramopt.results import ServingEstimate, TrainingEstimate
from vramopt.types import MAX_COUNT, TRAINING_KINDS, ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload


def check_headroom(headroom_fraction: float) -> None:
    if not isinstance(headroom_fraction, (int, float)) or not math.isfinite(headroom_fraction) or not 0.0 <= headroom_fraction < 1.0:
        raise InputError(f"headroom must be a fraction in [0, 1), got {headroom_fraction!r}")


def training_case(workload: TrainingWorkload, gpu_name: str, framework: str = "generic") -> TrainingCase:
    check_headroom(workload.headroom_fraction)
    for name in ("seq_len", "global_batch"):
        value = getattr(workload, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
            raise InputError(f"{name} must be an integer from 1 to {MAX_COUNT:,}, got {value!r}")
    if workload.kind not in TRAINING_KINDS:
        raise InputError(f"workload '{workload.kind}' is not one of {', '.join(TRAINING_KINDS)} (serving uses the infer workload)")
    model = load_model(workload.model)
    trainable, frozen, overhead = 1.0, None, 0.0
    if workload.kind in ("lora", "qlora"):
        trainable = adapter_parameters(model, workload.lora_rank, tuple(workload.lora_targets)) / model.params_total
        frozen = frozen_bytes_per_parameter(model, workload.kind)
        overhead = coefficient("qlora_dequantization_overhead") if workload.kind == "qlora" else 0.0
    from vramopt.frameworks import load_framework

    return TrainingCase(
        model=model,
        gpu=load_gpu(gpu_name),
        seq_len=workload.seq_len,
        global_batch=workload.global_batch,
        headroom_fraction=float(workload.headroom_fraction),
        trainable_fraction=trainable,
        frozen_bytes_per_param=frozen,
        compute_overhead_fraction=overhead,
        framework=framework,
        **dict(load_framework(framework).case_options),
    )


def estimate_training(workload: TrainingWorkload, plan: TrainingPlan, framework: str = "generic") -> TrainingEstimate:
    """The memory and throughput of one plan; ``framework`` (vramopt/frameworks/) refuses a
    plan that framework cannot run, naming its rule."""
    from vramopt.frameworks import check_runs

    from vramopt.frameworks import load_framework

    check_fields(workload, plan)  # integers too large to print or to convert to float
    case = training_case(workload, plan.gpu, load_framework(framework).name)
    plan = TrainingPlan(**{**_plan_fields(plan), "gpu": case.gpu.name})
    columns = check_plan(case, plan)
    check_runs(framework, columns)
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


# ---------------------------------------------------------------------------------------
# Serving


def check_serving_workload(workload: ServingWorkload) -> None:
    """The service requirements are well formed (solve, pareto, pack and estimate)."""
    if isinstance(workload.min_slots, bool) or not isinstance(workload.min_slots, int) or not 1 <= workload.min_slots <= MAX_COUNT:
        raise InputError(f"min_slots must be an integer from 1 to {MAX_COUNT:,}, got {workload.min_slots!r}")
    latency = workload.max_latency_ms
    if latency is not None and (isinstance(latency, bool) or not isinstance(latency, (int, float)) or not math.isfinite(latency) or latency <= 0):
        raise InputError(f"max latency must be a positive number of milliseconds, got {latency!r}")


def serving_case(workload: ServingWorkload, gpu_name: str) -> ServingCase:
    check_headroom(workload.headroom_fraction)
    check_serving_workload(workload)
    if isinstance(workload.context, bool) or not isinstance(workload.context, int) or workload.context < 1:
        raise InputError(f"context must be a positive integer, got {workload.context!r}")
    model = load_model(workload.model)
    if workload.context > model.max_context:
        raise InputError(f"context {workload.context} is longer than {model.name}'s context of {model.max_context} tokens")
    return ServingCase(model=model, gpu=load_gpu(gpu_name), context=workload.context, headroom_fraction=float(workload.headroom_fraction),
                       requests=request_load(workload, model.max_context, model.name))


def serving_columns(case: ServingCase, plans) -> ServingColumns:
    """The plans' ``ServingColumns``, each value checked by its technique's declaration
    (``PlanField.problem``) and coded by its ``serving_columns``."""
    from vramopt.plan_record import serving_codes, serving_plan_techniques

    rows: dict[str, list[int]] = {}
    for plan in plans:
        for technique in serving_plan_techniques():
            problem = technique.plan_field.problem(technique.field, getattr(plan, technique.field))
            if problem:
                raise InputError(problem)
        for name, code in serving_codes(plan, case.gpu).items():
            rows.setdefault(name, []).append(code)
    return ServingColumns(**{name: np.array(codes, dtype=np.int64) for name, codes in rows.items()})


def estimate_serving(workload: ServingWorkload, plan: ServingPlan) -> ServingEstimate:
    check_fields(workload, plan)  # integers too large to print or to convert to float
    case = serving_case(workload, plan.gpu)
    check_plan_format(case.model, plan.quantization)
    plan = replace(plan, gpu=case.gpu.name)
    columns = serving_columns(case, [plan])
    for reason, mask in serving_invalid_reasons(case, columns).items():
        if bool(np.asarray(mask).any()):
            detail = f"{plan.quantization} on {case.gpu.name}" if "quantization" in reason else f"{case.model.name}: {case.model.heads} heads, {case.model.layers} layers"
            raise InputError(f"{reason} ({detail}; plan {plan.gpus}x {plan.gpu} tp={plan.tensor_parallel}"
                             f"{f' ep={plan.expert_parallel}' if plan.expert_parallel != 1 else ''} pp={plan.pipeline_parallel})")
    values = {name: np.asarray(array).reshape(-1)[0].item() for name, array in evaluate_serving(case, columns).items()}
    return ServingEstimate(
        case=case, model=case.model, plan=plan, workload=workload,
        nodes=nodes_used(plan.gpus, case.gpu.node.gpus_per_node), values=values,
    )
