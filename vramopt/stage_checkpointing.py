"""Per-stage activation checkpointing in the product (issue 18 item 1): one plan's stages
evaluated each with its own checkpointing (``estimate --stage-checkpointing``), the per-stage
optimum of a solve (``solve --per-stage``), and the JSON block both add to the response
(``per_stage``), with what each framework can express of it.

The per-stage figures are ``costs/stage_plans.py``'s, on top of the uniform evaluation of
each checkpointing value the stages use (``costs/training.evaluate_training``):
- stage s's memory: the uniform plan's total with that value, less its heaviest stage's
  activations, plus stage s's own (stage s holds min(p - s, m) micro-batches in flight);
- stage s's step time if it set the pace: the uniform step time with that value, less the
  compute stage s does not do (``stage_compute_shares``);
- block:N (Megatron-Core's block method, the first N layers of the stage recomputed) from the
  evaluations of none and every:1: the memory of ``stage_activation_bytes(recomputed_layers=N)``,
  the time none's plus min(N, layers) / layers of the recomputation every:1 adds.
These are the terms ``optimizer/per_stage.py`` searches (the regression tests hold the two to
each other), so the same value on every stage gives back the uniform estimate exactly.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

import numpy as np

from vramopt.costs.stage_plans import layers_of_each_stage, stage_activation_bytes, stage_compute_shares, stage_in_flight
from vramopt.errors import InputError
from vramopt.types import MAX_COUNT, TrainingPlan, TrainingWorkload
from vramopt.units import format_bytes, micro_batches_phrase

BLOCK_PREFIX = "block:"

STAGE_VALUES = "none, selective, full (= every:1), every:K or block:N"

MEGATRON_DIFFERENT = ("Megatron-LM cannot run a different checkpointing per stage: Megatron-Core 0.16.1 "
                      "TransformerConfig.recompute_granularity is one value for the model and recompute_num_layers "
                      "(--recompute-method block|uniform --recompute-num-layers N) the same N 'within each pipeline stage' "
                      "(transformer_config.py; transformer_block.py _checkpointed_forward)")
DEEPSPEED_DIFFERENT = ("DeepSpeed cannot run a different checkpointing per stage: PipelineModule(activation_checkpoint_interval=K) "
                       "is one interval for every stage (deepspeed/runtime/pipe/module.py, DeepSpeed 0.16), and the "
                       "activation_checkpointing config section has no per-stage key")
TORCHTITAN_DIFFERENT = ("torchtitan cannot run a different checkpointing per stage: [activation_checkpoint] mode and "
                        "selective_ac_option are one setting that apply_ac applies to every transformer block of every "
                        "pipeline stage (torchtitan/distributed/activation_checkpoint.py)")
BLOCK_ONLY_MEGATRON = ("block:{count} (the first {count} layers of each stage recomputed) is Megatron-Core's block method; "
                       "{framework} has no such setting")


def parse_stage_value(text: Any) -> str:
    """One stage's checkpointing, normalized (full -> every:1)."""
    from vramopt.constraints.checkpointing import checkpointing_name, parse_checkpointing

    value = str(text).strip().lower()
    if value.startswith(BLOCK_PREFIX):
        count = value[len(BLOCK_PREFIX):]
        if not count.isdigit() or not 1 <= int(count) <= MAX_COUNT:
            raise InputError(f"stage checkpointing '{text}': block:N needs N a positive integer (the first N layers of the stage recomputed)")
        return f"{BLOCK_PREFIX}{int(count)}"
    try:
        return checkpointing_name(*parse_checkpointing(value))
    except InputError:
        raise InputError(f"stage checkpointing '{text}' is not one of {STAGE_VALUES}") from None


def parse_stage_checkpointing(given: Any) -> tuple[str, ...]:
    """'none,every:2,block:3' (or a list of those values): one value per stage, first to last."""
    values = given.split(",") if isinstance(given, str) else given
    if not isinstance(values, (list, tuple)) or not values or any(not isinstance(value, str) or not value.strip() for value in values):
        raise InputError(f"stage checkpointing must list one value per pipeline stage, comma-separated ({STAGE_VALUES}), got {given!r}")
    return tuple(parse_stage_value(value) for value in values)


def _evaluation(case, plan: TrainingPlan, value: str, framework: str) -> dict[str, Any]:
    """The uniform evaluation of ``plan`` with checkpointing ``value`` and its per-stage terms."""
    from vramopt.costs.training import evaluate_training
    from vramopt.frameworks import check_runs
    from vramopt.parallel_layout import ParallelLayout
    from vramopt.plan import check_plan

    columns = check_plan(case, replace(plan, checkpointing=value))
    check_runs(framework, columns)
    values = evaluate_training(case, columns)
    tokens = ParallelLayout.from_columns(columns).tokens_per_rank(case.seq_len)
    seconds = float(np.asarray(values["step_time_s"]).reshape(-1)[0])
    compute = float(np.asarray(values["compute_s"]).reshape(-1)[0])
    shares = stage_compute_shares(case.model, case.gpu, columns, case.seq_len, case.trainable_fraction, case.compute_overhead_fraction)[0]
    stage_bytes = stage_activation_bytes(case.model, columns, tokens, values["micro_batches"])[0]
    return {
        "columns": columns, "values": values, "tokens": tokens,
        "total_bytes": float(np.asarray(values["total_bytes"]).reshape(-1)[0]),
        "stage_bytes": stage_bytes,
        "slot_seconds": seconds - compute * (1.0 - shares),
        "in_flight": stage_in_flight(columns, values["micro_batches"])[0],
    }


def _stage_figures(case, evaluations: dict[str, dict], value: str, stage: int, layers: int) -> tuple[float, float]:
    """(memory bytes, step seconds if this stage set the pace) of one stage with ``value``."""
    if not value.startswith(BLOCK_PREFIX):
        evaluation = evaluations[value]
        return (evaluation["total_bytes"] - float(evaluation["stage_bytes"].max()) + float(evaluation["stage_bytes"][stage]),
                float(evaluation["slot_seconds"][stage]))
    count = int(value[len(BLOCK_PREFIX):])
    plain, full = evaluations["none"], evaluations["every:1"]
    block_bytes = stage_activation_bytes(case.model, plain["columns"], plain["tokens"], plain["values"]["micro_batches"],
                                         recomputed_layers=count)[0]
    share = min(count, layers) / layers  # the recompute GEMMs are per layer
    seconds = plain["slot_seconds"][stage] + share * (full["slot_seconds"][stage] - plain["slot_seconds"][stage])
    return plain["total_bytes"] - float(plain["stage_bytes"].max()) + float(block_bytes[stage]), float(seconds)


def estimate_stages(workload: TrainingWorkload, plan: TrainingPlan, stages: tuple[str, ...], framework: str = "generic",
                    whys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The ``per_stage`` block of ``plan`` run with checkpointing ``stages[s]`` on stage s:
    per stage its layers, micro-batches in flight, memory, budget and headroom, whether it
    fits and why, and the step time the slowest stage sets."""
    from vramopt.estimate import training_case
    from vramopt.frameworks import load_framework

    stages = parse_stage_checkpointing(stages)
    case = training_case(workload, plan.gpu, load_framework(framework).name)
    if len(stages) != plan.pipeline_parallel:
        raise InputError(f"stage checkpointing names {len(stages)} stage{'s' if len(stages) != 1 else ''}; the plan has "
                         f"pipeline_parallel {plan.pipeline_parallel}: give one value per stage")
    counts = layers_of_each_stage(case.model.layers, plan.pipeline_parallel, plan.first_stage_layers, plan.last_stage_layers)
    for stage, (value, layers) in enumerate(zip(stages, counts)):
        if value.startswith(BLOCK_PREFIX) and int(value[len(BLOCK_PREFIX):]) > layers:
            raise InputError(f"stage {stage} checkpointing {value}: the stage has {layers} layers, so block:N needs N <= {layers}")
    needed = {value for value in stages if not value.startswith(BLOCK_PREFIX)}
    if any(value.startswith(BLOCK_PREFIX) for value in stages):
        needed |= {"none", "every:1"}
    evaluations = {value: _evaluation(case, plan, value, framework) for value in sorted(needed)}
    any_values = next(iter(evaluations.values()))["values"]
    capacity = float(np.asarray(any_values["capacity_bytes"]).reshape(-1)[0])
    budget = capacity * (1.0 - case.headroom_fraction)
    rows = []
    for stage, (value, layers) in enumerate(zip(stages, counts)):
        memory, seconds = _stage_figures(case, evaluations, value, stage, layers)
        in_flight = float(evaluations["none" if value.startswith(BLOCK_PREFIX) else value]["in_flight"][stage])
        fits = memory <= budget
        why = whys[stage] if whys is not None else (
            f"holds {micro_batches_phrase(in_flight)} in flight; {format_bytes(memory)} of the {format_bytes(budget)} budget"
            + ("" if fits else f": {format_bytes(memory - budget)} over, does not fit"))
        rows.append({"stage": stage, "layers": layers, "checkpointing": value, "in_flight_micro_batches": in_flight,
                     "memory_bytes": memory, "budget_bytes": budget, "headroom_bytes": budget - memory,
                     "headroom_fraction": 1.0 - memory / capacity, "fits": bool(fits), "slot_seconds": seconds, "why": why})
    step = max(row["slot_seconds"] for row in rows)
    fits_host = all(bool(np.asarray(evaluation["values"]["fits_host"]).reshape(-1)[0]) and
                    bool(np.asarray(evaluation["values"]["fits_nvme"]).reshape(-1)[0]) for evaluation in evaluations.values())
    over = [row["stage"] for row in rows if not row["fits"]]
    return {
        "stages": rows,
        "step_time_s": step,
        "tokens_per_s": workload.global_batch * workload.seq_len / step,
        "slowest_stage": max(range(len(rows)), key=lambda index: (rows[index]["slot_seconds"], -index)),
        "fits": not over and fits_host,
        "not_fitting_stages": over,
        "exports": framework_expressions(stages),
    }


def framework_expressions(stages: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """For Megatron-LM, DeepSpeed and torchtitan: whether it can run these stages' checkpointing
    and, where it cannot, why (a note naming the framework's setting)."""
    alike = len(set(stages)) == 1
    common = stages[0]
    block = common.startswith(BLOCK_PREFIX)
    count = common[len(BLOCK_PREFIX):] if block else ""
    if not alike:
        return {"megatron": {"expressible": False, "note": MEGATRON_DIFFERENT},
                "deepspeed": {"expressible": False, "note": DEEPSPEED_DIFFERENT},
                "torchtitan": {"expressible": False, "note": TORCHTITAN_DIFFERENT}}
    megatron = {"expressible": True, "note": (f"every stage {common}: --recompute-granularity full --recompute-method block "
                                              f"--recompute-num-layers {count}" if block else f"every stage {common}: the plan's checkpointing")}
    other = {name: ({"expressible": False, "note": BLOCK_ONLY_MEGATRON.format(count=count, framework=label)} if block else
                    {"expressible": True, "note": f"every stage {common}: the plan's checkpointing"})
             for name, label in (("deepspeed", "DeepSpeed"), ("torchtitan", "torchtitan"))}
    return {"megatron": megatron, **other}


def exported_response(response: Mapping[str, Any], target: str) -> tuple[Mapping[str, Any], list[str]]:
    """The response an exporter writes, and the notes on its per-stage block: the per-stage
    plan where ``target`` can run it (its layout, and its checkpointing when every stage
    chooses alike), else the response's uniform plan with a note that says why not."""
    block = response.get("per_stage") if isinstance(response, Mapping) else None
    if not isinstance(block, Mapping) or target not in block.get("exports", {}):
        return response, []
    expression = block["exports"][target]
    stages = [row["checkpointing"] for row in block["stages"]]
    listed = ", ".join(f"stage {index} {value}" for index, value in enumerate(stages))
    if not expression["expressible"]:
        plan = response.get("plan") or {}
        return response, [f"per-stage checkpointing ({listed}) is not expressible: {expression['note']}; this file runs the "
                          f"uniform plan (checkpointing {plan.get('checkpointing')})"]
    common = stages[0]
    plan = dict(block.get("plan") or response.get("plan") or {})
    plan["checkpointing"] = "none" if common.startswith(BLOCK_PREFIX) else common
    memory = dict(response.get("memory") or {})
    memory["fits"] = bool(block["fits"])
    return {**response, "plan": plan, "memory": memory}, [f"per-stage checkpointing ({listed}): {expression['note']}"]


def megatron_block_arguments(response: Mapping[str, Any], draft) -> None:
    """Megatron-LM's block recomputation for a per-stage plan whose stages all take block:N."""
    block = response.get("per_stage") if isinstance(response, Mapping) else None
    if not isinstance(block, Mapping) or not block.get("exports", {}).get("megatron", {}).get("expressible"):
        return
    stages = {row["checkpointing"] for row in block["stages"]}
    common = next(iter(stages))
    if len(stages) == 1 and common.startswith(BLOCK_PREFIX):
        draft.argument("--recompute-granularity", "full")
        draft.argument("--recompute-method", "block")
        draft.argument("--recompute-num-layers", int(common[len(BLOCK_PREFIX):]))


def add_stage_plan(response: dict[str, Any], workload: TrainingWorkload, plan: TrainingPlan, stages: Any,
                   framework: str = "generic") -> dict[str, Any]:
    """``response`` (an estimate of ``plan``) with its ``per_stage`` block for ``stages``, and the
    gain over the uniform plan the response evaluates."""
    block = estimate_stages(workload, plan, parse_stage_checkpointing(stages), framework)
    uniform = float(response["throughput"]["tokens_per_s"])
    block.update(uniform_checkpointing=response["plan"]["checkpointing"], uniform_tokens_per_s=uniform,
                 uniform_fits=bool(response["memory"]["fits"]), gain_fraction=block["tokens_per_s"] / uniform - 1.0)
    response["per_stage"] = block
    return response


def check_per_stage_request(workload, space) -> None:
    """A per-stage solve is a training one that maximizes tokens/s (refused before any search)."""
    if not isinstance(workload, TrainingWorkload):
        raise InputError("per-stage checkpointing applies to training workloads")
    if space.objective != "throughput":
        raise InputError(f"per-stage search maximizes tokens/s; it does not apply to objective {space.objective}")


def add_searched_stages(response: dict[str, Any], workload: TrainingWorkload, space) -> dict[str, Any]:
    """``response`` (a solve's) with the ``per_stage`` block of the per-stage optimum of the same
    space (``optimizer/per_stage.per_stage_search``): its plan, each stage's choice and why, and
    the gain over the uniform optimum. The uniform answer is left as it is."""
    from vramopt.estimate import estimate_training
    from vramopt.optimizer.per_stage import per_stage_search

    check_per_stage_request(workload, space)
    answer = per_stage_search(workload, space, time_limit_s=space.time_limit_s)
    stages = tuple(stage.checkpointing for stage in answer.stages)
    block = estimate_stages(workload, answer.plan, stages, space.framework, whys=tuple(stage.why for stage in answer.stages))
    plan = estimate_training(workload, answer.plan, space.framework).plan_dict()
    del plan["checkpointing"]  # each stage carries its own
    block["plan"] = plan
    uniform = response.get("throughput") if response.get("plan") is not None else None
    if uniform is not None:
        block.update(uniform_checkpointing=response["plan"]["checkpointing"], uniform_tokens_per_s=float(uniform["tokens_per_s"]),
                     uniform_fits=True, gain_fraction=block["tokens_per_s"] / float(uniform["tokens_per_s"]) - 1.0)
    response["per_stage"] = block
    return response
