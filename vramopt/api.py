"""The embedding API: requests and responses as dataclasses that round-trip through JSON.

``solve(request)``, ``pareto(request)`` and ``estimate(request)`` accept a request dataclass
or the same dict as the JSON request (docs/api.md, docs/schema/vramopt-request-v1.schema.json)
and return a response whose ``to_dict()`` is exactly the CLI's ``--format json`` output.
No printing, no global state (the catalogs are immutable and cached), safe to call from
several threads, deterministic.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Mapping

from vramopt.api_fields import _build, _coerce, _fail, _plain
from vramopt.api_responses import EstimateResponse, ParetoResponse, Response, SolveResponse  # noqa: F401 - re-exported
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
    per_stage: bool = False
    """Training: also search one checkpointing per pipeline stage; the response's ``per_stage``
    block (vramopt/stage_checkpointing.py) holds that optimum, the uniform answer stays."""

    @classmethod
    def from_dict(cls, data: Any) -> "SolveRequest":
        data = _check_schema(data, ("schema", "workload", "space", "engine", "hardware", "per_stage"))
        engine = data.get("engine", "cp-sat")
        if engine not in ("cp-sat", "exhaustive"):
            raise _fail("engine", f"'{engine}' is not cp-sat or exhaustive")
        per_stage = _coerce(bool, data.get("per_stage", False), "per_stage")
        if per_stage and engine != "cp-sat":
            raise _fail("per_stage", "is searched by CP-SAT; the exhaustive engine is the oracle over uniform plans")
        return cls(workload_from_dict(data["workload"]), _build(SearchSpace, data.get("space", {}), "space"), engine,
                   _hardware_field(data), per_stage)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "workload": _plain(self.workload), "space": _plain(self.space), "engine": self.engine,
                **_hardware_dict(self.hardware), **({"per_stage": True} if self.per_stage else {})}


@dataclass(frozen=True, slots=True)
class ParetoRequest:
    """Every non-dominated plan of ``workload`` within ``space``."""

    workload: TrainingWorkload | ServingWorkload
    space: SearchSpace = field(default_factory=SearchSpace)
    hardware: Mapping[str, Any] | None = None
    axes: str = "throughput"
    """'throughput' (tokens/s, GPUs, memory) or 'time,cost' (the time-money front: the space's
    total_tokens for training and usd_per_gpu_hour; docs/cost.md)."""

    @classmethod
    def from_dict(cls, data: Any) -> "ParetoRequest":
        data = _check_schema(data, ("schema", "workload", "space", "hardware", "axes"))
        axes = data.get("axes", "throughput")
        if axes not in ("throughput", "time,cost"):
            raise _fail("axes", f"'{axes}' is not throughput or time,cost")
        return cls(workload_from_dict(data["workload"]), _build(SearchSpace, data.get("space", {}), "space"), _hardware_field(data),
                   axes)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "workload": _plain(self.workload), "space": _plain(self.space), **_hardware_dict(self.hardware),
                **({} if self.axes == "throughput" else {"axes": self.axes})}


@dataclass(frozen=True, slots=True)
class EstimateRequest:
    """Evaluate one given ``plan`` of ``workload``."""

    workload: TrainingWorkload | ServingWorkload
    plan: TrainingPlan | ServingPlan
    hardware: Mapping[str, Any] | None = None
    total_tokens: int | None = None
    """Training kinds: the token budget whose days, GPU-hours and dollars ``time_and_cost`` gives."""
    usd_per_gpu_hour: Mapping[str, float] | None = None
    """GPU type -> US dollars per GPU-hour (over the built-in H800 price)."""
    framework: str = "generic"
    """Training only: the framework whose rules and memory accounting apply (docs/frameworks.md)."""
    stage_checkpointing: tuple[str, ...] | None = None
    """Training with pipeline stages: one checkpointing per stage, first to last (none, selective,
    every:K, block:N); the response's ``per_stage`` block evaluates it (vramopt/stage_checkpointing.py)."""

    @classmethod
    def from_dict(cls, data: Any) -> "EstimateRequest":
        data = _check_schema(data, ("schema", "workload", "plan", "hardware", "total_tokens", "usd_per_gpu_hour", "framework",
                                    "stage_checkpointing"))
        workload = workload_from_dict(data["workload"])
        if "plan" not in data:
            raise _fail("plan", "is missing")
        plan_class = ServingPlan if isinstance(workload, ServingWorkload) else TrainingPlan
        total_tokens = data.get("total_tokens")
        if total_tokens is not None:
            total_tokens = _coerce(int, total_tokens, "total_tokens")
        prices = data.get("usd_per_gpu_hour")
        if prices is not None:
            prices = _coerce(Mapping[str, float], prices, "usd_per_gpu_hour")
        serving = isinstance(workload, ServingWorkload)
        if serving and total_tokens is not None:
            raise _fail("total_tokens", "does not apply to a serving workload (give usd_per_gpu_hour for money per token)")
        if not serving and prices is not None and total_tokens is None:
            raise _fail("usd_per_gpu_hour", "needs total_tokens for a training workload (the cost of what?)")
        framework = data.get("framework", "generic")
        if not isinstance(framework, str):
            raise _fail("framework", f"must be a string, got {show_value(framework)}")
        stages = data.get("stage_checkpointing")
        if stages is not None:
            from vramopt.stage_checkpointing import parse_stage_checkpointing

            if serving:
                raise _fail("stage_checkpointing", "applies to training plans with pipeline stages")
            if not isinstance(stages, list):
                raise _fail("stage_checkpointing", f"must be a list of strings, one per pipeline stage, got {show_value(stages)}")
            try:
                stages = parse_stage_checkpointing(stages)
            except InputError as error:
                raise _fail("stage_checkpointing", str(error)) from None
        return cls(workload, _build(plan_class, data["plan"], "plan"), _hardware_field(data), total_tokens, prices, framework, stages)

    def to_dict(self) -> dict[str, Any]:
        framework = {"framework": self.framework} if self.framework != "generic" else {}
        return {"schema": SCHEMA, "workload": _plain(self.workload), "plan": _plain(self.plan), **_hardware_dict(self.hardware),
                **({} if self.total_tokens is None else {"total_tokens": self.total_tokens}),
                **({} if self.usd_per_gpu_hour is None else {"usd_per_gpu_hour": dict(self.usd_per_gpu_hour)}), **framework,
                **({} if self.stage_checkpointing is None else {"stage_checkpointing": list(self.stage_checkpointing)})}


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

    from vramopt.prices import space_prices
    from vramopt.time_cost import attach_time_and_cost

    request = _request(request, SolveRequest)
    space = request.space
    with hardware_scope(request.hardware):
        if request.per_stage:
            from vramopt.stage_checkpointing import check_per_stage_request

            check_per_stage_request(request.workload, space)
        data = solve_plan(request.workload, space, engine=request.engine).to_dict()
        if request.per_stage:
            from vramopt.stage_checkpointing import add_searched_stages

            add_searched_stages(data, request.workload, space)
        # The money of the plan and its runners-up: total_tokens (training) or prices (serving).
        attach_time_and_cost(data, space.total_tokens, space_prices(space.usd_per_gpu_hour), bool(space.usd_per_gpu_hour))
        return SolveResponse(data)


def estimate(request: EstimateRequest | Mapping[str, Any] | str) -> EstimateResponse:
    from vramopt.estimate import estimate_serving, estimate_training

    from vramopt.optimizer.cost_objective import check_cost_space
    from vramopt.prices import space_prices
    from vramopt.time_cost import attach_time_and_cost

    request = _request(request, EstimateRequest)
    prices = dict(request.usd_per_gpu_hour or {})
    with hardware_scope(request.hardware):
        # The same checks as a solve's space (token range, known GPUs, prices at least 0).
        check_cost_space(SearchSpace(total_tokens=request.total_tokens, usd_per_gpu_hour=prices), request.workload)
        if isinstance(request.workload, ServingWorkload):
            if request.framework != "generic":
                raise InputError(f"framework {request.framework} applies to training workloads; serving plans export to vLLM")
            data = estimate_serving(request.workload, request.plan).to_dict()
        else:
            estimated = estimate_training(request.workload, request.plan, request.framework)
            data = estimated.to_dict()
            if request.stage_checkpointing is not None:
                from vramopt.stage_checkpointing import add_stage_plan

                add_stage_plan(data, request.workload, estimated.plan, request.stage_checkpointing, request.framework)
        attach_time_and_cost(data, request.total_tokens, space_prices(prices), bool(prices))
        return EstimateResponse(data)


def pareto(request: ParetoRequest | Mapping[str, Any] | str) -> ParetoResponse:
    from vramopt.optimizer.front import pareto_response

    request = _request(request, ParetoRequest)
    with hardware_scope(request.hardware):
        if request.axes == "time,cost":
            from vramopt.optimizer.cost_front import cost_front_response

            if not isinstance(request.workload, ServingWorkload) and request.space.total_tokens is None:
                raise _fail("space.total_tokens", "is needed by axes time,cost for training (the days and dollars of what?)")
            return ParetoResponse(cost_front_response(request.workload, request.space))
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
    hardware: Mapping[str, Any] | None = None
    """A hardware file's content inline: cluster nodes may name its GPUs and profiles."""
    usd_per_gpu_hour: Mapping[str, float] | None = None
    """GPU type -> US dollars per GPU-hour, every GPU type of the cluster: the least-money
    answer among those of the most value, and its dollars per hour (pack_prices)."""
    objective: str = "throughput"
    """'throughput' (weighted normalized throughput) or 'cost' (needs usd_per_gpu_hour: the
    most job weight admitted at the least money per hour)."""
    framework: str = "generic"
    """The framework whose rules and memory accounting every training job's plans keep
    (docs/frameworks.md); serving jobs keep vLLM's."""

    @classmethod
    def from_dict(cls, data: Any) -> "PackRequest":
        if isinstance(data, dict) and "workload" in data:
            raise _fail("workload", "is not a field of a pack request (each job names its own workload)")
        data = _check_schema({**data, "workload": None} if isinstance(data, dict) else data,
                             ("schema", "workload", "cluster", "jobs", "running", "time_limit_s", "workers", "hardware",
                              "usd_per_gpu_hour", "objective", "framework"))
        for key in ("cluster", "jobs"):
            if key not in data:
                raise _fail(key, "is missing")
        time_limit = _coerce(float, data.get("time_limit_s", 10.0), "time_limit_s")
        workers = _coerce(int, data.get("workers", 4), "workers")
        if not 0 < time_limit <= 3600 or not 1 <= workers <= 64:
            raise _fail("time_limit_s", "must be in (0, 3600] seconds, and workers in 1-64")
        if not isinstance(data["jobs"], list) or not isinstance(data.get("running", []), list):
            raise _fail("jobs", "jobs and running must be lists")
        prices = data.get("usd_per_gpu_hour")
        if prices is not None:
            prices = _coerce(Mapping[str, float], prices, "usd_per_gpu_hour")
            for name, price in prices.items():
                if price < 0:
                    raise _fail(f"usd_per_gpu_hour.{name}", f"must be at least 0, got {price!r}")
        objective = data.get("objective", "throughput")
        if objective not in ("throughput", "cost"):
            raise _fail("objective", f"'{objective}' is not throughput or cost")
        framework = data.get("framework", "generic")
        if not isinstance(framework, str):
            raise _fail("framework", f"must be a string, got {show_value(framework)}")
        return cls(data["cluster"], tuple(data["jobs"]), tuple(data.get("running", [])), time_limit, workers,
                   _hardware_field(data), prices, objective, framework)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "cluster": copy.deepcopy(dict(self.cluster)), "jobs": [dict(job) for job in self.jobs],
                "running": [dict(item) for item in self.running], "time_limit_s": self.time_limit_s, "workers": self.workers,
                **_hardware_dict(self.hardware),
                **({} if self.usd_per_gpu_hour is None else {"usd_per_gpu_hour": dict(self.usd_per_gpu_hour)}),
                **({} if self.objective == "throughput" else {"objective": self.objective}),
                **({} if self.framework == "generic" else {"framework": self.framework})}


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
    with hardware_scope(request.hardware):
        nodes = parse_cluster(request.cluster)
        jobs = parse_jobs(list(request.jobs))
        running = parse_running(list(request.running), nodes) if request.running else ()
        return PackResponse(solve_pack(jobs, nodes, running, time_limit_s=request.time_limit_s, workers=request.workers,
                                       usd_per_gpu_hour=request.usd_per_gpu_hour, objective=request.objective,
                                       framework=request.framework))
