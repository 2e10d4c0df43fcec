"""Large clusters: choose each job's option against the capacity of each GPU type (a
relaxation whose optimum bounds the true one), then place the choices node by node (best
fit, ``pack_greedy.place``); an option that fits no node is excluded and the choice
re-solved. The bound is the first relaxation's, so the reported gap is honest."""

from __future__ import annotations

import time
from collections import defaultdict

from ortools.sat.python import cp_model

from vramopt.optimizer.pack_exact import Result
from vramopt.optimizer.pack_greedy import fill, place
from vramopt.optimizer.pack_inventory import NodeShapes, free_instances, fully_free
from vramopt.optimizer.pack_model import run_solver, weighted
from vramopt.optimizer.pack_value import Values, rank

RELAXATION_GAP_LIMIT = 0.002
"""The capacity relaxation stops once within 0.2% of its bound (the gap is reported)."""

LAST_SOLVE_S = 0.05
"""Below this much time left, no further relaxation solve is started."""


def _relaxation(jobs, nodes, options, values: Values):
    cp = cp_model.CpModel()
    shapes = NodeShapes(nodes)
    admitted = {}
    by_type_gpus, by_type_nodes, by_profile = defaultdict(list), defaultdict(list), defaultdict(list)
    for job_index, job_options in enumerate(options):
        literals = []
        for option_index, option in enumerate(job_options):
            if not shapes.count_fitting(option):
                continue
            literal = cp.new_bool_var(f"admit[{jobs[job_index].id},{option_index}]")
            admitted[job_index, option_index] = literal
            literals.append(literal)
            if option.mig_profile is not None:
                by_profile[option.gpu, option.mig_profile].append((option.instances, literal))
            else:
                by_type_gpus[option.gpu].append((option.gpus, literal))
                if option.nodes > 1:
                    by_type_nodes[option.gpu].append((option.nodes, literal))
        # A job runs at most one option.
        if literals:
            cp.add(sum(literals) <= 1)
    for gpu, terms in by_type_gpus.items():
        typed = [node for node in nodes if node.gpu.name == gpu]
        # Whole GPUs chosen on a type <= its free GPUs.
        cp.add(weighted(terms) <= sum(len(node.free_gpus) for node in typed))
        # Packing cuts: a node with f free GPUs holds at most floor(f/k) jobs of k or more
        # GPUs, and none besides a multi-node job that takes it.
        for size in range(1, max(len(node.free_gpus) for node in typed) + 1):
            holders = [(literal, options[job][option_index]) for (job, option_index), literal in admitted.items()
                       if options[job][option_index].gpu == gpu and options[job][option_index].mig_profile is None
                       and options[job][option_index].gpus >= size]
            if not holders:
                continue
            slots = sum(len(node.free_gpus) // size for node in typed)
            per_node = typed[0].gpu.node.gpus_per_node // size
            cp.add(sum((option.nodes * per_node if option.nodes > 1 else 1) * literal for literal, option in holders) <= slots)
    # Whole nodes taken by multi-node jobs <= the entirely free nodes of the type.
    for gpu, terms in by_type_nodes.items():
        cp.add(weighted(terms) <= sum(1 for node in nodes if node.gpu.name == gpu and fully_free(node)))
    # MIG instances of a profile chosen <= the free ones of the type.
    for (gpu, profile), terms in by_profile.items():
        cp.add(weighted(terms) <= sum(free_instances(node).get(profile, 0) for node in nodes if node.gpu.name == gpu))
    cp.maximize(weighted([(values.of(job, option), literal) for (job, option), literal in admitted.items()]))
    return cp, admitted


def solve_decomposed(jobs, nodes, options, values: Values, floor: dict, deadline: float, workers: int) -> Result:
    if deadline - time.perf_counter() <= LAST_SOLVE_S:
        return Result(floor, None, False, cut=True)
    # The greedy floor is not given as a hint here: measured on 500 jobs and 512 nodes, the
    # hinted relaxation stayed at the hint's value for 6 s, unhinted it reached the 0.2%
    # gap limit in 3.4 s. The floor still bounds the answer from below (at the end).
    cp, admitted = _relaxation(jobs, nodes, options, values)
    upper_bound, assignment, proven, cut = None, {}, False, True
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= LAST_SOLVE_S:
            break
        status, solver = run_solver(cp, remaining, workers, RELAXATION_GAP_LIMIT)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        if upper_bound is None:
            upper_bound = solver.best_objective_bound
        chosen = {job: option for (job, option), literal in admitted.items() if solver.boolean_value(literal)}
        placed, unplaced, left = place(chosen, options, nodes)
        # What is placed, with the room it leaves filled, is a valid answer if time runs out.
        filled = fill(left, placed, options, values)
        if not assignment or rank(values, options, filled) > rank(values, options, assignment):
            assignment = filled
        if not unplaced:
            proven = status == cp_model.OPTIMAL and abs(solver.objective_value - upper_bound) < 0.5
            cut = False
            break
        for job, option in unplaced:
            cp.add(admitted[job, option] == 0)
        cp.clear_hints()
        for (job, option), literal in admitted.items():
            cp.add_hint(literal, job in placed and placed[job][0] == option)
    if rank(values, options, floor) > rank(values, options, assignment):
        return Result(floor, upper_bound, False, cut)
    return Result(assignment, upper_bound, proven, cut)
