"""Placing options on nodes without a solver: best fit of given choices (the decomposition's
second step) and a greedy admission pass whose answer is the floor of every time-limited
``pack`` answer.

Best fit: whole-node options take the lowest-numbered untouched nodes; an option inside
one node goes to the node it fills most tightly (fewest free GPUs, or instances of its
profile, that still hold it; then the lowest index), which keeps whole nodes free for
later jobs. Host RAM and NVMe are checked on every node taken.
"""

from __future__ import annotations

from vramopt.optimizer.pack_inventory import fully_free, free_instances, host_limit_mib, mib, nvme_limit_mib
from vramopt.optimizer.pack_options import Option
from vramopt.optimizer.pack_value import Values, rank

MIG_INSTANCE_GPU_SHARE = 1 / 7
"""How much of a GPU one MIG instance counts for in the greedy order only (assumption: an
A100/H100 splits into at most seven instances; the models count instances exactly)."""


class Capacity:
    """What is still free on each node while options are placed one by one."""

    def __init__(self, nodes) -> None:
        self.nodes = nodes
        self.gpus = [len(node.free_gpus) for node in nodes]
        self.mig = [free_instances(node) for node in nodes]
        self.host = [host_limit_mib(node) for node in nodes]
        self.nvme = [nvme_limit_mib(node) for node in nodes]
        self.whole = [fully_free(node) for node in nodes]
        # Entirely free nodes no option has touched yet: what multi-node options take.
        self.untouched: dict[str, set[int]] = {}
        for index, node in enumerate(nodes):
            if self.whole[index]:
                self.untouched.setdefault(node.gpu.name, set()).add(index)
        # Nodes of each GPU type by free GPU count, and the nodes with free instances of
        # each profile, so that best fit looks at few nodes.
        self.buckets: dict[str, dict[int, set[int]]] = {}
        self.carved: dict[tuple[str, str], list[int]] = {}
        for index, node in enumerate(nodes):
            self.buckets.setdefault(node.gpu.name, {}).setdefault(self.gpus[index], set()).add(index)
            for profile in self.mig[index]:
                self.carved.setdefault((node.gpu.name, profile), []).append(index)

    def _room(self, index: int, option: Option) -> bool:
        return self.host[index] >= mib(option.host_bytes_per_node) and self.nvme[index] >= mib(option.nvme_bytes_per_node)

    def find(self, option: Option) -> list[int] | None:
        """The nodes the option would take now, or None when it does not fit."""
        buckets = self.buckets.get(option.gpu, {})
        if option.mig_profile is not None:
            fitting = [index for index in self.carved.get((option.gpu, option.mig_profile), ())
                       if self.mig[index][option.mig_profile] >= option.instances and self._room(index, option)]
            return [min(fitting, key=lambda index: (self.mig[index][option.mig_profile], index))] if fitting else None
        if option.nodes > 1:
            untouched = self.untouched.get(option.gpu, set())
            if len(untouched) < option.nodes:
                return None
            taken = []
            for index in sorted(untouched):
                if self._room(index, option):
                    taken.append(index)
                    if len(taken) == option.nodes:
                        return taken
            return None
        for free in sorted(count for count, indices in buckets.items() if count >= option.gpus and indices):
            lowest = min(buckets[free])
            if self._room(lowest, option):
                return [lowest]
            for index in sorted(buckets[free]):
                if self._room(index, option):
                    return [index]
        return None

    def _move(self, option: Option, indices: list[int], sign: int) -> None:
        for index in indices:
            if option.mig_profile is not None:
                self.mig[index][option.mig_profile] -= sign * option.instances
            else:
                bucket = self.buckets[option.gpu]
                bucket[self.gpus[index]].discard(index)
                self.gpus[index] -= sign * (option.gpus // option.nodes)
                bucket.setdefault(self.gpus[index], set()).add(index)
            self.host[index] -= sign * mib(option.host_bytes_per_node)
            self.nvme[index] -= sign * mib(option.nvme_bytes_per_node)
            if self.whole[index]:
                untouched = self.gpus[index] == self.nodes[index].gpus and self.host[index] == host_limit_mib(self.nodes[index]) \
                    and self.nvme[index] == nvme_limit_mib(self.nodes[index])
                (self.untouched[option.gpu].add if untouched else self.untouched[option.gpu].discard)(index)

    def take(self, option: Option, indices: list[int]) -> None:
        self._move(option, indices, 1)

    def release(self, option: Option, indices: list[int]) -> None:
        self._move(option, indices, -1)


def place(chosen: dict[int, int], options, nodes) -> tuple[dict, list, Capacity]:
    """Best fit of the chosen option of each job: whole-node options first, then the
    largest. Returns ({job: (option, nodes)}, [(job, option) that fit nowhere], what is left)."""
    capacity = Capacity(nodes)
    order = sorted(chosen.items(), key=lambda item: (-options[item[0]][item[1]].nodes, -options[item[0]][item[1]].gpus,
                                                      -options[item[0]][item[1]].instances, item[0]))
    placed, unplaced = {}, []
    for job, option_index in order:
        option = options[job][option_index]
        indices = capacity.find(option)
        if indices is None:
            unplaced.append((job, option_index))
            continue
        capacity.take(option, indices)
        placed[job] = (option_index, indices)
    return placed, unplaced, capacity


def fill(capacity: Capacity, assignment: dict, options, values: Values) -> dict:
    """The jobs not in ``assignment`` each on its most valuable option that still fits
    (heaviest value first): what is left after a placement is never wasted on a job that
    fits it."""
    assignment = dict(assignment)
    waiting = sorted((job for job in range(len(options)) if job not in assignment and options[job]),
                     key=lambda job: (-values.best_of(job), job))
    for job in waiting:
        for option_index in sorted(range(len(options[job])), key=lambda index: (-values.of(job, index), index)):
            indices = capacity.find(options[job][option_index])
            if indices is not None:
                capacity.take(options[job][option_index], indices)
                assignment[job] = (option_index, indices)
                break
    return assignment


def _size(option: Option) -> float:
    return option.gpus if option.mig_profile is None else option.instances * MIG_INSTANCE_GPU_SHARE


def _admit(jobs, options, values: Values, nodes, densest_first: bool) -> dict:
    """One greedy pass, then upgrades: each job (heaviest first) takes the fitting option of
    most value per GPU (``densest_first``) or of most value; then each admitted job moves to
    a more valuable option while one fits in what it and the free inventory hold; then the
    jobs still out are tried once more."""
    capacity = Capacity(nodes)
    assignment: dict[int, tuple[int, list[int]]] = {}

    def preference(job: int) -> list[int]:
        indices = range(len(options[job]))
        if densest_first:
            return sorted(indices, key=lambda index: (-values.of(job, index) / max(_size(options[job][index]), 1e-9),
                                                      -values.of(job, index), index))
        return sorted(indices, key=lambda index: (-values.of(job, index), _size(options[job][index]), index))

    def admit_where_room() -> None:
        for job in order:
            if job in assignment:
                continue
            for option_index in preference(job):
                indices = capacity.find(options[job][option_index])
                if indices is not None:
                    capacity.take(options[job][option_index], indices)
                    assignment[job] = (option_index, indices)
                    break

    order = sorted(range(len(jobs)), key=lambda job: (-jobs[job].weight, job))
    admit_where_room()
    for job in order:
        if job not in assignment:
            continue
        current, where = assignment[job]
        better = sorted((index for index in range(len(options[job])) if values.of(job, index) > values.of(job, current)),
                        key=lambda index: (-values.of(job, index), _size(options[job][index]), index))
        if not better:
            continue
        capacity.release(options[job][current], where)
        for option_index in better:
            indices = capacity.find(options[job][option_index])
            if indices is not None:
                current, where = option_index, indices
                break
        capacity.take(options[job][current], where)
        assignment[job] = (current, where)
    admit_where_room()  # an upgrade that moved to another node may have made room
    return assignment


def greedy(jobs, options, values: Values, nodes) -> dict:
    """The better (more value, then fewer GPUs) of the two greedy passes."""
    answers = [_admit(jobs, options, values, nodes, densest_first) for densest_first in (True, False)]
    return max(answers, key=lambda answer: rank(values, options, answer))
