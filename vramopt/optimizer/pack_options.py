"""Each job's *options* for ``pack``: its best plan on each GPU count (or MIG instance
count) the free inventory could give it, from the same tables and technique modules as
``solve`` (the exhaustive oracle over the tables, bounded).

What an option set depends on is the job's *shape* (everything that decides its plans:
model, workload, sizes, headroom, pins; not its id, weight, ``min_tokens_per_s`` or
``max_gpus``) and the *free-GPU shape* of each GPU type (the most free GPUs on one node, how
many nodes are entirely free, the free MIG instances), never the number of nodes as such:
the plans are computed once per (job shape, GPU type, GPU counts) and reused by every job
and node that shares them. Multi-node counts follow a ladder (every node count up to
``DENSE_NODE_COUNTS``, then doubling, then the most the job may take), so a job's options
grow with the logarithm of a large cluster, not with its node count.

A ``framework`` (``pack --framework``) restricts each training job's plans to what that
framework runs and counts its memory the framework's way, exactly as ``solve --framework``
(the same ``space_for_framework`` and validity masks); serving jobs keep vLLM's rules.

Building stops at the deadline: a job whose plans are not all built by then has no options
(``JobOptions.unbuilt``); plans already cached still serve later jobs of the same shape.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from vramopt.cluster import ClusterNode, PackJob
from vramopt.errors import VramoptError
from vramopt.estimate import estimate_serving, estimate_training
from vramopt.frameworks import DEFAULT_FRAMEWORK
from vramopt.optimizer.cancel import check_cancelled
from vramopt.optimizer.decode import decode_choice
from vramopt.optimizer.domains import parsed_user_choices
from vramopt.optimizer.oracle import best_in_keys_by_bound
from vramopt.optimizer.pack_inventory import free_instances, fully_free
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.prune import lower_bounds
from vramopt.optimizer.serving_problem import build_serving_problem
from vramopt.types import SearchSpace, ServingWorkload, TrainingWorkload

DENSE_NODE_COUNTS = 8
"""Multi-node options take every whole-node count up to this many nodes, then only doubling
counts and the largest count the job may take (assumption: beyond eight nodes a job's
throughput per node changes slowly, and a scheduler rounding a large job to a power of two
of nodes loses little; it keeps a 512-node cluster at about a dozen multi-node options per
job instead of hundreds)."""


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


@dataclass(frozen=True, slots=True)
class JobOptions:
    options: list[list[Option]]
    """Per job, its options (too slow and dominated ones dropped)."""
    best: list[float]
    """Per job, its fastest option's tokens/s on this free inventory (0 when none)."""
    unbuilt: frozenset[int]
    """Jobs whose options the deadline cut off (they have none)."""


class _OutOfTime(Exception):
    """The deadline passed before a job's plans were all built."""


def workload_of(job: PackJob):
    if job.workload == "infer":
        return ServingWorkload(model=job.model, context=job.context, headroom_fraction=job.headroom_fraction,
                               min_slots=job.min_slots, max_latency_ms=job.max_latency_ms)
    return TrainingWorkload(model=job.model, seq_len=job.seq_len, global_batch=job.global_batch,
                            headroom_fraction=job.headroom_fraction, kind=job.workload, lora_rank=job.lora_rank)


def job_shape(job: PackJob) -> tuple:
    """Everything that decides a job's plans on given GPUs."""
    # 'gpu' and 'gpus' choices are applied outside the plans (which GPU types, which counts).
    mapping = lambda values: tuple(sorted((key, value) for key, value in values.items() if key not in ("gpu", "gpus")))  # noqa: E731
    return (job.model, job.workload, job.seq_len, job.global_batch, job.context, job.headroom_fraction, job.lora_rank,
            job.min_slots, job.max_latency_ms, mapping(job.pin), mapping(job.allow), mapping(job.forbid))


def allowed_gpu(job: PackJob, gpu_name: str) -> bool:
    """Whether the job's own 'gpu' pin, allow and forbid let it run on this GPU type."""
    from vramopt.hardware import load_gpu

    names = lambda values: {load_gpu(value).name for value in values}  # noqa: E731
    if "gpu" in job.pin and gpu_name not in names([job.pin["gpu"]]):
        return False
    if "gpu" in job.allow and gpu_name not in names(job.allow["gpu"]):
        return False
    return gpu_name not in names(job.forbid.get("gpu", ()))


def node_count_ladder(most_nodes: int) -> list[int]:
    """Whole-node counts (2 and more) a multi-node option may span, up to ``most_nodes``."""
    counts = list(range(2, min(DENSE_NODE_COUNTS, most_nodes) + 1))
    size = 2 * DENSE_NODE_COUNTS
    while size < most_nodes:
        counts.append(size)
        size *= 2
    if most_nodes > DENSE_NODE_COUNTS:
        counts.append(most_nodes)
    return counts


def _gpu_counts(job: PackJob, nodes: list[ClusterNode]) -> tuple[tuple[int, ...], frozenset[int]]:
    """The GPU counts the job's options are built for on these nodes (one GPU type), and
    which of them are multi-node (whole nodes)."""
    gpus_per_node = nodes[0].gpu.node.gpus_per_node
    most_on_one_node = max(len(node.free_gpus) for node in nodes)
    whole_nodes = sum(1 for node in nodes if fully_free(node))
    cap = job.max_gpus if job.max_gpus is not None else most_on_one_node + whole_nodes * gpus_per_node
    beyond = [nodes_taken * gpus_per_node for nodes_taken in node_count_ladder(min(whole_nodes, cap // gpus_per_node))]
    inside = [count for count in range(1, min(most_on_one_node, cap) + 1) if count not in beyond]
    choices = parsed_user_choices(SearchSpace(pin=dict(job.pin), allow=dict(job.allow), forbid=dict(job.forbid)))
    counts = [count for count in inside + beyond
              if count in choices["pin"].get("gpus", (count,)) and count in choices["allow"].get("gpus", (count,))
              and count not in choices["forbid"].get("gpus", ())]
    return tuple(counts), frozenset(beyond)


def job_framework(job: PackJob, framework: str) -> str:
    """The framework a job's plans are searched under: training jobs take the pack's, serving
    jobs are vLLM's (the training frameworks do not serve)."""
    return DEFAULT_FRAMEWORK if job.workload == "infer" else framework


def _space(job: PackJob, gpu: str, max_gpus: int, extra_pin: dict | None = None, counts: tuple[int, ...] = (),
           framework: str = DEFAULT_FRAMEWORK) -> SearchSpace:
    """The job's search space on one GPU type (its 'gpu' choices decide which types it is
    searched on at all, its 'gpus' choices which counts: both are applied by the caller)."""
    without = lambda choices: {key: value for key, value in choices.items() if key not in ("gpu", "gpus")}  # noqa: E731
    allow = without(job.allow)
    if counts:
        allow["gpus"] = tuple(str(count) for count in counts)
    return SearchSpace(gpus=(gpu,), max_gpus=max_gpus, pin={**without(job.pin), **(extra_pin or {})},
                       allow=allow, forbid=without(job.forbid), workers=1, whole_nodes=True,
                       framework=job_framework(job, framework))


def _check(deadline: float | None) -> None:
    check_cancelled()
    if deadline is not None and time.perf_counter() >= deadline:
        raise _OutOfTime


def _estimate(job: PackJob, plan, framework: str = DEFAULT_FRAMEWORK) -> tuple[dict, float, float, float]:
    workload = workload_of(job)
    estimate = (estimate_serving(workload, plan) if isinstance(workload, ServingWorkload)
                else estimate_training(workload, plan, job_framework(job, framework)))
    response = estimate.to_dict()
    memory = response["memory"]
    return response, estimate.tokens_per_s, float(memory.get("host_bytes_per_node", 0.0)), float(memory.get("nvme_bytes_per_node", 0.0))


def _whole_gpu_templates(job: PackJob, gpu_name: str, nodes: list[ClusterNode], cache: dict, deadline,
                         framework: str = DEFAULT_FRAMEWORK) -> list[Option]:
    counts, beyond = _gpu_counts(job, nodes)
    key = ("whole", job_shape(job), gpu_name, counts, job_framework(job, framework))
    if key in cache:
        return cache[key]
    found: list[Option] = []
    if counts:
        _check(deadline)
        workload = workload_of(job)
        space = _space(job, gpu_name, max(counts), counts=counts, framework=framework)
        try:
            problem = (build_serving_problem(workload, space, prune_counts=False) if isinstance(workload, ServingWorkload)
                       else build_problem(workload, space))
        except VramoptError:
            problem = None  # nothing of this job fits this GPU type (the reason is solve's to give)
        if problem is not None:
            lower = lower_bounds(problem)
            gpus_per_node = nodes[0].gpu.node.gpus_per_node
            for count in counts:
                _check(deadline)
                choice = best_in_keys_by_bound(problem, np.flatnonzero(problem.keys["gpus"] == count), lower)
                if choice is None:
                    continue
                plan = decode_choice(problem, choice)
                response, tokens_per_s, host, nvme = _estimate(job, plan, framework)
                found.append(Option(-1, gpu_name, count, None, 0, plan, response, tokens_per_s, host, nvme,
                                    count // gpus_per_node if count in beyond else 1))
    cache[key] = found
    return found


def _mig_templates(job: PackJob, gpu_name: str, nodes: list[ClusterNode], cache: dict, deadline) -> list[Option]:
    if job.workload != "infer" or "mig_profile" in job.pin:
        return []
    most: dict[str, int] = {}
    for node in nodes:
        for profile, count in free_instances(node).items():
            most[profile] = max(most.get(profile, 0), count)
    found: list[Option] = []
    for profile, most_on_one_node in sorted(most.items()):
        key = ("mig", job_shape(job), gpu_name, profile)
        if key not in cache:
            _check(deadline)
            try:
                space = _space(job, gpu_name, 1, {"mig_profile": profile})
                problem = build_serving_problem(replace(workload_of(job), min_slots=1), space, prune_counts=False)
                choice = best_in_keys_by_bound(problem, np.arange(problem.key_count), lower_bounds(problem))
                cache[key] = decode_choice(problem, choice) if choice is not None else None
            except VramoptError:
                cache[key] = None
        plan = cache[key]
        if plan is None:
            continue
        estimate = estimate_serving(workload_of(job), plan)
        per_instance = estimate.tokens_per_s / estimate.values["instances_per_gpu"]
        for count in range(1, most_on_one_node + 1):
            if count * plan.slots < job.min_slots:
                continue
            response = estimate.to_dict()
            response["plan"] = {**response["plan"], "gpus": 0, "replicas": count, "instances": count}
            response["throughput"] = {**response["throughput"], "tokens_per_s": per_instance * count,
                                      "concurrent_slots": count * plan.slots}
            found.append(Option(-1, gpu_name, 0, profile, count, plan, response, per_instance * count, 0.0, 0.0, 1))
    return found


def _kept(options: list[Option], min_tokens_per_s: float | None) -> list[Option]:
    """Drop options below min_tokens_per_s, and those using more GPUs of a type (or more
    instances of a profile) for no more throughput."""
    if min_tokens_per_s is not None:
        options = [option for option in options if option.tokens_per_s >= min_tokens_per_s * (1 - 1e-9)]
    kept: list[Option] = []
    fastest: dict[tuple, float] = {}
    for option in sorted(options, key=lambda item: (item.gpu, item.mig_profile or "", item.gpus + item.instances)):
        group = (option.gpu, option.mig_profile)
        if group in fastest and fastest[group] >= option.tokens_per_s:
            continue
        fastest[group] = option.tokens_per_s
        kept.append(option)
    return kept


def build_options(jobs, nodes, deadline: float | None = None, framework: str = DEFAULT_FRAMEWORK) -> JobOptions:
    """Each job's options, in job order, until ``deadline`` (``time.perf_counter()``), training
    jobs' plans under ``framework``."""
    by_type: dict[str, list[ClusterNode]] = {}
    for node in nodes:
        by_type.setdefault(node.gpu.name, []).append(node)
    cache: dict = {}
    all_options, best, unbuilt = [], [], set()
    for index, job in enumerate(jobs):
        templates: list[Option] = []
        try:
            for gpu_name, typed_nodes in sorted(by_type.items()):
                if allowed_gpu(job, gpu_name):
                    templates += _whole_gpu_templates(job, gpu_name, typed_nodes, cache, deadline, framework)
                    templates += _mig_templates(job, gpu_name, typed_nodes, cache, deadline)
        except _OutOfTime:
            unbuilt.add(index)
            templates = []
        options = [replace(option, job=index) for option in templates]
        best.append(max((option.tokens_per_s for option in options), default=0.0))
        all_options.append(_kept(options, job.min_tokens_per_s))
    return JobOptions(all_options, best, frozenset(unbuilt))


def job_options(jobs, nodes, framework: str = DEFAULT_FRAMEWORK) -> tuple[list[list[Option]], list[float]]:
    """Each job's options and its best tokens/s, with no deadline (tests, benchmarks)."""
    built = build_options(jobs, nodes, framework=framework)
    return built.options, built.best
