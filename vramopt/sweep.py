"""Sweeps: one solve per cell of a grid (models x workloads x GPU types x max-GPU values x
sequence lengths), one result row per cell, in a fixed order.

``solve_cell`` is the one function every backend runs (in-process, a local process pool,
or Ray tasks), so the rows do not depend on the backend. Each cell is solved with one
CP-SAT worker: the objective orders every tie (tokens/s, then fewer GPUs, more headroom, a
fixed order of choices), so a solve proven optimal has exactly one answer, and a row holds
no wall-clock figure; the rows, and the files written from them, are then byte-identical
between runs and backends. A cell whose solve stops at its time limit before proving
optimality says so in its ``status`` (``feasible`` or ``unknown``); only such a cell may
differ between runs.

Nothing here prints: progress goes to the caller's ``on_progress(done, total)``.
"""

from __future__ import annotations

import collections
import itertools
import signal
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from vramopt.errors import InputError, Interrupted, UnknownNameError, VramoptError, show_value
from vramopt.types import MAX_COUNT, WORKLOADS, SearchSpace, ServingWorkload, TrainingWorkload

AXES = ("models", "workloads", "gpus", "max_gpus", "seq_lens")
"""The grid's axes, outermost first: the cell order is their product in this order."""

MAX_GPUS_LIMIT = 1_048_576
"""The largest --max-gpus `vramopt solve` takes."""

DEFAULT_SEQ_LEN = 0
"""A seq_lens value meaning "the workload's own default": 4,096 tokens per training
sequence (TrainingWorkload.seq_len), an 8,192-token serving context (ServingWorkload.context),
each shortened to the model's context when that is shorter (GPT-3 and OPT: 2,048)."""

COLUMNS = (
    # The cell.
    "model", "workload", "gpu", "max_gpus", "seq_len", "required_headroom_fraction",
    # The answer.
    "feasible", "status",
    # The plan (training fields are empty for serving rows and the other way round).
    "gpus", "nodes", "tensor_parallel", "pipeline_parallel", "data_parallel", "zero_stage", "checkpointing",
    "precision", "offload", "micro_batch", "quantization", "kv_cache_dtype", "slots", "mig_profile", "replicas",
    # Its figures.
    "tokens_per_s", "tokens_per_s_per_gpu", "latency_per_token_ms", "memory_per_gpu_bytes", "capacity_bytes",
    "headroom_fraction",
    # Why there is no plan.
    "binding_constraint", "reason",
)
"""The columns of a sweep row, in file order."""

KEY_COLUMNS = COLUMNS[:6]
"""The columns that name a row's cell (the headroom too: --resume with another --headroom
must not keep rows solved under the old one)."""

TRAINING_PLAN_COLUMNS = ("data_parallel", "zero_stage", "checkpointing", "precision", "offload", "micro_batch")
SERVING_PLAN_COLUMNS = ("quantization", "kv_cache_dtype", "slots", "mig_profile", "replicas")


@dataclass(frozen=True, slots=True)
class Cell:
    """One point of the grid: the inputs of one solve (names as the catalogs spell them)."""

    model: str
    workload: str
    gpu: str
    max_gpus: int
    seq_len: int
    """Training: tokens per sequence; serving (infer): the context (prompt plus output)."""
    headroom_fraction: float = 0.10
    time_limit_s: float = 10.0

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """The cell's identity as its CSV row spells it (``--resume`` matches on it)."""
        return (self.model, self.workload, self.gpu, str(self.max_gpus), str(self.seq_len), repr(float(self.headroom_fraction)))


@dataclass(frozen=True, slots=True)
class SweepGrid:
    """The axes of a sweep (tuples, in the order given) and the settings every cell shares.

    ``seq_lens`` holds 0 for "the workload's default" (DEFAULT_SEQ_LEN). Names are checked
    against the catalogs and replaced by their catalog spelling (``70b`` becomes
    ``llama-3.1-70b``); an empty axis, an unknown name or a value given twice is an
    ``InputError`` naming the axis and the value.
    """

    models: tuple[str, ...]
    gpus: tuple[str, ...]
    workloads: tuple[str, ...] = ("train",)
    max_gpus: tuple[int, ...] = (8,)
    seq_lens: tuple[int, ...] = (DEFAULT_SEQ_LEN,)
    headroom_fraction: float = 0.10
    time_limit_s: float = 10.0

    def __post_init__(self) -> None:
        from vramopt.hardware import load_gpu
        from vramopt.models import load_model, model_names

        catalog = set(model_names())

        def model_name(value: str) -> str:
            spec = load_model(value)
            if spec.name not in catalog:
                raise InputError(f"'{value}' is not a catalog model (a sweep takes catalog names; see `vramopt models`)")
            return spec.name

        def workload(value: str) -> str:
            if value not in WORKLOADS:
                raise InputError(f"'{value}' is not one of {', '.join(WORKLOADS)}")
            return value

        def count(maximum: int, allow_default: bool) -> Callable[[Any], int]:
            def check(value: Any) -> int:
                low = 0 if allow_default else 1
                if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= maximum:
                    raise InputError(f"{show_value(value)} is not an integer from {low} to {maximum:,}")
                return value
            return check

        checks: dict[str, Callable[[Any], Any]] = {
            "models": model_name, "workloads": workload, "gpus": lambda value: load_gpu(value).name,
            "max_gpus": count(MAX_GPUS_LIMIT, False), "seq_lens": count(MAX_COUNT, True),
        }
        for axis in AXES:
            values = getattr(self, axis)
            if isinstance(values, (str, bytes)) or not isinstance(values, (tuple, list)):
                raise InputError(f"sweep axis {axis}: must be a list of values, got {show_value(values)}")
            if not values:
                raise InputError(f"sweep axis {axis} is empty: give at least one value")
            resolved = []
            for value in values:
                if axis in ("models", "workloads", "gpus") and not isinstance(value, str):
                    raise InputError(f"sweep axis {axis}: {show_value(value)} is not a name")
                try:
                    resolved.append(checks[axis](value))
                except (InputError, UnknownNameError) as error:
                    raise InputError(f"sweep axis {axis}: {error}") from None
            repeated = [item for index, item in enumerate(resolved) if item in resolved[:index]]
            if repeated:
                raise InputError(f"sweep axis {axis} lists {repeated[0]} twice")
            object.__setattr__(self, axis, tuple(resolved))
        if not 0.0 <= self.headroom_fraction < 1.0:
            raise InputError(f"sweep headroom must be in [0, 1), got {show_value(self.headroom_fraction)}")
        if not 0.001 <= self.time_limit_s <= 3600.0:
            raise InputError(f"sweep time limit must be from 0.001 to 3600 s, got {show_value(self.time_limit_s)}")

    @property
    def size(self) -> int:
        size = 1
        for axis in AXES:
            size *= len(getattr(self, axis))
        return size


def cells(grid: SweepGrid) -> Iterator[Cell]:
    """Every cell, models outermost, then workloads, GPU types, max-GPU values and sequence
    lengths, each axis in the order given: the order of the output rows. A seq_lens 0
    becomes the workload's default length, at most the model's context."""
    from vramopt.models import load_model

    for model, workload, gpu, max_gpus, seq_len in itertools.product(*(getattr(grid, axis) for axis in AXES)):
        if seq_len == DEFAULT_SEQ_LEN:
            default = ServingWorkload(model=model).context if workload == "infer" else TrainingWorkload(model=model).seq_len
            seq_len = min(default, load_model(model).max_context)
        yield Cell(model, workload, gpu, max_gpus, seq_len, grid.headroom_fraction, grid.time_limit_s)


def solve_cell(cell: Cell) -> dict[str, Any]:
    """The row of one cell (every key of COLUMNS; None where a field does not apply).

    A cell the solver cannot take (a sequence longer than the model's context, say) is a
    row too, with status ``invalid`` and the reason; ``Interrupted`` is raised, not kept."""
    from vramopt.api import SolveRequest, solve

    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(model=cell.model, workload=cell.workload, gpu=cell.gpu, max_gpus=cell.max_gpus, seq_len=cell.seq_len,
               required_headroom_fraction=float(cell.headroom_fraction))
    if cell.workload == "infer":
        workload: Any = ServingWorkload(model=cell.model, context=cell.seq_len, headroom_fraction=cell.headroom_fraction)
    else:
        workload = TrainingWorkload(model=cell.model, seq_len=cell.seq_len, headroom_fraction=cell.headroom_fraction,
                                    kind=cell.workload)
    space = SearchSpace(gpus=(cell.gpu,), max_gpus=cell.max_gpus, time_limit_s=cell.time_limit_s, workers=1)
    try:
        data = solve(SolveRequest(workload, space)).to_dict()
    except Interrupted:
        raise
    except VramoptError as error:
        row.update(feasible=False, status="invalid", reason=" ".join(str(error).split()))
        return row
    row["status"] = data["solver"]["status"]
    plan = data.get("plan")
    row["feasible"] = plan is not None
    if plan is None:
        explanation = data.get("explanation") or {}
        row["binding_constraint"] = explanation.get("binding_constraint")
        row["reason"] = " ".join((explanation.get("reason") or (
            f"no plan found within the {cell.time_limit_s:g} s time limit (solver status {row['status']})")).split())
        return row
    memory, throughput = data["memory"], data["throughput"]
    plan_columns = SERVING_PLAN_COLUMNS if cell.workload == "infer" else TRAINING_PLAN_COLUMNS
    for name in ("gpus", "nodes", "tensor_parallel", "pipeline_parallel", *plan_columns):
        row[name] = plan[name]
    row["tokens_per_s"] = throughput["tokens_per_s"]
    row["tokens_per_s_per_gpu"] = throughput["tokens_per_s"] / plan["gpus"]
    row["latency_per_token_ms"] = throughput.get("latency_per_token_ms")
    row["memory_per_gpu_bytes"] = memory["total_bytes"]
    row["capacity_bytes"] = memory["capacity_bytes"]
    row["headroom_fraction"] = memory["headroom_fraction"]
    return row


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the parent, which stops them (no worker tracebacks)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _local_rows(pending: list[Cell], workers: int) -> Iterator[dict[str, Any]]:
    workers = min(workers, len(pending))  # no process without a cell to solve
    if workers <= 1:
        for cell in pending:
            yield solve_cell(cell)
        return
    import multiprocessing

    # spawn, not fork: the parent may hold threads (the CLI's interrupt watcher, OR-Tools).
    pool = multiprocessing.get_context("spawn").Pool(workers, initializer=_ignore_sigint)
    finished = False
    try:
        yield from pool.imap(solve_cell, pending, chunksize=1)
        finished = True
    finally:
        if finished:
            pool.close()
        else:
            pool.terminate()  # interrupted or abandoned: stop the cells in flight now
        pool.join()


def _ray_rows(pending: list[Cell], address: str | None, window: int) -> Iterator[dict[str, Any]]:
    import ray

    started = False
    if not ray.is_initialized():
        try:
            ray.init(address=None if address in (None, "local") else address, include_dashboard=False,
                     log_to_driver=False, logging_level="ERROR")
        except (ConnectionError, ValueError, RuntimeError) as error:
            raise InputError(f"cannot start or reach the Ray cluster {address!r}: {' '.join(str(error).split())}") from None
        started = True
    remote = ray.remote(num_cpus=1)(solve_cell)
    in_flight: collections.deque = collections.deque()
    queue = iter(pending)
    try:
        for cell in itertools.islice(queue, window):
            in_flight.append(remote.remote(cell))
        while in_flight:
            row = ray.get(in_flight.popleft())
            following = next(queue, None)
            if following is not None:
                in_flight.append(remote.remote(following))
            yield row
    finally:
        for reference in in_flight:
            ray.cancel(reference, force=True)
        if started:
            ray.shutdown()


def run_sweep(grid: SweepGrid, *, workers: int = 1, ray_address: str | None = None,
              on_progress: Callable[[int, int], None] | None = None,
              done_keys: Iterable[tuple[str, ...]] = ()) -> Iterator[dict[str, Any]]:
    """The rows of every cell not in ``done_keys``, in cell order (a generator; the
    arguments are checked now, the cells solved as it is iterated).

    ``workers``: 1 solves in this process, more spreads the cells over that many local
    processes. ``ray_address`` (``local``: a Ray instance started here, ``auto``: the
    running cluster, or a cluster address; an already initialized Ray is used as it is)
    sends each cell to Ray as a task instead. ``on_progress(done, total)`` is called after
    each row, ``total`` counting the cells this run solves."""
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 1024:
        raise InputError(f"sweep workers must be an integer from 1 to 1,024, got {show_value(workers)}")
    if ray_address is not None:
        try:
            import ray  # noqa: F401 - missing Ray is reported before any work
        except ImportError:
            raise InputError("--ray needs Ray, which is not installed: pip install 'vramopt[sweep]'") from None
    return _sweep_rows(grid, workers, ray_address, on_progress, {tuple(key) for key in done_keys})


def _sweep_rows(grid: SweepGrid, workers: int, ray_address: str | None, on_progress: Callable[[int, int], None] | None,
                skip: set[tuple[str, ...]]) -> Iterator[dict[str, Any]]:
    pending = [cell for cell in cells(grid) if cell.key not in skip]
    total = len(pending)
    if ray_address is not None:
        rows = _ray_rows(pending, ray_address, window=max(64, 4 * workers))
    else:
        rows = _local_rows(pending, workers)
    try:
        for done, row in enumerate(rows, start=1):
            if on_progress is not None:
                on_progress(done, total)
            yield row
    finally:
        rows.close()  # a caller that stops early (Ctrl-C) stops the pool or the Ray tasks now
