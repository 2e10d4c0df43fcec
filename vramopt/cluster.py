"""Cluster inventory and job queue for ``vramopt pack`` (JSON or TOML), strictly parsed.

Cluster: ``{"nodes": [{"name": "n01", "gpu": "h100", "gpus": 8, "free_gpus": [0, ..., 7],
"mig": {"3": ["1g.10gb", "1g.10gb"]}, "host_ram_bytes": ..., "nvme_bytes": ...}]}``. A GPU
listed under ``mig`` is in MIG mode and its listed instances are free to use; it cannot also
be a free whole GPU. Host RAM and NVMe default to the catalog's node defaults.
Jobs: a list of ``{"id", "model", "workload", "weight", "min_tokens_per_s", "max_gpus",
...}`` with every option ``solve`` takes (docs/pack.md). Running jobs: ``{"job",
"gpus_by_node": {"n01": [0, 1], "n02": ["3:1g.10gb", ...]}}``: their GPUs and instances
are taken out of the free inventory.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from vramopt.catalog_files import MAX_CATALOG_FILE_BYTES, read_toml
from vramopt.errors import CatalogError, InputError, show_value
from vramopt.input_files import display_path, parse_json, read_bounded
from vramopt.hardware import load_gpu
from vramopt.types import MAX_COUNT, WORKLOADS, GpuSpec

MAX_JOB_WEIGHT = 1e6
"""Largest job weight: weights are relative priorities, and the packing objective sums
weight x normalized throughput in millionths as int64 (assumption: a million-to-one
priority is more than any queue needs)."""


@dataclass(frozen=True, slots=True)
class ClusterNode:
    name: str
    gpu: GpuSpec
    gpus: int
    free_gpus: tuple[int, ...]
    mig: Mapping[int, tuple[str, ...]]
    """GPU index -> free MIG instances carved on it (profile names)."""
    host_ram_bytes: float
    nvme_bytes: float


@dataclass(frozen=True, slots=True)
class PackJob:
    id: str
    model: str
    workload: str = "train"
    weight: float = 1.0
    min_tokens_per_s: float | None = None
    max_gpus: int | None = None
    seq_len: int = 4096
    global_batch: int = 1024
    context: int = 8192
    headroom_fraction: float = 0.10
    lora_rank: int = 16
    min_slots: int = 1
    max_latency_ms: float | None = None
    pin: Mapping[str, str] = field(default_factory=dict)
    allow: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    forbid: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunningJob:
    job: str
    gpus_by_node: Mapping[str, tuple[Any, ...]]


JOB_FIELDS = tuple(PackJob.__slots__)


def read_document(path: str) -> Any:
    """JSON or TOML (by extension), size-bounded, with errors that name the file; a key
    given twice or an integer too large to use is refused (vramopt.input_files)."""
    file = Path(path)
    if file.suffix.lower() == ".toml":
        try:
            return read_toml(file)
        except CatalogError as error:
            raise InputError(str(error)) from None

    def fail(detail: str) -> InputError:
        return InputError(f"{display_path(path)}: {detail}")

    return parse_json(read_bounded(file, MAX_CATALOG_FILE_BYTES, fail), fail)


def _integer(value: Any, where: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{where} must be an integer >= {minimum}, got {show_value(value)}")
    return value


def _number(value: Any, where: str, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum:
        raise InputError(f"{where} must be a finite number >= {minimum:g}, got {value!r}")
    return float(value)


def _mig_geometry_ok(gpu: GpuSpec, profiles: tuple[str, ...]) -> bool:
    """Whether these instances can coexist on one GPU: place the widest first on the
    placement start slots the MIG user guide allows, backtracking (at most 8 slices)."""
    by_name = {profile.name: profile for profile in gpu.mig_profiles}
    widths = sorted((by_name[name] for name in profiles), key=lambda profile: -profile.memory_slices)
    compute = sum(by_name[name].compute_slices for name in profiles)
    if compute > 7:
        return False

    def place(index: int, used: frozenset) -> bool:
        if index == len(widths):
            return True
        profile = widths[index]
        for start in profile.placement_starts:
            slots = frozenset(range(start, start + profile.memory_slices))
            if not slots & used and place(index + 1, used | slots):
                return True
        return False

    return place(0, frozenset())


def parse_cluster(data: Any, source: str = "cluster") -> tuple[ClusterNode, ...]:
    if not isinstance(data, dict) or set(data) - {"nodes", "network"} or "nodes" not in data:
        raise InputError(f"{source}: must be an object with 'nodes' (and optionally 'network')")
    if data.get("network"):
        raise InputError(f"{source}: 'network' is not used yet (each GPU type's network bandwidth comes from the hardware catalog); remove it")
    if not isinstance(data["nodes"], list) or not data["nodes"]:
        raise InputError(f"{source}: 'nodes' must be a non-empty list")
    nodes, names = [], set()
    allowed = {"name", "gpu", "gpus", "free_gpus", "mig", "host_ram_bytes", "nvme_bytes"}
    for index, item in enumerate(data["nodes"]):
        where = f"{source}: nodes[{index}]"
        if not isinstance(item, dict):
            raise InputError(f"{where} must be an object")
        unknown = sorted(set(item) - allowed, key=str)
        if unknown:
            raise InputError(f"{where}: unknown key '{unknown[0]}' (known: {', '.join(sorted(allowed))})")
        for key in ("name", "gpu", "gpus"):
            if key not in item:
                raise InputError(f"{where}: missing key '{key}'")
        name = item["name"]
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"{where}.name must be a non-empty string")
        if name in names:
            raise InputError(f"{source}: node name '{name}' appears twice")
        names.add(name)
        if not isinstance(item["gpu"], str):
            raise InputError(f"{where}.gpu must be a GPU name")
        gpu = load_gpu(item["gpu"])
        count = _integer(item["gpus"], f"{where}.gpus", 1)
        if count > 1024:
            raise InputError(f"{where}.gpus {count} is more than 1,024 GPUs in one node")
        free = item.get("free_gpus", list(range(count)))
        if not isinstance(free, list):
            raise InputError(f"{where}.free_gpus must be a list of GPU indices")
        free = tuple(_integer(value, f"{where}.free_gpus", 0) for value in free)
        if len(set(free)) != len(free):
            raise InputError(f"{where}.free_gpus lists a GPU twice")
        if len(free) > count or any(value >= count for value in free):
            raise InputError(f"node '{name}' lists {len(free)} free GPUs {list(free)} but has only {count} (indices 0-{count - 1})")
        mig_raw = item.get("mig", {})
        if not isinstance(mig_raw, dict):
            raise InputError(f"{where}.mig must map a GPU index to a list of MIG profiles")
        mig: dict[int, tuple[str, ...]] = {}
        for key, profiles in mig_raw.items():
            try:
                gpu_index = int(key)
            except (TypeError, ValueError):
                raise InputError(f"{where}.mig: '{key}' is not a GPU index") from None
            if not 0 <= gpu_index < count:
                raise InputError(f"{where}.mig: GPU {gpu_index} does not exist (node has {count})")
            if not gpu.mig_profiles:
                raise InputError(f"node '{name}': MIG instances on GPU {gpu_index}, but {gpu.name} has no MIG profiles")
            if gpu_index in free:
                raise InputError(f"node '{name}': GPU {gpu_index} is listed both as a free whole GPU and as carved into MIG instances")
            if not isinstance(profiles, list) or not all(isinstance(profile, str) for profile in profiles):
                raise InputError(f"{where}.mig.{key} must be a list of profile names")
            known = {profile.name for profile in gpu.mig_profiles}
            for profile in profiles:
                if profile not in known:
                    raise InputError(f"node '{name}': '{profile}' is not a MIG profile of {gpu.name} ({', '.join(sorted(known))})")
            if not _mig_geometry_ok(gpu, tuple(profiles)):
                raise InputError(f"node '{name}': MIG instances {profiles} on GPU {gpu_index} do not fit one {gpu.name} (MIG placement rules)")
            mig[gpu_index] = tuple(profiles)
        host = _number(item.get("host_ram_bytes", gpu.node.host_ram_bytes), f"{where}.host_ram_bytes")
        nvme = _number(item.get("nvme_bytes", gpu.node.nvme_capacity_bytes), f"{where}.nvme_bytes")
        nodes.append(ClusterNode(name, gpu, count, tuple(sorted(free)), mig, host, nvme))
    return tuple(nodes)


def parse_jobs(data: Any, source: str = "jobs") -> tuple[PackJob, ...]:
    if isinstance(data, dict) and set(data) == {"jobs"}:
        data = data["jobs"]  # TOML has no top-level arrays: [[jobs]]
    if not isinstance(data, list) or not data:
        raise InputError(f"{source}: must be a non-empty list of jobs")
    jobs, ids = [], set()
    for index, item in enumerate(data):
        where = f"{source}: jobs[{index}]"
        if not isinstance(item, dict):
            raise InputError(f"{where} must be an object")
        unknown = sorted(set(item) - set(JOB_FIELDS), key=str)
        if unknown:
            raise InputError(f"{where}: unknown key '{unknown[0]}' (known: {', '.join(JOB_FIELDS)})")
        for key in ("id", "model"):
            if key not in item:
                raise InputError(f"{where}: missing key '{key}'")
        job_id = item["id"]
        if not isinstance(job_id, str) or not job_id.strip():
            raise InputError(f"{where}.id must be a non-empty string")
        if job_id in ids:
            raise InputError(f"{source}: duplicate job id '{job_id}'")
        ids.add(job_id)
        values = dict(item)
        if values.get("workload", "train") not in WORKLOADS:
            raise InputError(f"job '{job_id}': workload '{values.get('workload')}' is not one of {', '.join(WORKLOADS)}")
        for key in ("max_gpus", "seq_len", "global_batch", "context", "lora_rank", "min_slots"):
            if key in values and values[key] is not None:
                if _integer(values[key], f"job '{job_id}' {key}", 1) > MAX_COUNT:
                    raise InputError(f"job '{job_id}' {key} {values[key]} is above {MAX_COUNT:,}")
        for key in ("weight", "min_tokens_per_s", "max_latency_ms", "headroom_fraction"):
            if key in values and values[key] is not None:
                _number(values[key], f"job '{job_id}' {key}")
        if "weight" in values and not 0 < values["weight"] <= MAX_JOB_WEIGHT:
            raise InputError(f"job '{job_id}' weight must be positive and at most {MAX_JOB_WEIGHT:g}, got {values['weight']!r}")
        if not isinstance(values["model"], str):
            raise InputError(f"job '{job_id}' model must be a name")
        for key in ("pin", "allow", "forbid"):
            if key in values and not isinstance(values[key], dict):
                raise InputError(f"job '{job_id}' {key} must map plan fields to values")
        values["pin"] = {key: str(value) for key, value in values.get("pin", {}).items()}
        for key in ("allow", "forbid"):
            values[key] = {field_name: tuple(str(item) for item in (entries if isinstance(entries, list) else [entries]))
                           for field_name, entries in values.get(key, {}).items()}
        if "weight" in values:
            values["weight"] = float(values["weight"])
        jobs.append(PackJob(**values))
    return tuple(jobs)


def parse_running(data: Any, nodes: tuple[ClusterNode, ...], source: str = "running") -> tuple[RunningJob, ...]:
    if isinstance(data, dict) and set(data) == {"running"}:
        data = data["running"]
    if not isinstance(data, list):
        raise InputError(f"{source}: must be a list of running jobs")
    by_name = {node.name: node for node in nodes}
    running = []
    for index, item in enumerate(data):
        where = f"{source}: [{index}]"
        if not isinstance(item, dict) or set(item) - {"job", "gpus_by_node"} or "gpus_by_node" not in item:
            raise InputError(f"{where} must be an object with 'job' and 'gpus_by_node'")
        if not isinstance(item["gpus_by_node"], dict):
            raise InputError(f"{where}.gpus_by_node must map node names to GPU indices or MIG instances")
        for name, used in item["gpus_by_node"].items():
            if name not in by_name:
                raise InputError(f"{where}: unknown node '{name}'")
            if not isinstance(used, list):
                raise InputError(f"{where}.gpus_by_node.{name} must be a list")
        running.append(RunningJob(str(item.get("job", f"running-{index}")), {name: tuple(used) for name, used in item["gpus_by_node"].items()}))
    return tuple(running)
