"""Explain an infeasible request: the binding constraint with its numbers, and the
smallest relaxations that make it feasible, each found by re-solving a changed request.

The relaxation search honours the request's time limit: no new re-solve starts after the
deadline, and a cut search says so in the reason (``_Deadline``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

from vramopt.costs.precision import PRECISION_ADAM_BYTES, PRECISION_BYTES
from vramopt.errors import VramoptError
from vramopt.hardware import all_gpus
from vramopt.optimizer.cancel import check_cancelled
from vramopt.optimizer.decode import decode_choice
from vramopt.optimizer.oracle import Choice, solve_exhaustive
from vramopt.optimizer.problem import Problem, probe_problem
from vramopt.optimizer.deadline import deadline_reason, smallest_count_meeting_deadline
from vramopt.optimizer.interaction import plan_seconds
from vramopt.optimizer.prune import UNREACHABLE, lower_bounds
from vramopt.results import Explanation, Relaxation
from vramopt.types import PRECISIONS, SearchSpace
from vramopt.units import BYTES_PER_MIB, format_bytes

MAX_GPUS_TRIED = 65_536
"""The more-GPUs relaxation doubles max_gpus up to here (beyond, table building is slow)."""


def _leanest(problem: Problem) -> Choice | None:
    """The valid candidate whose memory overshoots its budget the least."""
    state, activation = problem.state, problem.activation
    if not state.valid.any() or not activation.valid.any():
        return None
    state_memory = np.where(state.valid, state.memory_mib, UNREACHABLE)
    activation_memory = np.where(activation.valid, activation.memory_mib, UNREACHABLE)
    state_item = state_memory.argmin(axis=1)
    activation_item = activation_memory.argmin(axis=1)
    keys = np.arange(problem.key_count)
    overshoot = state_memory[keys, state_item] + activation_memory[keys, activation_item] - problem.budget_mib
    overshoot = np.where((state_memory[keys, state_item] < UNREACHABLE) & (activation_memory[keys, activation_item] < UNREACHABLE), overshoot, UNREACHABLE)
    key = int(np.argmin(overshoot))
    if overshoot[key] >= UNREACHABLE:
        return None
    return Choice(key, int(state_item[key]), int(activation_item[key]), (int(overshoot[key]),))


@dataclass
class _Deadline:
    """When the relaxation search must stop (``time.perf_counter()`` seconds; None: never),
    and whether it had to."""

    at: float | None = None
    cut: bool = False

    def passed(self) -> bool:
        if self.at is not None and time.perf_counter() >= self.at:
            self.cut = True
        return self.cut


_NO_DEADLINE = _Deadline()


def _try(workload, space: SearchSpace, deadline: _Deadline = _NO_DEADLINE, fit_only: bool = False) -> Problem | None:
    check_cancelled()  # before the try: Interrupted is a VramoptError and must not read as "does not fit"
    if deadline.passed():
        return None
    try:
        problem = probe_problem(workload, space, fit_only)  # None when no key's model state fits
    except VramoptError:
        return None
    return problem if problem is not None and (lower_bounds(problem) < UNREACHABLE).any() else None


def _summary(problem: Problem, choice: Choice | None) -> str:
    if choice is None:
        return "no plan"
    plan = decode_choice(problem, choice)
    if problem.kind == "infer":
        mig = f", MIG {plan.mig_profile}" if plan.mig_profile != "none" else ""
        return (
            f"{plan.gpus}x {plan.gpu}, tp={plan.tensor_parallel}{f' ep={plan.expert_parallel}' if plan.expert_parallel > 1 else ''} "
            f"pp={plan.pipeline_parallel}, {plan.quantization} weights, "
            f"{plan.kv_cache_dtype} KV, {plan.slots} slots{mig}"
        )
    from vramopt.plan_brief import layout_brief, plan_mapping

    return (f"{plan.gpus}x {plan.gpu}, {layout_brief(plan_mapping(plan), data_parallel=False)}, zero={plan.zero_stage}, "
            f"{plan.precision}, offload={plan.offload}, checkpointing={plan.checkpointing}")


def _best_detail(problem: Problem) -> str:
    choice = solve_exhaustive(problem)
    return "best plan " + _summary(problem, choice)


def _relaxations(problem: Problem, workload, space: SearchSpace, deadline: _Deadline = _NO_DEADLINE) -> list[Relaxation]:
    found: list[Relaxation] = []
    factor = 2
    while space.max_gpus * factor <= MAX_GPUS_TRIED:
        # Throughput-like objectives read only which GPU counts have a plan that fits.
        fit_only = space.objective != "min-gpus" and space.deadline_days is None
        bigger = _try(workload, replace(space, max_gpus=space.max_gpus * factor), deadline, fit_only)
        if bigger is not None:
            if space.objective == "min-gpus":
                # The exhaustive optimum of min-gpus is exactly the smallest count that fits
                # and reaches the target (a lower bound could be optimistic here).
                best = solve_exhaustive(bigger)
                if best is None:
                    factor *= 2
                    continue
                smallest = int(bigger.keys["gpus"][best.key])
                target = (f"reaches {space.min_tokens_per_s:,.0f} tokens/s" if space.min_tokens_per_s is not None
                          else "serves the request load within its targets")
                detail = f"the smallest GPU count whose best plan fits and {target} is {smallest}"
            elif space.deadline_days is not None:
                # A lower bound could be optimistic here too: the deadline needs the plan itself.
                smallest = smallest_count_meeting_deadline(bigger)
                if smallest is None:
                    factor *= 2
                    continue
                detail = f"the smallest GPU count with a plan that fits and ends within {space.deadline_days:g} days is {smallest}"
            else:
                # For the other objectives a key is feasible exactly when its leanest items fit.
                smallest = int(bigger.keys["gpus"][lower_bounds(bigger) < UNREACHABLE].min())
                detail = f"the smallest GPU count with a plan that fits is {smallest}"
            found.append(Relaxation(f"--max-gpus {smallest}", detail))
            break
        factor *= 2
    choices = problem.choices
    relaxable = (
        (("quantization", "allow quantization fp8/int8/int4"), ("mig_profile", "allow any MIG profile or whole GPUs"))
        if problem.kind == "infer"
        else (("offload", "allow offload (cpu or nvme)"), ("precision", "allow precision fp8"))
    )
    for field, change in relaxable:
        restricted = field in choices["pin"] or field in choices["allow"] or field in choices["forbid"]
        if restricted:
            relaxed = replace(
                space,
                pin={key: value for key, value in space.pin.items() if key != field},
                allow={key: value for key, value in space.allow.items() if key != field},
                forbid={key: value for key, value in space.forbid.items() if key != field},
            )
            result = _try(workload, relaxed, deadline)
            if result is not None:
                found.append(Relaxation(change, _best_detail(result)))
    largest = max(gpu.memory_bytes for gpu in problem.gpus)
    for gpu in sorted(all_gpus(), key=lambda item: item.memory_bytes):
        if gpu.memory_bytes <= largest:
            continue
        result = _try(workload, replace(space, gpus=(gpu.name,), pin={k: v for k, v in space.pin.items() if k != "gpu"}, allow={k: v for k, v in space.allow.items() if k != "gpu"}), deadline)
        if result is not None:
            found.append(Relaxation(f"--gpu {gpu.name}", f"{format_bytes(gpu.memory_bytes)} per GPU: " + _best_detail(result)))
            break
    if space.pin or space.allow or space.forbid:
        result = _try(workload, replace(space, pin={}, allow={}, forbid={}), deadline)
        if result is not None:
            found.append(Relaxation("drop the --pin/--allow/--forbid choices", _best_detail(result)))
    if problem.kind == "infer":
        found.extend(_serving_requirement_relaxations(workload, space, deadline))
    leanest = _leanest(problem)
    if leanest is not None and workload.headroom_fraction > 0:
        needed_mib = int(problem.state.memory_mib[leanest.key, leanest.state_item] + problem.activation.memory_mib[leanest.key, leanest.activation_item])
        needed_bytes = (needed_mib + math.ceil(problem.constant_bytes[leanest.key] / BYTES_PER_MIB) + 1) * BYTES_PER_MIB
        headroom = math.floor((1.0 - needed_bytes / problem.capacity_bytes[leanest.key]) * 1000) / 1000
        if 0 <= headroom < workload.headroom_fraction:
            result = _try(replace(workload, headroom_fraction=headroom), space, deadline)
            if result is not None:
                found.append(Relaxation(f"--headroom {headroom:.3f}", f"leaves {headroom:.1%} of each GPU free instead of {workload.headroom_fraction:.0%}"))
    return found


def _serving_requirement_relaxations(workload, space: SearchSpace, deadline: _Deadline = _NO_DEADLINE) -> list[Relaxation]:
    found = []
    if workload.max_latency_ms is not None:
        result = _try(replace(workload, max_latency_ms=None), space, deadline)
        if result is not None:
            found.append(Relaxation("drop --max-latency-ms", _best_detail(result)))
    if workload.min_slots > 1:
        result = _try(replace(workload, min_slots=1), space, deadline)
        if result is not None:
            found.append(Relaxation("lower --min-slots", _best_detail(result)))
    return found


def _model_state_sentence(problem: Problem) -> str:
    kind = getattr(problem.workload, "kind", "train")
    if kind in ("lora", "qlora"):
        model = problem.model
        from vramopt.costs.lora import frozen_bytes_per_parameter

        frozen = frozen_bytes_per_parameter(model, kind)
        return (
            f"{ {'lora': 'LoRA', 'qlora': 'QLoRA'}[kind]} of {model.params_total / 1e9:,.1f}B parameters keeps {format_bytes(model.params_total * frozen)} "
            f"of frozen weights ({frozen:.2f} bytes per parameter) plus adapters and activations"
        )
    if problem.kind == "infer":
        model = problem.model
        return f"serving {model.name} ({model.params_total / 1e9:,.0f}B parameters) with {problem.workload.context:,}-token context"
    model = problem.model
    precision = PRECISIONS.index("bf16")
    per_param = 2 * PRECISION_BYTES[precision] + PRECISION_ADAM_BYTES[precision]
    gpu = max(problem.gpus, key=lambda item: item.memory_bytes)
    holds = problem.space.max_gpus * gpu.memory_bytes * (1 - problem.workload.headroom_fraction)
    return (
        f"training {model.params_total / 1e9:,.0f}B parameters with Adam needs {format_bytes(model.params_total * per_param)} "
        f"of model state ({per_param:.0f} bytes per parameter in bf16); {problem.space.max_gpus} x {gpu.name} "
        f"at {problem.workload.headroom_fraction:.0%} headroom holds {format_bytes(holds)}"
    )


def explain_empty_domain(workload, space: SearchSpace, empty, deadline_s: float | None = None) -> Explanation:
    """Why a request whose choices leave a plan field without a value has no plan
    (``empty``: an ``empty_domains.EmptyDomain``), and which of its fixes work: each is
    re-solved, as every relaxation is, within the deadline."""
    deadline = _Deadline(deadline_s)
    found: list[Relaxation] = []
    for change, fields in empty.fixes:
        result = _try(workload, replace(space, **fields), deadline)
        if result is not None:
            found.append(Relaxation(change, _best_detail(result)))
    if space.pin or space.allow or space.forbid:
        result = _try(workload, replace(space, pin={}, allow={}, forbid={}), deadline)
        if result is not None:
            found.append(Relaxation("drop the --pin/--allow/--forbid choices", _best_detail(result)))
    reason = empty.reason
    if deadline.cut:
        reason += f" (the search for fixes stopped at the {space.time_limit_s:g} s time limit; raise --time-limit to try them all)"
    return Explanation(reason, "empty_domain", None, None, tuple(found))


def explain_infeasible(problem: Problem, deadline_s: float | None = None) -> Explanation:
    """Why ``problem`` has no plan, and the relaxations that fix it. ``deadline_s`` (a
    ``time.perf_counter()`` time, usually the end of the request's time limit): no
    relaxation re-solve starts after it, and the reason then says the search was cut."""
    workload, space = problem.workload, problem.space
    deadline = _Deadline(deadline_s)
    relaxations = tuple(_relaxations(problem, workload, space, deadline))
    explanation = _explain(problem, relaxations)
    if deadline.cut:
        explanation = replace(explanation, reason=f"{explanation.reason} (the search for relaxations stopped at the "
                                                  f"{space.time_limit_s:g} s time limit; raise --time-limit to try them all)")
    return explanation


def _explain(problem: Problem, relaxations: tuple[Relaxation, ...]) -> Explanation:
    workload, space = problem.workload, problem.space
    late = deadline_reason(problem, _try)
    if late is not None:
        fix = Relaxation(f"--deadline-days {math.ceil(late[1] * 10) / 10:g}", "the fastest plan's wall clock")
        return Explanation(late[0], "deadline", None, None, (fix,) + relaxations)
    if problem.kind == "infer" and (getattr(workload, "input_tokens", None) is not None or getattr(workload, "length_samples", None) is not None):
        from vramopt.optimizer.explain_requests import explain_request_load

        explained = explain_request_load(workload, space, relaxations)
        if explained is not None:
            return explained
    if space.objective == "min-gpus" and space.min_tokens_per_s is not None:
        memory_only = _try(workload, replace(space, objective="throughput", min_tokens_per_s=None))
        if memory_only is not None:
            best = solve_exhaustive(memory_only)
            best_seconds = plan_seconds(memory_only, best.key, best.state_item, best.activation_item)
            work = 1.0 if problem.kind == "infer" else workload.global_batch * workload.seq_len
            reachable = work / best_seconds
            reason = (
                f"the fastest plan within {space.max_gpus} GPUs reaches about {reachable:,.0f} tokens/s, "
                f"below the target of {space.min_tokens_per_s:,.0f} tokens/s"
            )
            extra = (Relaxation(f"--min-tokens-per-s {math.floor(reachable)}", "the best reachable throughput"),)
            return Explanation(reason, "throughput_target", None, None, relaxations + extra)
    leanest = _leanest(problem)
    if leanest is None:
        reason = (
            "no serving plan meets the requirements: every choice breaks the latency bound, the minimum slots, or a rule of the GPU"
            if problem.kind == "infer"
            else "no well-formed plan: every state choice breaks a rule (host RAM or NVMe capacity per node, offload needing ZeRO and Adam, Adafactor on LoRA adapters, a hybrid shard group that divides no layout's data-parallel degree) or every activation choice is excluded"
        )
        return Explanation(reason, "host_or_nvme_capacity", None, None, relaxations)
    gpu = problem.gpu_of(leanest.key)
    needed = (
        problem.state.memory_bytes[leanest.key, leanest.state_item]
        + problem.activation.memory_bytes[leanest.key, leanest.activation_item]
        + problem.constant_bytes[leanest.key]
    )
    capacity = float(problem.capacity_bytes[leanest.key])
    allowed = capacity * (1 - workload.headroom_fraction)
    where = "per MIG instance" if problem.kind == "infer" and capacity < gpu.memory_bytes else "per GPU"
    reason = (
        f"{_model_state_sentence(problem)}; the leanest plan ({_summary(problem, leanest)}) needs "
        f"{format_bytes(needed)} {where}, {gpu.name} allows {format_bytes(allowed)} "
        f"({format_bytes(capacity)} at {workload.headroom_fraction:.0%} headroom)"
    )
    return Explanation(reason, "gpu_memory", float(needed), float(allowed), relaxations)
