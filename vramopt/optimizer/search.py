"""``solve_training``: build the problem, run an engine, decode, re-verify, explain.

Every plan that leaves here has been re-evaluated in floating point by ``estimate`` and
still keeps the headroom and the host/NVMe capacities (DESIGN.md section 4).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any
from types import SimpleNamespace

from vramopt.constraints import registry
from vramopt.errors import VramoptError
from vramopt.estimate import estimate_serving, estimate_training
from vramopt.input_files import check_fields
from vramopt.optimizer.cancel import check_cancelled
from vramopt.optimizer.decode import decode_choice, plan_values
from vramopt.optimizer.disaggregated_answer import compare_disaggregated, with_disaggregated_fix
from vramopt.optimizer.empty_domains import EmptyDomainError
from vramopt.optimizer.explain import explain_empty_domain, explain_infeasible
from vramopt.optimizer.objective import describe
from vramopt.optimizer.oracle import solve_exhaustive
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.runners_up import runners_up
from vramopt.results import RunnerUp, SolveResult, SolverReport
from vramopt.types import SearchSpace, ServingWorkload, TrainingWorkload

ENGINES = ("cp-sat", "exhaustive")


class PlanVerificationError(VramoptError):
    """A decoded plan failed the floating-point re-check (a bug: integer tables round up)."""


def solve_training(workload, space: SearchSpace, engine: str = "cp-sat", runner_up_count: int = 3) -> SolveResult:
    """Kept for callers of the training-only name; ``solve`` takes any workload."""
    return solve(workload, space, engine, runner_up_count)


def _estimate(workload, plan, framework: str = "generic"):
    return estimate_serving(workload, plan) if isinstance(workload, ServingWorkload) else estimate_training(workload, plan, framework)


def solve(workload, space: SearchSpace, engine: str = "cp-sat", runner_up_count: int = 3) -> SolveResult:
    """The best plan for a TrainingWorkload or a ServingWorkload within ``space``."""
    if engine not in ENGINES:
        raise VramoptError(f"engine '{engine}' is not one of {', '.join(ENGINES)}")
    check_fields(workload, space)  # integers too large to print or to convert to float
    started = time.perf_counter()
    try:
        problem = build_problem(workload, space)
    except EmptyDomainError as error:
        # The request's choices leave a plan field empty: infeasible, with that field named.
        explanation = explain_empty_domain(workload, space, error.empty, started + space.time_limit_s)
        report = SolverReport(engine=engine, status="infeasible", wall_time_s=time.perf_counter() - started, gap=0.0,
                              objective=describe(SimpleNamespace(space=space)), objective_value=None, tick_s=0.0, candidates=0)
        return SolveResult(solver=report, estimate=None, explanation=explanation, workload_kind=workload.kind)
    check_cancelled()
    if engine == "exhaustive":
        choice = solve_exhaustive(problem)
        status, gap, candidates = ("optimal" if choice else "infeasible"), 0.0, problem.key_count
    else:
        from vramopt.optimizer.solve import solve_cp  # OR-Tools is imported only by the runs that solve

        remaining = max(space.time_limit_s - (time.perf_counter() - started), 0.01)
        outcome = solve_cp(problem, remaining, space.workers)
        choice, status, gap, candidates = outcome.choice, outcome.status, outcome.gap, outcome.candidates

    def report(final_status: str) -> SolverReport:
        return SolverReport(
            engine=engine,
            status=final_status,
            wall_time_s=time.perf_counter() - started,
            gap=gap,
            objective=describe(problem),
            objective_value=choice.objective if choice else None,
            tick_s=problem.tick_s,
            candidates=candidates,
        )

    check_cancelled()
    if choice is None:
        explanation = explain_infeasible(problem, started + space.time_limit_s) if status == "infeasible" else None
        check_cancelled()  # the relaxation search may have been cut short by the request
        disaggregation = compare_disaggregated(workload, space, engine, None) if isinstance(workload, ServingWorkload) and status == "infeasible" else None
        explanation = with_disaggregated_fix(explanation, disaggregation)
        return SolveResult(solver=report(status), estimate=None, explanation=explanation, workload_kind=workload.kind,
                           disaggregation=disaggregation)

    plan = decode_choice(problem, choice)
    estimate = _estimate(workload, plan, space.framework)
    if not estimate.fits:
        raise PlanVerificationError(f"internal error: the decoded plan does not fit in floating point: {plan}")
    chosen_values = plan_values(problem, choice.key, choice.state_item, choice.activation_item)
    alternatives = []
    for field, alternative in runners_up(problem, choice, runner_up_count):
        check_cancelled()
        alternative_plan = decode_choice(problem, alternative)
        alternative_estimate = _estimate(workload, alternative_plan, space.framework)
        values = plan_values(problem, alternative.key, alternative.state_item, alternative.activation_item)
        differences = {name: (chosen_values[name], values[name]) for name in chosen_values
                       if chosen_values[name] != values[name] and not _follows_tensor_parallel(name, chosen_values, values)}
        loss = 1.0 - alternative_estimate.tokens_per_s / estimate.tokens_per_s
        alternatives.append(RunnerUp(field, alternative_estimate, loss, differences))
    offload_cost = None if isinstance(workload, ServingWorkload) else _offload_cost(workload, estimate, space.framework)
    gains = {} if isinstance(workload, ServingWorkload) else _gains(workload, estimate, space.framework)
    disaggregation = compare_disaggregated(workload, space, engine, estimate) if isinstance(workload, ServingWorkload) else None
    check_cancelled()
    return SolveResult(
        solver=report(status), estimate=estimate, runners_up=tuple(alternatives), offload_cost=offload_cost,
        workload_kind=workload.kind, gains=gains, disaggregation=disaggregation,
    )


def _gains(workload: TrainingWorkload, estimate, framework: str) -> dict[str, Any]:
    """What each technique's chosen value buys (its ``Contribution.gain``), in plan order;
    only the techniques with something to say."""
    gains = {}
    for technique in registry.training_techniques():
        gain = technique.contribution.gain
        measured = gain.measure(workload, estimate, framework) if gain is not None else None
        if measured:
            gains[gain.key] = measured
    return gains


def _follows_tensor_parallel(name: str, chosen: dict, other: dict) -> bool:
    """An expert tensor-parallel degree equal to tp in both plans only follows tp's change
    (dense models, or experts split like the dense layers): not a change of its own."""
    return (name == "expert_tensor_parallel" and chosen[name] == chosen["tensor_parallel"]
            and other[name] == other["tensor_parallel"])


def _offload_cost(workload: TrainingWorkload, estimate, framework: str = "generic") -> dict[str, float] | None:
    """The same plan without offload: how much memory it would need, how much faster it is."""
    plan = estimate.plan
    if plan.offload == "none":
        return None
    resident = estimate_training(workload, replace(plan, offload="none"), framework)
    return {
        "without_offload_total_bytes": resident.total_bytes,
        "slowdown_factor": resident.tokens_per_s / estimate.tokens_per_s,
        "offload_fraction_of_step": estimate.values["offload_s"] / estimate.values["step_time_s"],
    }
