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
"""Largest job weight (assumption: a million-to-one priority is more than any queue needs)."""

MAX_WEIGHT_SPREAD = 1e6
"""The largest weight of a queue may be at most this many times its smallest. Weights are
relative: the packing objective counts each job in steps of 1e-6 of the smallest weight
(so a queue's answer does not change when all its weights are scaled), and this bound
keeps the integer objective within int64 (assumption, as for MAX_JOB_WEIGHT)."""


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

SERVING_JOB_FIELDS = ("context", "min_slots", "max_latency_ms")
TRAINING_JOB_FIELDS = ("seq_len", "global_batch")
ADAPTER_JOB_FIELDS = ("lora_rank",)
"""Job keys that only one kind of workload has: given on another, they would be ignored,
so they are refused (as ``solve`` refuses --context with --workload train)."""


def gpu_index(text: str) -> int | None:
    """A GPU index written as text (a MIG key, a running GPU): ASCII decimal digits without
    sign, spaces or leading zeros, so that '+1', ' 1', '01' and non-ASCII digits are not
    read as GPU 1. None when the text is not such an index."""
    if not isinstance(text, str) or not text.isascii() or not text.isdigit() or (len(text) > 1 and text[0] == "0"):
        return None
    return int(text)


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
    if isinstance(data, dict) and "network" in data:
        raise InputError(f"{source}: 'network' is not used (each GPU type's network bandwidth comes from the hardware catalog); remove it")
    if not isinstance(data, dict) or set(data) - {"nodes"} or "nodes" not in data:
        raise InputError(f"{source}: must be an object with only 'nodes'")
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
            carved = key if isinstance(key, int) and not isinstance(key, bool) else gpu_index(key)
            if carved is None:
                raise InputError(f"{where}.mig: {show_value(key)} is not a GPU index (digits 0-9, no sign or leading zero)")
            if not 0 <= carved < count:
                raise InputError(f"{where}.mig: GPU {carved} does not exist (node has {count})")
            if carved in mig:
                raise InputError(f"{where}.mig lists GPU {carved} twice")
            if not gpu.mig_profiles:
                raise InputError(f"node '{name}': MIG instances on GPU {carved}, but {gpu.name} has no MIG profiles")
            if carved in free:
                raise InputError(f"node '{name}': GPU {carved} is listed both as a free whole GPU and as carved into MIG instances")
            if not isinstance(profiles, list) or not all(isinstance(profile, str) for profile in profiles):
                raise InputError(f"{where}.mig.{key} must be a list of profile names")
            known = {profile.name for profile in gpu.mig_profiles}
            for profile in profiles:
                if profile not in known:
                    raise InputError(f"node '{name}': '{profile}' is not a MIG profile of {gpu.name} ({', '.join(sorted(known))})")
            if not _mig_geometry_ok(gpu, tuple(profiles)):
                raise InputError(f"node '{name}': MIG instances {profiles} on GPU {carved} do not fit one {gpu.name} (MIG placement rules)")
            mig[carved] = tuple(profiles)
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
        workload = values.get("workload", "train")
        if workload not in WORKLOADS:
            raise InputError(f"job '{job_id}': workload {show_value(workload)} is not one of {', '.join(WORKLOADS)}")
        _check_workload_fields(job_id, workload, values)
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
    check_weight_spread(jobs)
    return tuple(jobs)


def check_weight_spread(jobs) -> None:
    """Refuse a queue whose weights span more than MAX_WEIGHT_SPREAD (a typed error)."""
    if not jobs:
        return
    smallest = min(jobs, key=lambda job: job.weight)
    largest = max(jobs, key=lambda job: job.weight)
    # The relative slack keeps a spread of exactly 1e6 (0.1 and 1e-7) on the allowed side of float rounding.
    if not smallest.weight > 0 or largest.weight > MAX_WEIGHT_SPREAD * smallest.weight * (1 + 1e-9):
        raise InputError(
            f"job '{smallest.id}' weight {smallest.weight:g} is below 1/{MAX_WEIGHT_SPREAD:g} of job '{largest.id}' weight "
            f"{largest.weight:g}: weights are relative priorities and may span at most {MAX_WEIGHT_SPREAD:g} to 1")


def _check_workload_fields(job_id: str, workload: str, values: Mapping[str, Any]) -> None:
    other = TRAINING_JOB_FIELDS if workload == "infer" else SERVING_JOB_FIELDS
    if workload not in ("lora", "qlora"):
        other += ADAPTER_JOB_FIELDS
    for key in other:
        if key in values:
            kind = "serving (infer)" if key in SERVING_JOB_FIELDS else "lora/qlora" if key in ADAPTER_JOB_FIELDS else "training"
            raise InputError(f"job '{job_id}': '{key}' is a {kind} field and does not apply to workload {workload}; remove it")


def parse_running(data: Any, nodes: tuple[ClusterNode, ...], source: str = "running") -> tuple[RunningJob, ...]:
    if isinstance(data, dict) and set(data) == {"running"}:
        data = data["running"]
    if not isinstance(data, list):
        raise InputError(f"{source}: must be a list of running jobs")
    by_name = {node.name: node for node in nodes}
    running, ids = [], set()
    for index, item in enumerate(data):
        where = f"{source}: [{index}]"
        if not isinstance(item, dict) or set(item) != {"job", "gpus_by_node"}:
            raise InputError(f"{where} must be an object with exactly 'job' and 'gpus_by_node'")
        if not isinstance(item["job"], str) or not item["job"].strip():
            raise InputError(f"{where}.job must be a non-empty string (the running job's id)")
        if item["job"] in ids:
            raise InputError(f"{source}: running job '{item['job']}' appears twice")
        ids.add(item["job"])
        if not isinstance(item["gpus_by_node"], dict):
            raise InputError(f"{where}.gpus_by_node must map node names to GPU indices or MIG instances")
        for name, used in item["gpus_by_node"].items():
            if name not in by_name:
                raise InputError(f"{where}: unknown node '{name}'")
            if not isinstance(used, list):
                raise InputError(f"{where}.gpus_by_node.{name} must be a list")
        running.append(RunningJob(item["job"], {name: tuple(used) for name, used in item["gpus_by_node"].items()}))
    return tuple(running)
