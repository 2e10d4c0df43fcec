"""The free inventory ``pack`` packs into: running jobs taken out, per-node capacities in
the integers the CP-SAT model uses, and which options a node can hold at all."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

from vramopt.cluster import ClusterNode, RunningJob, gpu_index
from vramopt.costs.coefficients import coefficient
from vramopt.errors import InputError, show_value
from vramopt.units import MAX_TABLE_MIB

TAKEN = ""
"""A MIG slot already given to a running job (kept so that instance ids stay stable)."""


def apply_running(nodes: tuple[ClusterNode, ...], running: tuple[RunningJob, ...]) -> tuple[ClusterNode, ...]:
    """Take the running jobs' GPUs and MIG instances out of the free inventory."""
    updated = {node.name: node for node in nodes}
    for job in running:
        for name, used in job.gpus_by_node.items():
            node = updated[name]
            free = list(node.free_gpus)
            mig = {index: list(profiles) for index, profiles in node.mig.items()}
            for item in used:
                _take(job, name, item, free, mig)
            updated[name] = replace(node, free_gpus=tuple(free), mig={index: tuple(profiles) for index, profiles in mig.items()})
    return tuple(updated[node.name] for node in nodes)


def _take(job: RunningJob, name: str, item, free: list[int], mig: dict[int, list[str]]) -> None:
    """One GPU index (an integer, or its canonical decimal text) or one MIG instance
    ('GPU:profile' or 'GPU:profile#slot') out of a node's free lists."""
    if isinstance(item, bool) or not isinstance(item, (int, str)):
        raise InputError(f"running job '{job.job}': {item!r} on node {name} is neither a GPU index nor 'GPU:profile'")
    index = item if isinstance(item, int) else gpu_index(item)
    if index is not None:
        if index not in free:
            raise InputError(f"running job '{job.job}': GPU {index} of node {name} is not free")
        free.remove(index)
        return
    if ":" not in item:
        raise InputError(f"running job '{job.job}': {show_value(item)} on node {name} is neither a GPU index "
                         "(digits 0-9, no sign or leading zero) nor a MIG instance 'GPU:profile'")
    gpu_text, _, rest = item.partition(":")
    profile, hash_sign, slot_text = rest.partition("#")
    carved = gpu_index(gpu_text)
    slots = mig.get(carved, []) if carved is not None else []
    if hash_sign:
        slot = gpu_index(slot_text)
        found = slot if slot is not None and slot < len(slots) and slots[slot] == profile else None
    else:
        found = slots.index(profile) if profile and profile in slots else None
    if found is None:
        raise InputError(f"running job '{job.job}': no free MIG instance '{item}' on node {name}")
    # Keep the slot (instance ids stay stable) but mark it taken.
    slots[found] = TAKEN


def host_limit_mib(node: ClusterNode) -> int:
    # Capped so that a node with, say, 1e300 bytes of RAM stays an int64 for CP-SAT.
    return int(min(node.host_ram_bytes * coefficient("host_ram_usable_fraction") // 2**20, MAX_TABLE_MIB))


def nvme_limit_mib(node: ClusterNode) -> int:
    return int(min(node.nvme_bytes * coefficient("nvme_usable_fraction") // 2**20, MAX_TABLE_MIB))


def mib(value: float) -> int:
    return int(min(math.ceil(value / 2**20), MAX_TABLE_MIB)) if math.isfinite(value) else MAX_TABLE_MIB


def fully_free(node: ClusterNode) -> bool:
    """A node a multi-node option may take: every GPU free and the catalog's node size."""
    return len(node.free_gpus) == node.gpus == node.gpu.node.gpus_per_node


def free_instances(node: ClusterNode) -> dict[str, int]:
    """Free MIG instances of each profile on the node."""
    counts: dict[str, int] = defaultdict(int)
    for profiles in node.mig.values():
        for profile in profiles:
            if profile != TAKEN:
                counts[profile] += 1
    return dict(counts)


def fits_node(option, node: ClusterNode) -> bool:
    """Whether the node, empty of other queued jobs, can hold (its share of) the option."""
    if node.gpu.name != option.gpu:
        return False
    if option.mig_profile is not None:
        return free_instances(node).get(option.mig_profile, 0) >= option.instances
    if option.nodes > 1:
        return fully_free(node)
    return len(node.free_gpus) >= option.gpus


def node_shape(node: ClusterNode) -> tuple:
    """What makes two nodes interchangeable for packing: GPU type and size, free GPUs,
    free MIG instances and host capacities (not the node's name or GPU indices)."""
    return (node.gpu.name, node.gpus, len(node.free_gpus), tuple(sorted(free_instances(node).items())),
            host_limit_mib(node), nvme_limit_mib(node))


class NodeShapes:
    """The distinct node shapes of an inventory with their multiplicity: how many nodes can
    hold an option is computed once per shape, not once per node."""

    def __init__(self, nodes) -> None:
        shapes: dict[tuple, list] = {}
        for node in nodes:
            shapes.setdefault(node_shape(node), [node, 0])[1] += 1
        self.representatives = [(node, count) for node, count in shapes.values()]
        self._memo: dict[tuple, int] = {}

    def count_fitting(self, option) -> int:
        key = (option.gpu, option.gpus, option.mig_profile, option.instances, option.nodes)
        if key not in self._memo:
            self._memo[key] = sum(count for node, count in self.representatives if fits_node(option, node))
        return self._memo[key]
