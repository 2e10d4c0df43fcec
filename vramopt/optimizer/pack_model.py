"""The exact CP-SAT model of ``pack`` (every job, option and node at once), and the one
function through which every pack model is solved.

Built in the OR-Tools samples' order: variables, capacity constraints, symmetry breaking,
objective. Identical GPUs inside a node are never told apart (counts, not indices), so
the model has no symmetry inside a node; identical nodes are ordered by their GPU load.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ortools.sat.python import cp_model

from vramopt.optimizer.cancel import run_solver as run_cancellable
from vramopt.optimizer.pack_inventory import NodeShapes, fits_node, free_instances, host_limit_mib, mib, node_shape, nvme_limit_mib
from vramopt.optimizer.pack_value import Values


def run_solver(cp: cp_model.CpModel, time_limit_s: float, workers: int, relative_gap_limit: float | None = None):
    """Solve ``cp`` within the time limit; returns (status, solver). Every pack solve
    goes through here."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = max(time_limit_s, 0.001)
    if relative_gap_limit is not None:
        solver.parameters.relative_gap_limit = relative_gap_limit
    return run_cancellable(solver, cp), solver  # Ctrl-C / Cancellation: Interrupted, not a status


def weighted(terms: list[tuple[int, Any]]):
    """sum(coefficient x literal) as one linear expression (0 when empty)."""
    if not terms:
        return 0
    return cp_model.LinearExpr.weighted_sum([literal for _, literal in terms], [coefficient for coefficient, _ in terms])


@dataclass
class PackModel:
    cp: cp_model.CpModel
    admitted: dict = field(default_factory=dict)
    """(job, option) -> the literal 'the job runs this option'."""
    placements: dict = field(default_factory=dict)
    """(job, option, node) -> the literal 'the option runs on (a share of) this node'."""
    value: Any = 0
    """The integer objective (pack_value)."""
    gpus_used: Any = 0
    gpu_load: dict = field(default_factory=dict)
    """node -> whole GPUs the placements there use."""


def _variables(model: PackModel, jobs, nodes, options) -> None:
    # admit[job, option] is one boolean per option; place[job, option, node] one per node
    # that could hold it (of its GPU type, with the free GPUs, instances or whole nodes).
    for job_index, job_options in enumerate(options):
        for option_index, option in enumerate(job_options):
            literal = model.cp.new_bool_var(f"admit[{jobs[job_index].id},{option.gpu},{option.mig_profile or option.gpus}]")
            model.admitted[job_index, option_index] = literal
            places = []
            for node_index, node in enumerate(nodes):
                if fits_node(option, node):
                    place = model.cp.new_bool_var(f"place[{jobs[job_index].id},{option_index},{node.name}]")
                    model.placements[job_index, option_index, node_index] = place
                    places.append(place)
            # An admitted option runs on exactly its number of nodes (1 inside one node).
            if places:
                model.cp.add(sum(places) == option.nodes * literal).with_name(f"spans[{jobs[job_index].id},{option_index}]")
            else:
                model.cp.add(literal == 0)
        # A job runs at most one option.
        model.cp.add(sum(model.admitted[job_index, index] for index in range(len(job_options))) <= 1).with_name(
            f"one_option[{jobs[job_index].id}]")


def _capacity_constraints(model: PackModel, nodes, options) -> None:
    gpu_terms, mig_terms = defaultdict(list), defaultdict(list)
    host_terms, nvme_terms = defaultdict(list), defaultdict(list)
    for (job_index, option_index, node_index), place in model.placements.items():
        option = options[job_index][option_index]
        if option.mig_profile is not None:
            mig_terms[node_index, option.mig_profile].append((option.instances, place))
        else:
            # A multi-node option takes each of its nodes whole (gpus / nodes = the node size).
            gpu_terms[node_index].append((option.gpus // option.nodes, place))
        host_terms[node_index].append((mib(option.host_bytes_per_node), place))
        nvme_terms[node_index].append((mib(option.nvme_bytes_per_node), place))
    for node_index, node in enumerate(nodes):
        model.gpu_load[node_index] = weighted(gpu_terms.get(node_index, []))
        # Whole GPUs used on a node <= its free GPUs.
        if node_index in gpu_terms:
            model.cp.add(model.gpu_load[node_index] <= len(node.free_gpus)).with_name(f"gpus[{node.name}]")
        # MIG instances of each profile used <= the free instances of that profile.
        for profile, available in sorted(free_instances(node).items()):
            if (node_index, profile) in mig_terms:
                model.cp.add(weighted(mig_terms[node_index, profile]) <= available).with_name(f"mig[{node.name},{profile}]")
        # Host RAM and NVMe offloaded by the plans placed there <= the usable capacity.
        if node_index in host_terms:
            model.cp.add(weighted(host_terms[node_index]) <= host_limit_mib(node)).with_name(f"host[{node.name}]")
            model.cp.add(weighted(nvme_terms[node_index]) <= nvme_limit_mib(node)).with_name(f"nvme[{node.name}]")


def _symmetry_breaking(model: PackModel, nodes) -> None:
    # Nodes of the same shape are interchangeable: order their GPU loads, so that only one
    # of the permutations of an assignment over them is feasible.
    groups = defaultdict(list)
    for node_index, node in enumerate(nodes):
        groups[node_shape(node)].append(node_index)
    for group in groups.values():
        for first, second in zip(group, group[1:]):
            if not isinstance(model.gpu_load[first], int) or not isinstance(model.gpu_load[second], int):
                model.cp.add(model.gpu_load[first] >= model.gpu_load[second]).with_name(
                    f"symmetry[{nodes[first].name},{nodes[second].name}]")


def _objective(model: PackModel, options, values: Values) -> None:
    # Maximized first: sum of weight x normalized throughput (integers, pack_value); the
    # whole GPUs used (with prices: the money per hour) are minimized next, with that value
    # fixed (pack_exact).
    model.value = weighted([(values.of(job, option), literal) for (job, option), literal in model.admitted.items()])
    model.gpus_used = weighted([(values.cost_of(options[job][option]), literal) for (job, option), literal in model.admitted.items()])
    model.cp.maximize(model.value)


def build_model(jobs, nodes, options, values: Values) -> PackModel:
    model = PackModel(cp_model.CpModel())
    _variables(model, jobs, nodes, options)
    _capacity_constraints(model, nodes, options)
    _symmetry_breaking(model, nodes)
    _objective(model, options, values)
    return model


def read(model: PackModel, solver) -> dict:
    """The solver's assignment {job: (option, [nodes])}."""
    chosen = {job: (option, []) for (job, option), literal in model.admitted.items() if solver.boolean_value(literal)}
    for (job, option, node), place in model.placements.items():
        if job in chosen and chosen[job][0] == option and solver.boolean_value(place):
            chosen[job][1].append(node)
    return chosen


def placement_count(nodes, options) -> int:
    """(job, option, node) placement literals the exact model would have."""
    shapes = NodeShapes(nodes)
    return sum(shapes.count_fitting(option) for job_options in options for option in job_options)
