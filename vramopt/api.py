"""The embedding API: requests and responses as dataclasses that round-trip through JSON.

``solve(request)``, ``pareto(request)`` and ``estimate(request)`` accept a request dataclass
or the same dict as the JSON request (docs/api.md, docs/schema/vramopt-request-v1.schema.json)
and return a response whose ``to_dict()`` is exactly the CLI's ``--format json`` output.
No printing, no global state (the catalogs are immutable and cached), safe to call from
several threads, deterministic.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Mapping

from vramopt.api_fields import _build, _coerce, _fail, _plain
from vramopt.errors import InputError, show_value
from vramopt.input_files import check_integers, parse_json
from vramopt.results import SCHEMA
from vramopt.types import SearchSpace, ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload, WORKLOADS, lora_field_error

MAX_REQUEST_BYTES = 1_000_000
"""A request is a few hundred bytes; anything above a megabyte is refused unread."""


def workload_from_dict(data: Any, where: str = "workload"):
    if not isinstance(data, dict):
        raise _fail(where, "must be an object")
    kind = data.get("kind", "train")
    if kind not in WORKLOADS:
        raise _fail(f"{where}.kind", f"'{kind}' is not one of {', '.join(WORKLOADS)}")
    workload = _build(ServingWorkload if kind == "infer" else TrainingWorkload, data, where)
    lora_error = lora_field_error(workload) if isinstance(workload, TrainingWorkload) else None
    if lora_error is not None:
        raise _fail(f"{where}.{lora_error[0]}", lora_error[1])
    return workload


def _check_schema(data: Any, allowed: tuple[str, ...]) -> dict:
    if not isinstance(data, dict):
        raise InputError("request: must be a JSON object")
    unknown = sorted(set(data) - set(allowed), key=str)
    if unknown:
        raise _fail(unknown[0], f"is not a field of this request (known: {', '.join(allowed)})")
    if data.get("schema", SCHEMA) != SCHEMA:
        raise _fail("schema", f"'{data.get('schema')}' is not supported; this vramopt reads '{SCHEMA}'")
    if "workload" not in data:
        raise _fail("workload", "is missing")
    return data


def _hardware_field(data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The request's inline hardware table, checked only for its shape here; the catalog's
    strict loader reads it when the call runs (``hardware_scope``)."""
    hardware = data.get("hardware")
    if hardware is not None and not isinstance(hardware, Mapping):
        raise _fail("hardware", "must be an object holding {\"gpu\": {NAME: {...}}} (docs/hardware.md), not a path")
    return copy.deepcopy(dict(hardware)) if hardware is not None else None


def _hardware_dict(hardware: Mapping[str, Any] | None) -> dict[str, Any]:
    return {} if hardware is None else {"hardware": copy.deepcopy(dict(hardware))}


def hardware_scope(hardware: Mapping[str, Any] | None):
    """A context in which this thread's catalog look-ups see the request's hardware merged
    with the built-in catalog (the built-in catalog alone when ``hardware`` is None)."""
    from pathlib import Path

    from vramopt.hardware import builtin_gpus, merge_hardware, using_hardware

    catalog = None if hardware is None else merge_hardware(hardware, Path("request.hardware"), builtin_gpus())
    return using_hardware(catalog)


@dataclass(frozen=True, slots=True)
class SolveRequest:
    """Find the best plan of ``workload`` within ``space`` (``engine``: cp-sat or exhaustive)."""

    workload: TrainingWorkload | ServingWorkload
    space: SearchSpace = field(default_factory=SearchSpace)
    engine: str = "cp-sat"
    hardware: Mapping[str, Any] | None = None
    """A hardware file's content inline ({"gpu": {NAME: {...}}}, docs/hardware.md); None: built-in."""

    @classmethod
    def from_dict(cls, data: Any) -> "SolveRequest":
        data = _check_schema(data, ("schema", "workload", "space", "engine", "hardware"))
        engine = data.get("engine", "cp-sat")
        if engine not in ("cp-sat", "exhaustive"):
            raise _fail("engine", f"'{engine}' is not cp-sat or exhaustive")
        return cls(workload_from_dict(data["workload"]), _build(SearchSpace, data.get("space", {}), "space"), engine,
                   _hardware_field(data))

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "workload": _plain(self.workload), "space": _plain(self.space), "engine": self.engine,
                **_hardware_dict(self.hardware)}


@dataclass(frozen=True, slots=True)
class ParetoRequest:
    """Every non-dominated plan of ``workload`` within ``space``."""

    workload: TrainingWorkload | ServingWorkload
    space: SearchSpace = field(default_factory=SearchSpace)
    hardware: Mapping[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: Any) -> "ParetoRequest":
        data = _check_schema(data, ("schema", "workload", "space", "hardware"))
        return cls(workload_from_dict(data["workload"]), _build(SearchSpace, data.get("space", {}), "space"), _hardware_field(data))

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "workload": _plain(self.workload), "space": _plain(self.space), **_hardware_dict(self.hardware)}


@dataclass(frozen=True, slots=True)
class EstimateRequest:
    """Evaluate one given ``plan`` of ``workload``."""

    workload: TrainingWorkload | ServingWorkload
    plan: TrainingPlan | ServingPlan
    hardware: Mapping[str, Any] | None = None
    framework: str = "generic"
    """Training only: the framework whose rules and memory accounting apply (docs/frameworks.md)."""

    @classmethod
    def from_dict(cls, data: Any) -> "EstimateRequest":
        data = _check_schema(data, ("schema", "workload", "plan", "hardware", "framework"))
        workload = workload_from_dict(data["workload"])
        if "plan" not in data:
            raise _fail("plan", "is missing")
        plan_class = ServingPlan if isinstance(workload, ServingWorkload) else TrainingPlan
        framework = data.get("framework", "generic")
        if not isinstance(framework, str):
            raise _fail("framework", f"must be a string, got {show_value(framework)}")
        return cls(workload, _build(plan_class, data["plan"], "plan"), _hardware_field(data), framework)

    def to_dict(self) -> dict[str, Any]:
        framework = {"framework": self.framework} if self.framework != "generic" else {}
        return {"schema": SCHEMA, "workload": _plain(self.workload), "plan": _plain(self.plan), **_hardware_dict(self.hardware), **framework}


# ---------------------------------------------------------------------------------------
# Responses


@dataclass(frozen=True, slots=True)
class Response:
    """A v1 response: ``data`` is exactly the CLI's JSON output."""

    data: Mapping[str, Any]

    @classmethod
    def from_dict(cls, data: Any) -> "Response":
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise InputError(f"response: not a '{SCHEMA}' object")
        return cls(copy.deepcopy(data))

    @classmethod
    def from_json(cls, text: str) -> "Response":
        return cls.from_dict(parse_json(text, lambda detail: InputError(f"response: {detail}")))

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.data))

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.data, indent=indent, allow_nan=False)

    @property
    def plan(self) -> Mapping[str, Any] | None:
        return self.data.get("plan")

    @property
    def feasible(self) -> bool:
        return self.data.get("plan") is not None

    def to_frame(self):
        """One row: the plan, memory and throughput as dotted columns (pandas)."""
        import pandas

        return pandas.DataFrame([_flatten(self.data)])


class EstimateResponse(Response):
    __slots__ = ()


class SolveResponse(Response):
    __slots__ = ()

    def runners_up_frame(self):
        import pandas

        rows = [{**_flatten({"plan": runner["plan"]}), "tokens_per_s": runner["tokens_per_s"],
                 "tokens_per_s_loss_fraction": runner["tokens_per_s_loss_fraction"], "changed_field": runner["changed_field"]}
                for runner in self.data.get("runners_up", [])]
        return pandas.DataFrame(rows)


class ParetoResponse(Response):
    __slots__ = ()

    @property
    def plan(self) -> None:
        return None

    @property
    def feasible(self) -> bool:
        return bool(self.data.get("front"))

    def to_frame(self):
        """One row per front point (the CSV of ``vramopt pareto``)."""
        import pandas

        from vramopt.optimizer.front import front_rows_for_csv

        return pandas.DataFrame(front_rows_for_csv(dict(self.data)))


def _flatten(data: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for section in ("plan", "memory", "throughput"):
        for key, value in (data.get(section) or {}).items():
            row[f"{section}.{key}"] = value
    return row


# ---------------------------------------------------------------------------------------
# The three calls


def _request(request: Any, cls: type) -> Any:
    if isinstance(request, cls):
        # A dataclass built by the caller is checked by the same strict reader as a dict.
        request = _as_request_dict(request)
    if isinstance(request, (str, bytes)):
        size = len(request) if isinstance(request, bytes) or len(request) > MAX_REQUEST_BYTES else len(
            request.encode("utf-8", "surrogatepass"))
        if size > MAX_REQUEST_BYTES:
            raise InputError(f"request: {size} bytes, more than the {MAX_REQUEST_BYTES} allowed")
        request = parse_json(request, _request_failure)
    else:
        # A caller's dict may hold integers no check could print (beyond 4,300 digits).
        check_integers(request, _request_failure)
    return cls.from_dict(request)


def _request_failure(detail: str) -> InputError:
    return InputError(f"request: {detail}")


def _as_request_dict(request: Any) -> dict[str, Any]:
    """A request dataclass as the dict its ``from_dict`` reads, values as the caller gave them."""
    data: dict[str, Any] = {"schema": SCHEMA}
    for item in fields(request):
        value = getattr(request, item.name)
        if is_dataclass(value) and not isinstance(value, type):
            value = _plain(value)
        elif isinstance(value, tuple):
            value = list(value)
        data[item.name] = value
    return data


def solve(request: SolveRequest | Mapping[str, Any] | str) -> SolveResponse:
    from vramopt.optimizer.search import solve as solve_plan

    request = _request(request, SolveRequest)
    with hardware_scope(request.hardware):
        return SolveResponse(solve_plan(request.workload, request.space, engine=request.engine).to_dict())


def estimate(request: EstimateRequest | Mapping[str, Any] | str) -> EstimateResponse:
    from vramopt.estimate import estimate_serving, estimate_training

    request = _request(request, EstimateRequest)
    with hardware_scope(request.hardware):
        if isinstance(request.workload, ServingWorkload):
            if request.framework != "generic":
                raise InputError(f"framework {request.framework} applies to training workloads; serving plans export to vLLM")
            return EstimateResponse(estimate_serving(request.workload, request.plan).to_dict())
        return EstimateResponse(estimate_training(request.workload, request.plan, request.framework).to_dict())


def pareto(request: ParetoRequest | Mapping[str, Any] | str) -> ParetoResponse:
    from vramopt.optimizer.front import pareto_response

    request = _request(request, ParetoRequest)
    with hardware_scope(request.hardware):
        return ParetoResponse(pareto_response(request.workload, request.space))


# ---------------------------------------------------------------------------------------
# Packing a queue of jobs onto a cluster


@dataclass(frozen=True, slots=True)
class PackRequest:
    """Admit and place ``jobs`` on ``cluster`` (the same objects as the files of ``vramopt
    pack``: {"nodes": [...]} and a list of jobs), keeping ``running`` placements."""

    cluster: Mapping[str, Any]
    jobs: tuple[Mapping[str, Any], ...]
    running: tuple[Mapping[str, Any], ...] = ()
    time_limit_s: float = 10.0
    workers: int = 4

    @classmethod
    def from_dict(cls, data: Any) -> "PackRequest":
        if isinstance(data, dict) and "workload" in data:
            raise _fail("workload", "is not a field of a pack request (each job names its own workload)")
        data = _check_schema({**data, "workload": None} if isinstance(data, dict) else data,
                             ("schema", "workload", "cluster", "jobs", "running", "time_limit_s", "workers"))
        for key in ("cluster", "jobs"):
            if key not in data:
                raise _fail(key, "is missing")
        time_limit = _coerce(float, data.get("time_limit_s", 10.0), "time_limit_s")
        workers = _coerce(int, data.get("workers", 4), "workers")
        if not 0 < time_limit <= 3600 or not 1 <= workers <= 64:
            raise _fail("time_limit_s", "must be in (0, 3600] seconds, and workers in 1-64")
        if not isinstance(data["jobs"], list) or not isinstance(data.get("running", []), list):
            raise _fail("jobs", "jobs and running must be lists")
        return cls(data["cluster"], tuple(data["jobs"]), tuple(data.get("running", [])), time_limit, workers)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "cluster": copy.deepcopy(dict(self.cluster)), "jobs": [dict(job) for job in self.jobs],
                "running": [dict(item) for item in self.running], "time_limit_s": self.time_limit_s, "workers": self.workers}


class PackResponse(Response):
    __slots__ = ()

    @property
    def plan(self) -> None:
        return None

    @property
    def feasible(self) -> bool:
        return any(placement["admitted"] for placement in self.data["placements"])

    def to_frame(self):
        """One row per job (the CSV of ``vramopt pack``)."""
        import pandas

        from vramopt.display import pack_rows

        return pandas.DataFrame(pack_rows(dict(self.data)))


def pack(request: PackRequest | Mapping[str, Any] | str) -> PackResponse:
    from vramopt.cluster import parse_cluster, parse_jobs, parse_running
    from vramopt.optimizer.pack import solve_pack

    request = _request(request, PackRequest)
    nodes = parse_cluster(request.cluster)
    jobs = parse_jobs(list(request.jobs))
    running = parse_running(list(request.running), nodes) if request.running else ()
    return PackResponse(solve_pack(jobs, nodes, running, time_limit_s=request.time_limit_s, workers=request.workers))
