"""``pack``: admit and place a queue of jobs on a shared cluster (DESIGN.md section 5).

Each job's *options* come from its own search space, with the same tables and technique
modules as ``solve``: for every GPU type of the cluster and every GPU count the free
inventory could give it, the job's best plan on exactly that many GPUs (by the exhaustive
oracle over the tables, bounded); for serving jobs also the best plan on c free MIG
instances of a profile already carved. Options that do not reach ``min_tokens_per_s`` are
dropped, and so are options that use more GPUs of a type for no more throughput.

The CP-SAT model then chooses at most one option per job and where it runs:
- ``place[job,option,node]`` for options inside one node (tensor parallelism stays inside),
- ``whole_node[job,option,node]`` for multi-node options, on nodes entirely free, exactly
  gpus/gpus_per_node of them,
- per node: whole GPUs used <= free GPUs, MIG instances of each profile used <= free ones,
  offloaded host RAM and NVMe of the jobs placed there <= the node's (usable) capacity,
- identical nodes are interchangeable: their GPU loads are ordered (symmetry breaking);
  identical GPUs inside a node are not modelled apart at all (counts, not indices),
- objective: maximize sum of weight x tokens/s / the job's own best tokens/s (integers,
  1e-6 resolution), then use fewer GPUs.
Placements are decoded to the lowest free GPU indices and MIG instance ids, and every
admitted plan is re-verified in floating point by ``estimate``.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from vramopt.cluster import ClusterNode, PackJob, RunningJob
from vramopt.costs.coefficients import coefficient
from vramopt.errors import InputError, VramoptError
from vramopt.estimate import check_headroom, estimate_serving, estimate_training
from vramopt.optimizer.decode import decode_choice
from vramopt.optimizer.oracle import best_in_keys_by_bound
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.prune import lower_bounds
from vramopt.optimizer.serving_problem import build_serving_problem, check_serving_workload
from vramopt.optimizer.solve import STATUS_NAMES
from vramopt.results import SCHEMA
from vramopt.types import SearchSpace, ServingWorkload, TrainingWorkload
from vramopt.units import MAX_TABLE_MIB

TAKEN = ""
"""A MIG slot already given to a running job (kept so that instance ids stay stable)."""

VALUE_SCALE = 1_000_000
"""Normalized throughput is an integer in millionths (documented integer scaling)."""


@dataclass(frozen=True, slots=True)
class Option:
    job: int
    gpu: str
    gpus: int
    """Whole GPUs it uses (0 for a MIG option)."""
    mig_profile: str | None
    instances: int
    """MIG instances it uses (0 for whole GPUs)."""
    plan: Any
    response: dict
    tokens_per_s: float
    host_bytes_per_node: float
    nvme_bytes_per_node: float
    nodes: int
    """Whole nodes it spans (1 for options inside one node)."""


def workload_of(job: PackJob):
    if job.workload == "infer":
        return ServingWorkload(model=job.model, context=job.context, headroom_fraction=job.headroom_fraction,
                               min_slots=job.min_slots, max_latency_ms=job.max_latency_ms)
    return TrainingWorkload(model=job.model, seq_len=job.seq_len, global_batch=job.global_batch,
                            headroom_fraction=job.headroom_fraction, kind=job.workload, lora_rank=job.lora_rank)


def apply_running(nodes: tuple[ClusterNode, ...], running: tuple[RunningJob, ...]) -> tuple[ClusterNode, ...]:
    """Take the running jobs' GPUs and MIG instances out of the free inventory."""
    updated = {node.name: node for node in nodes}
    for job in running:
        for name, used in job.gpus_by_node.items():
            node = updated[name]
            free = list(node.free_gpus)
            mig = {index: list(profiles) for index, profiles in node.mig.items()}
            for item in used:
                if isinstance(item, bool) or not isinstance(item, (int, str)):
                    raise InputError(f"running job '{job.job}': {item!r} on node {name} is neither a GPU index nor 'GPU:profile'")
                if isinstance(item, int) or (isinstance(item, str) and item.isdigit()):
                    index = int(item)
                    if index not in free:
                        raise InputError(f"running job '{job.job}': GPU {index} of node {name} is not free")
                    free.remove(index)
                    continue
                gpu_text, _, rest = item.partition(":")
                profile, _, slot_text = rest.partition("#")
                slots = mig.get(int(gpu_text), []) if gpu_text.isdigit() else []
                if slot_text.isdigit():
                    slot = int(slot_text)
                    found = slot if slot < len(slots) and slots[slot] == profile else None
                else:
                    found = slots.index(profile) if profile in slots else None
                if found is None:
                    raise InputError(f"running job '{job.job}': no free MIG instance '{item}' on node {name}")
                # Keep the slot (ids stay stable) but mark it taken.
                slots[found] = TAKEN
            updated[name] = replace(node, free_gpus=tuple(free), mig={index: tuple(profiles) for index, profiles in mig.items()})
    return tuple(updated[node.name] for node in nodes)


def _offload_bytes(response: dict) -> tuple[float, float]:
    memory = response["memory"]
    return float(memory.get("host_bytes_per_node", 0.0)), float(memory.get("nvme_bytes_per_node", 0.0))


def _space(job: PackJob, gpu: str, max_gpus: int, pin: dict | None = None) -> SearchSpace:
    """The job's search space on one GPU type (its 'gpu' choices decide which types it
    is searched on at all, see ``_allowed_gpu``)."""
    without_gpu = lambda choices: {key: value for key, value in choices.items() if key != "gpu"}  # noqa: E731
    return SearchSpace(gpus=(gpu,), max_gpus=max_gpus, pin={**without_gpu(job.pin), **(pin or {})},
                       allow=without_gpu(job.allow), forbid=without_gpu(job.forbid), workers=1)


def _allowed_gpu(job: PackJob, gpu_name: str) -> bool:
    from vramopt.hardware import load_gpu

    names = lambda values: {load_gpu(value).name for value in values}  # noqa: E731
    if "gpu" in job.pin and gpu_name not in names([job.pin["gpu"]]):
        return False
    if "gpu" in job.allow and gpu_name not in names(job.allow["gpu"]):
        return False
    return gpu_name not in names(job.forbid.get("gpu", ()))


def _whole_gpu_options(index: int, job: PackJob, gpu_name: str, nodes: list[ClusterNode], cache: dict) -> list[Option]:
    gpus_per_node = nodes[0].gpu.node.gpus_per_node
    most_on_one_node = max(len(node.free_gpus) for node in nodes)
    fully_free = sum(1 for node in nodes if len(node.free_gpus) == node.gpus == gpus_per_node)
    limit = max(most_on_one_node, fully_free * gpus_per_node)
    if job.max_gpus is not None:
        limit = min(limit, job.max_gpus)
    if limit < 1:
        return []
    counts = [count for count in range(1, min(limit, most_on_one_node) + 1)]
    counts += [count * gpus_per_node for count in range(2, fully_free + 1) if count * gpus_per_node <= limit]
    workload = workload_of(job)
    key = (job.model, job.workload, job.seq_len, job.global_batch, job.context, job.headroom_fraction, job.lora_rank,
           job.min_slots, job.max_latency_ms, tuple(sorted(job.pin.items())), tuple(sorted(job.allow.items())),
           tuple(sorted(job.forbid.items())), gpu_name, limit)
    if key not in cache:
        space = _space(job, gpu_name, limit)
        space = replace(space, whole_nodes=True)
        try:
            problem = (build_serving_problem(workload, space, prune_counts=False) if isinstance(workload, ServingWorkload)
                       else build_problem(workload, space))
        except VramoptError as error:
            cache[key] = error
        else:
            lower = lower_bounds(problem)
            best = {}
            for count in counts:
                keys = np.flatnonzero(problem.keys["gpus"] == count)
                choice = best_in_keys_by_bound(problem, keys, lower)
                if choice is not None:
                    best[count] = decode_choice(problem, choice)
            cache[key] = best
    found = cache[key]
    if isinstance(found, VramoptError):
        return []
    options = []
    for count, plan in found.items():
        estimate = estimate_serving(workload, plan) if isinstance(workload, ServingWorkload) else estimate_training(workload, plan)
        response = estimate.to_dict()
        host, nvme = _offload_bytes(response)
        options.append(Option(index, gpu_name, count, None, 0, plan, response, estimate.tokens_per_s, host, nvme,
                              max(1, count // gpus_per_node) if count > gpus_per_node else 1))
    return options


def _mig_options(index: int, job: PackJob, gpu_name: str, nodes: list[ClusterNode], cache: dict) -> list[Option]:
    if job.workload != "infer" or "mig_profile" in job.pin:
        return []
    free: dict[str, int] = defaultdict(int)
    for node in nodes:
        counts: dict[str, int] = defaultdict(int)
        for profiles in node.mig.values():
            for profile in profiles:
                if profile != TAKEN:
                    counts[profile] += 1
        for profile, count in counts.items():
            free[profile] = max(free[profile], count)
    workload = workload_of(job)
    options = []
    for profile, most in sorted(free.items()):
        key = ("mig", job.model, job.context, job.headroom_fraction, job.max_latency_ms, tuple(sorted(job.pin.items())),
               tuple(sorted(job.allow.items())), tuple(sorted(job.forbid.items())), gpu_name, profile)
        if key not in cache:
            try:
                space = _space(job, gpu_name, 1, {"mig_profile": profile})
                problem = build_serving_problem(replace(workload, min_slots=1), space, prune_counts=False)
                keys = np.arange(problem.key_count)
                choice = best_in_keys_by_bound(problem, keys, lower_bounds(problem))
                cache[key] = decode_choice(problem, choice) if choice is not None else None
            except VramoptError:
                cache[key] = None
        plan = cache[key]
        if plan is None:
            continue
        estimate = estimate_serving(workload, plan)
        per_instance = estimate.tokens_per_s / estimate.values["instances_per_gpu"]
        slots_per_instance = plan.slots
        for count in range(1, most + 1):
            if count * slots_per_instance < job.min_slots:
                continue
            response = estimate.to_dict()
            response["plan"] = {**response["plan"], "gpus": 0, "replicas": count, "instances": count}
            response["throughput"] = {**response["throughput"], "tokens_per_s": per_instance * count,
                                      "concurrent_slots": count * slots_per_instance}
            options.append(Option(index, gpu_name, 0, profile, count, plan, response, per_instance * count, 0.0, 0.0, 1))
    return options


def job_options(jobs, nodes) -> tuple[list[list[Option]], list[float]]:
    """Each job's options (dominated and too-slow ones dropped) and its best tokens/s."""
    by_type: dict[str, list[ClusterNode]] = defaultdict(list)
    for node in nodes:
        by_type[node.gpu.name].append(node)
    cache: dict = {}
    all_options, best = [], []
    for index, job in enumerate(jobs):
        options: list[Option] = []
        for gpu_name, typed_nodes in sorted(by_type.items()):
            if not _allowed_gpu(job, gpu_name):
                continue
            options.extend(_whole_gpu_options(index, job, gpu_name, typed_nodes, cache))
            options.extend(_mig_options(index, job, gpu_name, typed_nodes, cache))
        best.append(max((option.tokens_per_s for option in options), default=0.0))
        if job.min_tokens_per_s is not None:
            options = [option for option in options if option.tokens_per_s >= job.min_tokens_per_s * (1 - 1e-9)]
        kept = []
        for option in sorted(options, key=lambda item: (item.gpu, item.mig_profile or "", item.gpus + item.instances)):
            smaller = [other for other in kept if other.gpu == option.gpu and other.mig_profile == option.mig_profile]
            if smaller and max(other.tokens_per_s for other in smaller) >= option.tokens_per_s:
                continue
            kept.append(option)
        all_options.append(kept)
    return all_options, best


def _value(job: PackJob, option: Option, best: float) -> int:
    return int(round(VALUE_SCALE * job.weight * option.tokens_per_s / best)) if best > 0 else 0


def _host_limit(node: ClusterNode) -> int:
    # Capped so that a node with, say, 1e300 bytes of RAM stays an int64 for CP-SAT.
    return int(min(node.host_ram_bytes * coefficient("host_ram_usable_fraction") // 2**20, MAX_TABLE_MIB))


def _nvme_limit(node: ClusterNode) -> int:
    return int(min(node.nvme_bytes * coefficient("nvme_usable_fraction") // 2**20, MAX_TABLE_MIB))


def _mib(value: float) -> int:
    return int(min(math.ceil(value / 2**20), MAX_TABLE_MIB)) if math.isfinite(value) else MAX_TABLE_MIB


@dataclass
class PackModel:
    cp: cp_model.CpModel
    admitted: dict
    placements: dict
    value: Any
    gpus_used: Any


def build_model(jobs, nodes, options, best) -> PackModel:
    cp = cp_model.CpModel()
    admitted, placements = {}, {}
    gpu_load = defaultdict(list)
    mig_load = defaultdict(list)
    host_load = defaultdict(list)
    nvme_load = defaultdict(list)
    value_terms, gpu_terms = [], []
    for job_index, job_options_list in enumerate(options):
        for option_index, option in enumerate(job_options_list):
            literal = cp.new_bool_var(f"admit[{jobs[job_index].id},{option.gpu},{option.mig_profile or option.gpus}]")
            admitted[job_index, option_index] = literal
            value_terms.append((_value(jobs[job_index], option, best[job_index]), literal))
            gpu_terms.append((option.gpus, literal))
            gpus_per_node = None
            places = []
            for node_index, node in enumerate(nodes):
                if node.gpu.name != option.gpu:
                    continue
                gpus_per_node = node.gpu.node.gpus_per_node
                if option.mig_profile is not None:
                    available = sum(profiles.count(option.mig_profile) for profiles in node.mig.values())
                    if available < option.instances:
                        continue
                elif option.nodes > 1:
                    if not (len(node.free_gpus) == node.gpus == gpus_per_node):
                        continue
                elif len(node.free_gpus) < option.gpus:
                    continue
                place = cp.new_bool_var(f"place[{jobs[job_index].id},{option_index},{node.name}]")
                placements[job_index, option_index, node_index] = place
                places.append(place)
                if option.mig_profile is not None:
                    mig_load[node_index, option.mig_profile].append((option.instances, place))
                else:
                    gpu_load[node_index].append((option.gpus // option.nodes, place))
                host_load[node_index].append((_mib(option.host_bytes_per_node), place))
                nvme_load[node_index].append((_mib(option.nvme_bytes_per_node), place))
            cp.add(sum(places) == option.nodes * literal) if places else cp.add(literal == 0)
        cp.add(sum(admitted[job_index, option_index] for option_index in range(len(job_options_list))) <= 1)
    loads = {}
    for node_index, node in enumerate(nodes):
        terms = gpu_load.get(node_index, [])
        load = sum(count * place for count, place in terms) if terms else 0
        loads[node_index] = load
        if terms:
            cp.add(load <= len(node.free_gpus)).with_name(f"gpus[{node.name}]")
        for (index, profile), terms in list(mig_load.items()):
            if index == node_index:
                available = sum(profiles.count(profile) for profiles in node.mig.values())
                cp.add(sum(count * place for count, place in terms) <= available).with_name(f"mig[{node.name},{profile}]")
        if host_load.get(node_index):
            cp.add(sum(count * place for count, place in host_load[node_index]) <= _host_limit(node)).with_name(f"host[{node.name}]")
        if nvme_load.get(node_index):
            cp.add(sum(count * place for count, place in nvme_load[node_index]) <= _nvme_limit(node)).with_name(f"nvme[{node.name}]")
    # Identical nodes are interchangeable: order their GPU loads.
    signature = defaultdict(list)
    for node_index, node in enumerate(nodes):
        mig_signature = tuple(sorted(profile for profiles in node.mig.values() for profile in profiles if profile != TAKEN))
        signature[(node.gpu.name, node.gpus, len(node.free_gpus), mig_signature, node.host_ram_bytes, node.nvme_bytes)].append(node_index)
    for group in signature.values():
        for first, second in zip(group, group[1:]):
            if not isinstance(loads[first], int) or not isinstance(loads[second], int):
                cp.add(loads[first] >= loads[second])
    value = cp_model.LinearExpr.weighted_sum([literal for _, literal in value_terms], [coefficient for coefficient, _ in value_terms]) if value_terms else 0
    gpus_used = cp_model.LinearExpr.weighted_sum([literal for _, literal in gpu_terms], [count for count, _ in gpu_terms]) if gpu_terms else 0
    return PackModel(cp, admitted, placements, value, gpus_used)


def validate_job(job: PackJob) -> None:
    """Errors in a job itself (unknown model, bad pins, a context longer than the model's)
    are the user's to fix: raised, naming the job, never turned into 'not admitted'."""
    from vramopt.models import load_model
    from vramopt.optimizer.domains import parsed_user_choices

    try:
        model = load_model(job.model)
        parsed_user_choices(SearchSpace(pin=dict(job.pin), allow=dict(job.allow), forbid=dict(job.forbid)))
        if job.workload == "infer" and job.context > model.max_context:
            raise InputError(f"context {job.context} is longer than {model.name}'s context of {model.max_context} tokens")
        if job.workload != "infer" and job.seq_len > model.max_context:
            raise InputError(f"seq_len {job.seq_len} is longer than {model.name}'s context of {model.max_context} tokens")
        check_headroom(job.headroom_fraction)
        if job.workload == "infer":
            check_serving_workload(workload_of(job))
    except VramoptError as error:
        raise type(error)(f"job '{job.id}': {error}") from None


RELAXATION_GAP_LIMIT = 0.002
"""Decomposed mode: the capacity relaxation stops once within 0.2% of its bound."""

EXACT_MODEL_MAX_PLACEMENTS = 4000
"""Up to this many (job, option, node) placement literals the whole model is solved at once;
beyond, the decomposition below keeps large clusters within seconds."""


def solve_pack(jobs, nodes, running=(), time_limit_s: float = 10.0, workers: int = 4) -> dict:
    started = time.perf_counter()
    for job in jobs:
        validate_job(job)
    nodes = apply_running(tuple(nodes), tuple(running))
    options, best = job_options(jobs, nodes)
    placements = sum(_candidate_nodes(option, nodes) for job_options_list in options for option in job_options_list)
    if placements > EXACT_MODEL_MAX_PLACEMENTS:
        return _solve_decomposed(jobs, nodes, options, best, started, time_limit_s, workers)
    model = build_model(jobs, nodes, options, best)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    # Building the options counts against the limit too; keep some of what is left for
    # the tie-break stages.
    remaining = time_limit_s - (time.perf_counter() - started)
    solver.parameters.max_time_in_seconds = max(remaining * 0.7, 0.001)
    model.cp.maximize(model.value)
    status = solver.solve(model.cp) if remaining > 0 else cp_model.UNKNOWN
    if status == cp_model.UNKNOWN:
        # Out of time before any assignment: a labelled answer with nothing admitted.
        return _response(jobs, nodes, options, best, {}, "timed_out", 1.0, 0, time.perf_counter() - started)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise InputError(f"pack: the solver found no assignment ({STATUS_NAMES.get(status, 'unknown')})")
    value = int(round(solver.objective_value))
    bound = solver.best_objective_bound
    primary_status = "optimal" if status == cp_model.OPTIMAL else "feasible"
    gap = 0.0 if status == cp_model.OPTIMAL else abs(bound - value) / max(abs(bound), 1.0)
    assignment = _read(model, solver)
    remaining = time_limit_s - (time.perf_counter() - started)
    if primary_status == "optimal" and remaining > 0.01:
        model.cp.add(model.value == value)
        model.cp.clear_hints()
        for literal in list(model.admitted.values()) + list(model.placements.values()):
            model.cp.add_hint(literal, solver.boolean_value(literal))
        model.cp.minimize(model.gpus_used)
        solver.parameters.max_time_in_seconds = remaining
        second = solver.solve(model.cp)
        if second == cp_model.OPTIMAL:
            assignment = _read(model, solver)
            assignment = _canonical(model, solver, assignment, started, time_limit_s)
        elif second == cp_model.FEASIBLE:
            assignment = _read(model, solver)
            primary_status = "feasible"
    return _response(jobs, nodes, options, best, assignment, primary_status, gap, value, time.perf_counter() - started)


def _candidate_nodes(option: Option, nodes) -> int:
    return sum(1 for node in nodes if _fits_node(option, node))


def _fits_node(option: Option, node: ClusterNode) -> bool:
    if node.gpu.name != option.gpu:
        return False
    if option.mig_profile is not None:
        return sum(profiles.count(option.mig_profile) for profiles in node.mig.values()) >= option.instances
    if option.nodes > 1:
        return len(node.free_gpus) == node.gpus == node.gpu.node.gpus_per_node
    return len(node.free_gpus) >= option.gpus


def _solve_decomposed(jobs, nodes, options, best, started, time_limit_s, workers) -> dict:
    """Large clusters: choose options against the capacity of each GPU type (a relaxation
    whose optimum bounds the true one), then place them node by node (first fit,
    largest first, whole-node jobs first); a job that does not fit loses that option and
    the choice is re-solved. The reported gap is against the first relaxation's optimum."""
    cp = cp_model.CpModel()
    admitted = {}
    by_type_gpus, by_type_nodes, by_profile = defaultdict(list), defaultdict(list), defaultdict(list)
    value_terms = []
    for job_index, job_options_list in enumerate(options):
        literals = []
        for option_index, option in enumerate(job_options_list):
            if not any(_fits_node(option, node) for node in nodes):
                continue
            literal = cp.new_bool_var(f"admit[{jobs[job_index].id},{option_index}]")
            admitted[job_index, option_index] = literal
            literals.append(literal)
            value_terms.append((_value(jobs[job_index], option, best[job_index]), literal))
            if option.mig_profile is not None:
                by_profile[option.gpu, option.mig_profile].append((option.instances, literal))
            else:
                by_type_gpus[option.gpu].append((option.gpus, literal))
                if option.nodes > 1:
                    by_type_nodes[option.gpu].append((option.nodes, literal))
        if literals:
            cp.add(sum(literals) <= 1)
    for gpu, terms in by_type_gpus.items():
        cp.add(sum(count * literal for count, literal in terms) <= sum(len(node.free_gpus) for node in nodes if node.gpu.name == gpu))
        # Valid cuts for packing whole GPUs into nodes: a node with f free GPUs holds at
        # most floor(f/k) jobs of k or more GPUs, and none once a multi-node job takes it.
        typed = [node for node in nodes if node.gpu.name == gpu]
        for size in range(1, max(len(node.free_gpus) for node in typed) + 1):
            holders = [(literal, option) for (job, option_index), literal in admitted.items()
                       for option in [options[job][option_index]]
                       if option.gpu == gpu and option.mig_profile is None and option.gpus >= size]
            if not holders:
                continue
            slots = sum(len(node.free_gpus) // size for node in typed)
            per_node = typed[0].gpu.node.gpus_per_node // size
            cp.add(sum((option.nodes * per_node if option.nodes > 1 else 1) * literal for literal, option in holders) <= slots)
    for gpu, terms in by_type_nodes.items():
        whole = sum(1 for node in nodes if node.gpu.name == gpu and len(node.free_gpus) == node.gpus == node.gpu.node.gpus_per_node)
        cp.add(sum(count * literal for count, literal in terms) <= whole)
    for (gpu, profile), terms in by_profile.items():
        cp.add(sum(count * literal for count, literal in terms) <= sum(
            sum(profiles.count(profile) for profiles in node.mig.values()) for node in nodes if node.gpu.name == gpu))
    value = cp_model.LinearExpr.weighted_sum([literal for _, literal in value_terms], [c for c, _ in value_terms]) if value_terms else 0
    cp.maximize(value)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    # The relaxation needs no proof beyond the reported gap: stop within 0.2% of its bound.
    solver.parameters.relative_gap_limit = RELAXATION_GAP_LIMIT
    upper_bound, assignment, status = None, {}, "feasible"
    while True:
        remaining = time_limit_s - (time.perf_counter() - started)
        if remaining <= 0.05:
            break
        solver.parameters.max_time_in_seconds = remaining
        result = solver.solve(cp)
        if result not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        if upper_bound is None:
            upper_bound = solver.best_objective_bound
        chosen = {job: option for (job, option), literal in admitted.items() if solver.boolean_value(literal)}
        placed, unplaced = _first_fit(chosen, options, nodes)
        if not unplaced:
            assignment = placed
            status = "optimal" if result == cp_model.OPTIMAL and abs(solver.objective_value - upper_bound) < 0.5 else "feasible"
            break
        assignment = placed  # the placeable part is a valid answer if time runs out
        for job, option in unplaced:
            cp.add(admitted[job, option] == 0)
        cp.clear_hints()
        for (job, option), literal in admitted.items():
            cp.add_hint(literal, job in placed and placed[job][0] == option)
    value_found, _ = objective_of(jobs, options, best, assignment)
    bound = upper_bound if upper_bound is not None else value_found
    gap = 0.0 if bound <= 0 else max(0.0, (bound - value_found) / bound)
    if gap > 1e-9:
        status = "feasible"
    if upper_bound is None and value_terms:
        # The time ran out before the first relaxation solve: nothing is proven.
        status, gap = "timed_out", 1.0
    return _response(jobs, nodes, options, best, assignment, status, gap, value_found, time.perf_counter() - started)


def _first_fit(chosen: dict, options, nodes) -> tuple[dict, list]:
    """Place chosen options on nodes: whole-node jobs first, then largest first, each on the
    node it fills most tightly (best fit), which leaves whole nodes free for later jobs."""
    gpu_free = {index: len(node.free_gpus) for index, node in enumerate(nodes)}
    mig_free = {index: defaultdict(int) for index in range(len(nodes))}
    for index, node in enumerate(nodes):
        for profiles in node.mig.values():
            for profile in profiles:
                if profile != TAKEN:
                    mig_free[index][profile] += 1
    host_free = {index: _host_limit(node) for index, node in enumerate(nodes)}
    nvme_free = {index: _nvme_limit(node) for index, node in enumerate(nodes)}
    order = sorted(chosen.items(), key=lambda item: (-options[item[0]][item[1]].nodes, -options[item[0]][item[1]].gpus,
                                                        -options[item[0]][item[1]].instances, item[0]))
    placed, unplaced = {}, []
    for job, option_index in order:
        option = options[job][option_index]
        host, nvme = _mib(option.host_bytes_per_node), _mib(option.nvme_bytes_per_node)
        candidates = [index for index, node in enumerate(nodes) if node.gpu.name == option.gpu and host_free[index] >= host and nvme_free[index] >= nvme]
        if option.mig_profile is not None:
            fitting = sorted((index for index in candidates if mig_free[index][option.mig_profile] >= option.instances),
                             key=lambda index: (mig_free[index][option.mig_profile], index))[:1]
        elif option.nodes > 1:
            fitting = [index for index in candidates if gpu_free[index] == nodes[index].gpus == nodes[index].gpu.node.gpus_per_node][: option.nodes]
            fitting = fitting if len(fitting) == option.nodes else []
        else:
            fitting = sorted((index for index in candidates if gpu_free[index] >= option.gpus),
                             key=lambda index: (gpu_free[index], index))[:1]
        if not fitting:
            unplaced.append((job, option_index))
            continue
        for index in fitting:
            if option.mig_profile is not None:
                mig_free[index][option.mig_profile] -= option.instances
            else:
                gpu_free[index] -= option.gpus // option.nodes
            host_free[index] -= host
            nvme_free[index] -= nvme
        placed[job] = (option_index, fitting)
    return placed, unplaced


def _canonical(model: PackModel, solver, assignment: dict, started: float, time_limit_s: float) -> dict:
    """Among the optimal answers (several whenever nodes or options tie), the one that
    prefers low-numbered nodes and options, found by one single-threaded search on a model
    without hints: the same request gives the same placement on every run and worker count."""
    gpus = int(round(solver.objective_value))
    model.cp.add(model.gpus_used == gpus)
    model.cp.clear_hints()
    order = [(index + 1) * literal for index, literal in enumerate(model.placements.values())]
    model.cp.minimize(sum(order))
    single = cp_model.CpSolver()
    single.parameters.num_workers = 1
    single.parameters.max_time_in_seconds = max(time_limit_s - (time.perf_counter() - started), 0.01)
    if single.solve(model.cp) == cp_model.OPTIMAL:
        return _read(model, single)
    return assignment


def _read(model: PackModel, solver) -> dict:
    chosen = {}
    for (job_index, option_index), literal in model.admitted.items():
        if solver.boolean_value(literal):
            chosen[job_index] = (option_index, [node for (j, o, node), place in model.placements.items()
                                                if j == job_index and o == option_index and solver.boolean_value(place)])
    return chosen


def objective_of(jobs, options, best, assignment) -> tuple[int, int]:
    value = sum(_value(jobs[job], options[job][option], best[job]) for job, (option, _) in assignment.items())
    gpus = sum(options[job][option].gpus for job, (option, _) in assignment.items())
    return value, gpus


def _response(jobs, nodes, options, best, assignment, status, gap, value, wall_time_s) -> dict:
    free = {index: list(node.free_gpus) for index, node in enumerate(nodes)}
    free_mig = {index: [(gpu, slot, profile) for gpu, profiles in sorted(node.mig.items()) for slot, profile in enumerate(profiles)
                        if profile != TAKEN]
                for index, node in enumerate(nodes)}
    placements = []
    used_gpus = used_instances = 0
    for job_index, job in enumerate(jobs):
        if job_index not in assignment:
            placements.append(None)
            continue
        option_index, node_indices = assignment[job_index]
        option = options[job_index][option_index]
        gpus_by_node = {}
        for node_index in sorted(node_indices):
            if option.mig_profile is not None:
                taken = [item for item in free_mig[node_index] if item[2] == option.mig_profile][: option.instances]
                for item in taken:
                    free_mig[node_index].remove(item)
                gpus_by_node[nodes[node_index].name] = [f"{gpu}:{profile}#{slot}" for gpu, slot, profile in taken]
                used_instances += len(taken)
            else:
                count = option.gpus // option.nodes
                taken = free[node_index][:count]
                free[node_index] = free[node_index][count:]
                gpus_by_node[nodes[node_index].name] = taken
                used_gpus += count
        placements.append({"job": job.id, "admitted": True,
                           "reason": f"normalized throughput {option.tokens_per_s / best[job_index]:.3f} of its best alone, weight {job.weight:g}",
                           "gpus_by_node": gpus_by_node, "plan": option.response["plan"], "memory": option.response["memory"],
                           "throughput": option.response["throughput"]})
    # Reasons for the jobs left out, against what is still free after the admitted ones.
    left = [replace(node, free_gpus=tuple(free[index]),
                    mig={gpu: tuple(profile for g, _, profile in free_mig[index] if g == gpu) for gpu in node.mig})
            for index, node in enumerate(nodes)]
    for job_index, job in enumerate(jobs):
        if placements[job_index] is None:
            reason = (f"not placed: the solver ran out of time before any assignment; raise --time-limit"
                      if status == "timed_out" and options[job_index] else _reason(job, options[job_index], left, best[job_index]))
            placements[job_index] = {"job": job.id, "admitted": False, "reason": reason,
                                     "gpus_by_node": {}, "plan": None, "memory": None, "throughput": None}
    total_free = sum(len(node.free_gpus) for node in nodes)
    total_instances = sum(1 for node in nodes for profiles in node.mig.values() for profile in profiles if profile != TAKEN)
    return {
        "schema": SCHEMA,
        "placements": placements,
        "summary": {
            "jobs_admitted": len(assignment),
            "jobs": len(jobs),
            "gpus_used": used_gpus,
            "gpus_left": total_free - used_gpus,
            "mig_instances_used": used_instances,
            "mig_instances_left": total_instances - used_instances,
            "weighted_normalized_throughput": value / VALUE_SCALE,
            "solver": {"engine": "cp-sat", "status": status, "gap": gap, "wall_time_s": wall_time_s},
        },
    }


def _reason(job: PackJob, options: list[Option], nodes, best: float) -> str:
    if not options:
        if best > 0 and job.min_tokens_per_s is not None:
            return f"no placement reaches min_tokens_per_s {job.min_tokens_per_s:,.0f}: the best on this cluster's free GPUs is {best:,.0f} tokens/s"
        most = max(len(node.free_gpus) for node in nodes)
        return f"no plan of {job.model} fits the free GPUs (at most {most} free on one node; see `vramopt solve` for why)"
    smallest = min(options, key=lambda option: (option.gpus or option.instances, -option.tokens_per_s))
    typed = [node for node in nodes if node.gpu.name == smallest.gpu]
    if smallest.mig_profile is not None:
        most = max(sum(profiles.count(smallest.mig_profile) for profiles in node.mig.values()) for node in typed)
        return (f"its smallest plan needs {_count(smallest.instances, 'free ' + smallest.mig_profile + ' MIG instance')} on one node; "
                f"after the admitted jobs the most left on one node is {most}")
    most = max(len(node.free_gpus) for node in typed)
    need = _count(smallest.gpus, "whole " + smallest.gpu)
    where = "on one node" if smallest.nodes == 1 else f"as {smallest.nodes} free whole nodes"
    return (f"its smallest plan needs {need} {where}; after the admitted jobs (higher weighted throughput) "
            f"the most left on one node is {most}")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def brute_force(jobs, nodes, options, best) -> tuple[int, int] | None:
    """Exhaustive assignment (tests only, tiny instances): the best (value, -gpus)."""
    nodes = list(nodes)
    choices_per_job = []
    for job_index, job_options_list in enumerate(options):
        choices = [None]
        for option_index, option in enumerate(job_options_list):
            candidates = [index for index, node in enumerate(nodes) if node.gpu.name == option.gpu]
            for subset in itertools.combinations(candidates, option.nodes):
                choices.append((option_index, subset))
        choices_per_job.append(choices)
    best_found = None
    for combination in itertools.product(*choices_per_job):
        gpu_use = defaultdict(int)
        mig_use = defaultdict(int)
        host_use = defaultdict(int)
        nvme_use = defaultdict(int)
        ok = True
        for job_index, choice in enumerate(combination):
            if choice is None:
                continue
            option = options[job_index][choice[0]]
            for node_index in choice[1]:
                node = nodes[node_index]
                if option.mig_profile is not None:
                    mig_use[node_index, option.mig_profile] += option.instances
                elif option.nodes > 1:
                    if not (len(node.free_gpus) == node.gpus == node.gpu.node.gpus_per_node):
                        ok = False
                    gpu_use[node_index] += option.gpus // option.nodes
                else:
                    gpu_use[node_index] += option.gpus
                host_use[node_index] += _mib(option.host_bytes_per_node)
                nvme_use[node_index] += _mib(option.nvme_bytes_per_node)
        for node_index, used in gpu_use.items():
            ok &= used <= len(nodes[node_index].free_gpus)
        for (node_index, profile), used in mig_use.items():
            ok &= used <= sum(profiles.count(profile) for profiles in nodes[node_index].mig.values())
        for node_index, used in host_use.items():
            ok &= used <= _host_limit(nodes[node_index])
        for node_index, used in nvme_use.items():
            ok &= used <= _nvme_limit(nodes[node_index])
        if not ok:
            continue
        assignment = {job: (choice[0], list(choice[1])) for job, choice in enumerate(combination) if choice is not None}
        value, gpus = objective_of(jobs, options, best, assignment)
        candidate = (value, -gpus)
        if best_found is None or candidate > best_found:
            best_found = candidate
    return best_found
