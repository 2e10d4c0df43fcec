"""vramopt: the highest-throughput combination of GPU memory techniques under a VRAM
headroom rule.

The public API is what this module re-exports; everything else is internal. The library
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

from vramopt.errors import CatalogError, InfeasibleError, InputError, UnknownNameError, VramoptError
from vramopt.estimate import estimate_training
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.results import SCHEMA, TrainingEstimate
from vramopt.types import SearchSpace, TrainingPlan, TrainingWorkload

try:
    __version__ = _metadata.version("vramopt")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree without installing
    __version__ = "0+unknown"

__all__ = [
    "SCHEMA",
    "CatalogError",
    "InfeasibleError",
    "InputError",
    "SearchSpace",
    "TrainingEstimate",
    "TrainingPlan",
    "TrainingWorkload",
    "UnknownNameError",
    "VramoptError",
    "__version__",
    "estimate_training",
    "load_gpu",
    "load_model",
]
