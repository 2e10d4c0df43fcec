"""``pack``: admit and place a queue of jobs on a shared cluster (DESIGN.md section 5).

The steps, each in its own module:

1. ``pack_inventory``: the running jobs' GPUs and MIG instances leave the free inventory.
2. ``pack_options``: each job's options, its best plan on each GPU count (or MIG instance
   count) the free inventory could give it, from the same tables as ``solve``, cached per
   job shape and free-GPU shape, built until the time limit.
3. ``pack_value``: the objective, sum of weight x normalized throughput, in integers.
4. ``pack_greedy``: a greedy best-fit answer, the floor of every time-limited answer.
5. ``pack_model`` / ``pack_exact``: up to ``EXACT_MODEL_MAX_PLACEMENTS`` placement literals,
   one exact CP-SAT model; ``pack_decompose`` beyond (a capacity relaxation, then best fit).
6. ``pack_response``: placements decoded to GPU indices and MIG slots, reasons for the rest.

The time limit covers all of it: option building stops at the deadline (with cached plans
still serving later jobs of the same shape), the solver gets what is left, and when nothing
is left the greedy answer is returned, labelled with its gap to an upper bound.
"""

from __future__ import annotations

import time

from vramopt.cluster import PackJob, check_weight_spread
from vramopt.errors import InputError, VramoptError
from vramopt.estimate import check_headroom
from vramopt.optimizer.pack_decompose import solve_decomposed
from vramopt.optimizer.pack_exact import Result, solve_exact
from vramopt.optimizer.pack_greedy import greedy
from vramopt.optimizer.pack_inventory import apply_running
from vramopt.optimizer.pack_model import placement_count
from vramopt.frameworks import DEFAULT_FRAMEWORK, load_framework, space_for_framework
from vramopt.optimizer.pack_options import build_options, job_framework, job_options, workload_of
from vramopt.optimizer.pack_prices import add_money, pack_price_units
from vramopt.optimizer.pack_response import build_response
from vramopt.optimizer.pack_value import STEPS_PER_SMALLEST_WEIGHT, Values, objective_of
from vramopt.optimizer.serving_problem import check_serving_workload
from vramopt.types import SearchSpace

__all__ = ["solve_pack", "validate_job", "apply_running", "job_options"]

EXACT_MODEL_MAX_PLACEMENTS = 4000
"""Up to this many (job, option, node) placement literals the whole model is solved at once;
beyond, the decomposition keeps large clusters within seconds."""


def validate_job(job: PackJob, framework: str = DEFAULT_FRAMEWORK) -> None:
    """Errors in a job itself (unknown model, bad pins, a pin of a field the job's workload
    does not have, a pin its framework cannot run, a context longer than the model's) are the
    user's to fix: raised, naming the job, never turned into 'not admitted'."""
    from vramopt.models import load_model
    from vramopt.optimizer.domains import parsed_user_choices

    try:
        model = load_model(job.model)
        # The same check as solve's: a pin, allow or forbid of a field the job's workload's
        # plans do not have (slots on a training job) is an error, not ignored.
        space = SearchSpace(pin=dict(job.pin), allow=dict(job.allow), forbid=dict(job.forbid),
                            framework=job_framework(job, framework))
        parsed_user_choices(space, kind=job.workload)
        space_for_framework(space)  # a pin the framework cannot run names the rule, as solve's does
        if job.workload == "infer" and job.context > model.max_context:
            raise InputError(f"context {job.context} is longer than {model.name}'s context of {model.max_context} tokens")
        if job.workload != "infer" and job.seq_len > model.max_context:
            raise InputError(f"seq_len {job.seq_len} is longer than {model.name}'s context of {model.max_context} tokens")
        check_headroom(job.headroom_fraction)
        if job.workload == "infer":
            check_serving_workload(workload_of(job))
    except VramoptError as error:
        raise type(error)(f"job '{job.id}': {error}") from None


def _check_running_not_queued(jobs, running) -> None:
    queued = {job.id for job in jobs}
    for item in running:
        if item.job in queued:
            raise InputError(f"job '{item.job}' is both running (--running) and queued (--jobs): a running job keeps its "
                             "GPUs and is not placed again; remove it from one of the two")


PACK_OBJECTIVES = ("throughput", "cost")


def solve_pack(jobs, nodes, running=(), time_limit_s: float = 10.0, workers: int = 4, usd_per_gpu_hour=None,
               objective: str = "throughput", framework: str = DEFAULT_FRAMEWORK) -> dict:
    """``usd_per_gpu_hour`` (GPU type -> US dollars, every GPU type of the cluster): the
    assignments of the most value are told apart by money per hour instead of whole GPUs,
    and the response reports it (``pack_prices``). ``objective`` 'cost' (needs prices):
    admit the most job weight (every job, when they all fit) at the least money per hour,
    whatever their throughput beyond ``min_tokens_per_s``. ``framework``: every training job's
    plans keep that framework's rules and memory accounting, as ``solve --framework`` does
    (serving jobs keep vLLM's)."""
    framework = load_framework(framework).name
    if objective not in PACK_OBJECTIVES:
        raise InputError(f"pack objective '{objective}' is not one of {', '.join(PACK_OBJECTIVES)}")
    if objective == "cost" and usd_per_gpu_hour is None:
        raise InputError("pack objective cost needs prices (--prices FILE or --price GPU=USD)")
    started = time.perf_counter()
    deadline = started + time_limit_s
    jobs, running = tuple(jobs), tuple(running)
    for job in jobs:
        validate_job(job, framework)
    check_weight_spread(jobs)
    _check_running_not_queued(jobs, running)
    nodes = apply_running(tuple(nodes), running)
    built = build_options(jobs, nodes, deadline, framework)
    units = None if usd_per_gpu_hour is None else pack_price_units(nodes, built.options, usd_per_gpu_hour)
    values = Values(jobs, built.options, built.best, units, admit_all=objective == "cost")
    floor = greedy(jobs, built.options, values, nodes)
    solve = solve_exact if placement_count(nodes, built.options) <= EXACT_MODEL_MAX_PLACEMENTS else solve_decomposed
    result = solve(jobs, nodes, built.options, values, floor, deadline, workers)
    solver = _label(jobs, built, values, result, time.perf_counter() - started)
    # The weighted normalized throughput is reported under either objective.
    throughput_values = values if objective == "throughput" else Values(jobs, built.options, built.best)
    value = objective_of(throughput_values, built.options, result.assignment)[0]
    response = build_response(jobs, nodes, built, result.assignment, solver, throughput_values.report(value), time_limit_s)
    if usd_per_gpu_hour is not None:
        add_money(response, result.assignment, built.options, usd_per_gpu_hour, jobs, objective)
    if framework != DEFAULT_FRAMEWORK:
        response["summary"]["framework"] = framework
    return response


def _label(jobs, built, values: Values, result: Result, wall_time_s: float) -> dict:
    """Status and gap. The bound is the solver's over the built options (or, when it gave
    none, every job at its best), plus every job whose options the time limit cut off at
    its full weight: the gap never claims more than is known."""
    value = objective_of(values, built.options, result.assignment)[0]
    bound = result.bound if result.bound is not None else sum(values.best_of(job) for job in range(len(jobs)))
    bound += sum(STEPS_PER_SMALLEST_WEIGHT * jobs[job].weight / values.unit_weight for job in built.unbuilt)
    bound = max(bound, value)
    if result.proven and not built.unbuilt:
        status, gap = "optimal", 0.0
    elif value == 0 and bound > 0 and (result.cut or built.unbuilt):
        status, gap = "timed_out", 1.0
    else:
        status, gap = "feasible", (bound - value) / bound if bound > 0 else 0.0
    return {"engine": "cp-sat", "status": status, "gap": gap, "wall_time_s": wall_time_s}
