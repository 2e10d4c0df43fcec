"""What the training and the serving problems share: the integer tables the engines read
(``ItemTable``, ``Problem``), the tick and bound arithmetic, the space checks and the GPU
types searched.

Training (``optimizer/problem.py``) and serving (``optimizer/serving_problem.py``) are two
reductions of a request to one ``Problem`` through the same interface,
``build_<kind>_problem(workload, space) -> Problem``; both import this module and neither
imports the other (``problem.build_problem`` dispatches through ``problem.REDUCTIONS``,
``optimizer/reductions.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vramopt.constraints import registry
from vramopt.costs.columns import PlanColumns
from vramopt.costs.inference import QUANTIZATIONS
from vramopt.errors import InputError
from vramopt.estimate import check_headroom
from vramopt.hardware import load_gpu
from vramopt.optimizer.ticks import MAX_BOUND_TICKS, bound_in_ticks  # noqa: F401 (re-exported: callers import them from here)
from vramopt.types import MAX_COUNT, OBJECTIVES, PRECISIONS, GpuSpec, ModelSpec, SearchSpace, TrainingWorkload

TICKS_PER_BEST_STEP = 1_000_000
"""Time resolution: one tick is a millionth of the fastest conceivable step of the space,
so rounding changes the objective by at most ~1e-6 relative (documented integer scaling)."""

MAX_TABLE_ROWS = 8_000_000
"""Largest key x item table built: a bigger space is refused with a clear message instead of
exhausting memory. Measured: 0.99 GB peak resident memory (``/usr/bin/time -v``) for
DeepSeek-V3 on 2,048 H800 (74,471 layouts x 96 activation items = 7.1M rows), the cost model
running on the well-formed rows only."""


def check_table_size(keys: int, items: int, what: str) -> None:
    if keys * items > MAX_TABLE_ROWS:
        raise InputError(
            f"the {what} search space has {keys:,} layouts x {items:,} technique combinations = {keys * items:,} rows, "
            f"more than the {MAX_TABLE_ROWS:,} vramopt evaluates; narrow it with --max-gpus, --pin or --allow"
        )


MAX_WORKERS = 64
"""Most CP-SAT worker threads a request may ask for (the CLI's --workers range)."""



KEY_COLUMNS = tuple(name for name in PlanColumns.__dataclass_fields__ if name in registry.KEY_FIELDS)
"""A training key's columns: the key fields' columns, in ``PlanColumns``' order (which is also
the order of the runner-ups' differences); the serving keys are
``serving_problem.SERVING_KEY_COLUMNS``."""


@dataclass(frozen=True, slots=True)
class ItemTable:
    """One group's items (state or activation) against every key."""

    values: tuple[dict[str, Any], ...]
    """Plan-field values of each item, in the fixed tie-break order."""
    valid: np.ndarray
    """[keys, items] bool: the item is well formed for the key (and fits host/NVMe)."""
    memory_mib: np.ndarray
    time_ticks: np.ndarray
    memory_bytes: np.ndarray
    time_s: np.ndarray


@dataclass(frozen=True, slots=True)
class Problem:
    workload: TrainingWorkload
    space: SearchSpace
    model: ModelSpec
    gpus: tuple[GpuSpec, ...]
    keys: dict[str, np.ndarray]
    """Key columns (KEY_COLUMNS) plus 'gpu_index', each an array over keys in tie-break order."""
    constant_bytes: np.ndarray
    budget_mib: np.ndarray
    """Per key: floor(capacity*(1-headroom)) - ceil(logits + reserve), in MiB."""
    capacity_bytes: np.ndarray
    """Per key: the memory of one GPU (or of one MIG instance when serving on MIG)."""
    state: ItemTable
    activation: ItemTable
    tick_s: float
    bound_ticks: int | None
    """min-gpus objective: the step-time bound in ticks that reaches min_tokens_per_s."""
    choices: dict = field(repr=False)
    kind: str = "train"
    """'train' (any training kind) or 'infer'."""
    gpu_price_units: tuple[int, ...] = ()
    """Objectives cost and cost-per-token: each GPU type's integer price (optimizer/cost_objective.py)."""
    interaction: Any = None
    """The declared state x activation term (``optimizer/interaction.Interaction``), or None."""

    @property
    def key_count(self) -> int:
        return len(self.budget_mib)

    def gpu_of(self, key: int) -> GpuSpec:
        return self.gpus[int(self.keys["gpu_index"][key])]

    def keys_with(self, field: str, value) -> np.ndarray:
        """Mask over keys: the key decides ``field`` as ``value`` (the columnar twin of
        ``key_values(key)[field] == value``, for the runner-up masks over thousands of keys)."""
        if field == "gpu":
            return np.array([gpu.name == value for gpu in self.gpus])[self.keys["gpu_index"]]
        encodings = {"precision": PRECISIONS, "quantization": QUANTIZATIONS}
        if field in encodings and field in self.keys:
            return self.keys[field] == encodings[field].index(value) if value in encodings[field] else np.zeros(self.key_count, bool)
        if field in self.keys and field != "mig_profile":
            return self.keys[field] == value
        return np.array([self.key_values(key)[field] == value for key in range(self.key_count)], dtype=bool)

    def key_values(self, key: int) -> dict[str, Any]:
        gpu = self.gpu_of(key)
        if self.kind == "infer":
            mig = int(self.keys["mig_profile"][key])
            return {
                "gpus": int(self.keys["gpus"][key]),
                "tensor_parallel": int(self.keys["tensor_parallel"][key]),
                "expert_parallel": int(self.keys["expert_parallel"][key]) if "expert_parallel" in self.keys else 1,
                "pipeline_parallel": int(self.keys["pipeline_parallel"][key]),
                "quantization": QUANTIZATIONS[int(self.keys["quantization"][key])],
                "mig_profile": gpu.mig_profiles[mig].name if mig >= 0 else "none",
                "gpu": gpu.name,
            }
        values = {name: int(self.keys[name][key]) for name in KEY_COLUMNS}
        values["precision"] = PRECISIONS[values["precision"]]
        values["gpu"] = gpu.name
        return values


def check_space(space: SearchSpace, workload) -> None:
    check_headroom(workload.headroom_fraction)
    sizes = [("max_gpus", space.max_gpus), ("workers", space.workers)]
    if isinstance(workload, TrainingWorkload):
        sizes += [("seq_len", workload.seq_len), ("global_batch", workload.global_batch)]
    for name, value in sizes:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
            raise InputError(f"{name} must be an integer from 1 to {MAX_COUNT:,}, got {value!r}")
    if space.workers > MAX_WORKERS:
        raise InputError(f"workers {space.workers} is above the supported {MAX_WORKERS}")
    if space.max_gpus > 1_048_576:
        raise InputError(f"max_gpus {space.max_gpus} is above the supported 1,048,576")
    if not (isinstance(space.time_limit_s, (int, float)) and math.isfinite(space.time_limit_s) and 0 < space.time_limit_s <= 3600):
        raise InputError(f"time limit must be a number of seconds in (0, 3600], got {space.time_limit_s!r}")
    if space.workers > 64:
        raise InputError(f"workers must be at most 64, got {space.workers}")
    if space.objective not in OBJECTIVES:
        raise InputError(f"objective '{space.objective}' is not one of {', '.join(OBJECTIVES)}")
    if space.objective == "min-gpus":
        # A serving workload with a request rate or clients is its own target (docs/serving.md).
        served_load = getattr(workload, "rate_per_s", None) is not None or getattr(workload, "concurrency", None) is not None
        if space.min_tokens_per_s is None and not served_load:
            raise InputError("objective min-gpus needs --min-tokens-per-s, a positive number"
                             + (" (or, serving, a request --rate or --concurrency)" if getattr(workload, "kind", "") == "infer" else ""))
        if space.min_tokens_per_s is not None and (not math.isfinite(space.min_tokens_per_s) or space.min_tokens_per_s <= 0):
            raise InputError("objective min-gpus needs --min-tokens-per-s, a positive number")
    elif space.min_tokens_per_s is not None:
        raise InputError("--min-tokens-per-s is only used with --objective min-gpus")
    if not space.gpus:
        raise InputError("at least one GPU type is needed (--gpu)")
    from vramopt.optimizer.cost_objective import check_cost_space  # the money fields' own checks

    check_cost_space(space, workload)


def gpu_types(space: SearchSpace, choices) -> tuple[GpuSpec, ...]:
    """The GPU types searched: the space's list, narrowed by allow/pin/forbid on 'gpu'.

    A GPU named in allow or pin but not in the space's list is an error, not a silent
    widening (the CLI fills --gpu from --allow/--pin gpu when --gpu is not given)."""
    searched: list[GpuSpec] = []
    for name in space.gpus:
        gpu = load_gpu(name)
        if gpu not in searched:
            searched.append(gpu)
    for kind in ("allow", "pin"):
        if "gpu" in choices[kind]:
            wanted = {load_gpu(name).name for name in choices[kind]["gpu"]}
            outside = sorted(wanted - {gpu.name for gpu in searched})
            if outside:
                raise InputError(
                    f"--{kind} gpu={','.join(outside)} names a GPU type outside the searched ones "
                    f"({', '.join(gpu.name for gpu in searched)}); add it with --gpu"
                )
            searched = [gpu for gpu in searched if gpu.name in wanted]
    forbidden = {load_gpu(name).name for name in choices["forbid"].get("gpu", ())}
    resolved = [gpu for gpu in searched if gpu.name not in forbidden]
    if not resolved:
        raise InputError("no GPU type left after --forbid gpu=...")
    return tuple(resolved)
