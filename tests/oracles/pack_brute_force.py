"""Exhaustive assignment for ``pack`` (tests only, tiny instances): every choice of option
and nodes for every job, checked against the same capacities as the CP-SAT model but by
plain counting, so "CP-SAT equals brute force" is an exact comparison."""

from __future__ import annotations

import itertools
from collections import defaultdict

from vramopt.optimizer.pack_inventory import free_instances, fully_free, host_limit_mib, mib, nvme_limit_mib
from vramopt.optimizer.pack_value import Values, objective_of


def fits_capacities(nodes, options, combination) -> bool:
    gpu_use, mig_use, host_use, nvme_use = defaultdict(int), defaultdict(int), defaultdict(int), defaultdict(int)
    for job_index, choice in enumerate(combination):
        if choice is None:
            continue
        option = options[job_index][choice[0]]
        for node_index in choice[1]:
            node = nodes[node_index]
            if option.mig_profile is not None:
                mig_use[node_index, option.mig_profile] += option.instances
            else:
                if option.nodes > 1 and not fully_free(node):
                    return False
                gpu_use[node_index] += option.gpus // option.nodes
            host_use[node_index] += mib(option.host_bytes_per_node)
            nvme_use[node_index] += mib(option.nvme_bytes_per_node)
    return (all(used <= len(nodes[index].free_gpus) for index, used in gpu_use.items())
            and all(used <= free_instances(nodes[index]).get(profile, 0) for (index, profile), used in mig_use.items())
            and all(used <= host_limit_mib(nodes[index]) for index, used in host_use.items())
            and all(used <= nvme_limit_mib(nodes[index]) for index, used in nvme_use.items()))


def brute_force(jobs, nodes, options, best, price_units=None, admit_all: bool = False) -> tuple[int, int] | None:
    """The best (value, -whole GPUs) over every assignment (with ``price_units``: value,
    -integer money per hour)."""
    nodes = list(nodes)
    values = Values(jobs, options, best, price_units, admit_all)
    choices_per_job = []
    for job_options in options:
        choices = [None]
        for option_index, option in enumerate(job_options):
            candidates = [index for index, node in enumerate(nodes) if node.gpu.name == option.gpu]
            for subset in itertools.combinations(candidates, option.nodes):
                choices.append((option_index, subset))
        choices_per_job.append(choices)
    best_found = None
    for combination in itertools.product(*choices_per_job):
        if not fits_capacities(nodes, options, combination):
            continue
        assignment = {job: (choice[0], list(choice[1])) for job, choice in enumerate(combination) if choice is not None}
        value, gpus = objective_of(values, options, assignment)
        if best_found is None or (value, -gpus) > best_found:
            best_found = (value, -gpus)
    return best_found
