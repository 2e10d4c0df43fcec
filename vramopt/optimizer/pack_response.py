"""The ``pack`` answer: placements decoded to the lowest free GPU indices and MIG instance
slots, and for every job left out a reason that agrees with what was placed."""

from __future__ import annotations

import copy
from dataclasses import replace

from vramopt.cluster import PackJob
from vramopt.optimizer.pack_greedy import Capacity
from vramopt.optimizer.pack_inventory import TAKEN, fully_free
from vramopt.optimizer.pack_options import JobOptions, Option, allowed_gpu
from vramopt.results import SCHEMA


def build_response(jobs, nodes, built: JobOptions, assignment: dict, solver: dict, weighted_value: float,
                   time_limit_s: float) -> dict:
    options, best = built.options, built.best
    free = {index: list(node.free_gpus) for index, node in enumerate(nodes)}
    free_mig = {index: [(gpu, slot, profile) for gpu, profiles in sorted(node.mig.items()) for slot, profile in enumerate(profiles)
                        if profile != TAKEN]
                for index, node in enumerate(nodes)}
    placements: list[dict | None] = []
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
                gpus_by_node[nodes[node_index].name] = free[node_index][:count]
                free[node_index] = free[node_index][count:]
                used_gpus += count
        placements.append({"job": job.id, "admitted": True,
                           "reason": f"normalized throughput {option.tokens_per_s / best[job_index]:.3f} of its best alone, weight {job.weight:g}",
                           "gpus_by_node": gpus_by_node, "plan": copy.deepcopy(option.response["plan"]),
                           "memory": copy.deepcopy(option.response["memory"]),
                           "throughput": copy.deepcopy(option.response["throughput"])})
    # Reasons for the jobs left out, against what is still free after the admitted ones.
    left = [replace(node, free_gpus=tuple(free[index]),
                    mig={gpu: tuple(profile for g, _, profile in free_mig[index] if g == gpu) for gpu in node.mig})
            for index, node in enumerate(nodes)]
    capacity = Capacity(left)
    for job_index, job in enumerate(jobs):
        if placements[job_index] is None:
            if job_index in built.unbuilt:
                reason = (f"not placed: the {time_limit_s:g} s time limit ran out before its options were built; "
                          "raise --time-limit")
            elif not options[job_index]:
                reason = _no_option_reason(job, nodes, best[job_index])
            else:
                reason = _left_out_reason(options[job_index], left, capacity, solver)
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
            "weighted_normalized_throughput": weighted_value,
            "solver": solver,
        },
    }


def _no_option_reason(job: PackJob, nodes, best: float) -> str:
    types = sorted({node.gpu.name for node in nodes})
    allowed = [name for name in types if allowed_gpu(job, name)]
    if not allowed:
        cluster = f"this cluster's GPU types ({', '.join(types)})"
        if "gpu" in job.pin and not any(allowed_gpu(replace(job, allow={}, forbid={}), name) for name in types):
            return f"its pinned GPU type {job.pin['gpu']} is not in the cluster: none of {cluster}; change its pin or the cluster"
        if "gpu" in job.allow:
            return f"none of its allowed GPU types ({', '.join(job.allow['gpu'])}) is one of {cluster}"
        return f"its pin, allow and forbid of gpu leave none of {cluster}"
    if best > 0 and job.min_tokens_per_s is not None:
        return f"no placement reaches min_tokens_per_s {job.min_tokens_per_s:,.0f}: the best on this cluster's free GPUs is {best:,.0f} tokens/s"
    typed = [node for node in nodes if node.gpu.name in allowed]
    most = max(len(node.free_gpus) for node in typed)
    if len(allowed) < len(types):
        kinds = " or ".join(allowed)
        return f"no plan of {job.model} fits the free {kinds} GPUs (at most {most} free on one {kinds} node; see `vramopt solve` for why)"
    return f"no plan of {job.model} fits the free GPUs (at most {most} free on one node; see `vramopt solve` for why)"


def _left_out_reason(options: list[Option], left, capacity: Capacity, solver: dict) -> str:
    smallest = min(options, key=lambda option: (option.gpus or option.instances, -option.tokens_per_s))
    typed = [node for node in left if node.gpu.name == smallest.gpu]
    if any(capacity.find(option) is not None for option in options):
        # Only an answer cut short by the time limit leaves out a job that still fits.
        return (f"not admitted in this answer ({solver['status']}, gap {solver['gap']:.2%}): one of its plans fits what "
                "the admitted jobs left, but the search stopped at the time limit; raise --time-limit")
    if smallest.mig_profile is not None:
        most = max(sum(profiles.count(smallest.mig_profile) for profiles in node.mig.values()) for node in typed)
        return (f"its smallest plan needs {_count(smallest.instances, 'free ' + smallest.mig_profile + ' MIG instance')} on one node; "
                f"after the admitted jobs the most left on one node is {most}")
    need = _count(smallest.gpus, "whole " + smallest.gpu)
    if smallest.nodes > 1:
        whole = sum(1 for node in typed if fully_free(node))
        return (f"its smallest plan needs {need} as {smallest.nodes} free whole nodes; after the admitted jobs (higher "
                f"weighted throughput) {_count(whole, 'entirely free ' + smallest.gpu + ' node')} {'is' if whole == 1 else 'are'} left")
    most = max(len(node.free_gpus) for node in typed)
    if most >= smallest.gpus:
        return (f"its smallest plan needs {need} on one node and {_gib(smallest.host_bytes_per_node)} host RAM, "
                f"{_gib(smallest.nvme_bytes_per_node)} NVMe there; after the admitted jobs no node with {smallest.gpus} free "
                f"{smallest.gpu} GPUs has that much host RAM and NVMe left")
    return (f"its smallest plan needs {need} on one node; after the admitted jobs (higher weighted throughput) "
            f"the most left on one node is {most}")


def _gib(value_bytes: float) -> str:
    return f"{value_bytes / 2**30:,.0f} GiB"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")
