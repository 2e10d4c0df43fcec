"""vramopt: the highest-throughput combination of GPU memory techniques under a VRAM
headroom rule.

The public API is what this module re-exports; everything else is internal. For
schedulers: ``vramopt.solve(request)``, ``vramopt.pareto(request)`` and
``vramopt.estimate(request)`` take a request dataclass or its JSON dict (docs/api.md).
(``vramopt.estimate`` is that function; the module of the same name is reached as
``from vramopt.estimate import estimate_training``.) The library
never prints and keeps no global state; results are plain dataclasses whose ``to_dict()``
is the versioned JSON contract "vramopt/v1" (docs/json-contract.md).

>>> from vramopt import TrainingPlan, TrainingWorkload, estimate_training
>>> estimate = estimate_training(TrainingWorkload(model="70b", seq_len=8192, global_batch=32),
...                              TrainingPlan(gpu="b200", gpus=4, zero_stage=3, checkpointing="every:4", offload="cpu"))
>>> estimate.fits
True
"""

from __future__ import annotations

from importlib import metadata as _metadata

from vramopt.errors import CatalogError, InfeasibleError, InputError, Interrupted, UnknownNameError, VramoptError
from vramopt.optimizer.cancel import Cancellation, cancellable
from vramopt.estimate import estimate_serving, estimate_training
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.results import SCHEMA, ServingEstimate, TrainingEstimate
from vramopt.types import SearchSpace, ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload
from vramopt.api import (
    EstimateRequest,
    EstimateResponse,
    PackRequest,
    PackResponse,
    ParetoRequest,
    ParetoResponse,
    Response,
    SolveRequest,
    SolveResponse,
    pack,
    pareto,
    solve,
)
from vramopt.api import estimate  # noqa: E402 - the function deliberately shadows the vramopt.estimate module

try:
    __version__ = _metadata.version("vramopt")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree without installing
    __version__ = "0+unknown"

__all__ = [
    "SCHEMA",
    "EstimateRequest",
    "EstimateResponse",
    "PackRequest",
    "PackResponse",
    "pack",
    "ParetoRequest",
    "ParetoResponse",
    "Response",
    "ServingEstimate",
    "ServingPlan",
    "ServingWorkload",
    "SolveRequest",
    "SolveResponse",
    "estimate",
    "estimate_serving",
    "pareto",
    "solve",
    "Cancellation",
    "CatalogError",
    "InfeasibleError",
    "InputError",
    "Interrupted",
    "SearchSpace",
    "TrainingEstimate",
    "TrainingPlan",
    "TrainingWorkload",
    "UnknownNameError",
    "VramoptError",
    "__version__",
    "cancellable",
    "estimate_training",
    "load_gpu",
    "load_model",
]
