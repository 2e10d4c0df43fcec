"""The hardware catalog: GPUs, their MIG profiles and the servers that hold them.

Data lives in ``gpus/<name>.toml`` (one file per GPU, every value with its source); the
strict loader is ``catalog.py``. The parsed catalog is cached once per process and is
immutable, so it is safe to share between threads.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Mapping

from vramopt.catalog_files import suggest
from vramopt.hardware.catalog import GPU_DIRECTORY, load_catalog, lookup_table, parse_gpu_file
from vramopt.types import GpuSpec

__all__ = ["all_gpus", "gpu_names", "load_gpu", "load_gpu_file"]


@functools.lru_cache(maxsize=1)
def _catalog() -> tuple[tuple[GpuSpec, ...], Mapping[str, GpuSpec]]:
    gpus = load_catalog(GPU_DIRECTORY)
    return gpus, lookup_table(gpus)


def all_gpus() -> tuple[GpuSpec, ...]:
    """Every GPU of the shipped catalog, sorted by name."""
    return _catalog()[0]


def gpu_names() -> tuple[str, ...]:
    """Catalog names (not aliases), sorted."""
    return tuple(gpu.name for gpu in all_gpus())


def load_gpu(name: str) -> GpuSpec:
    """The catalog GPU called ``name`` or carrying it as an alias (case-insensitive).

    Raises ``UnknownNameError`` listing the closest known names when there is none.
    """
    _, by_name = _catalog()
    gpu = by_name.get(name.strip().lower())
    if gpu is None:
        raise suggest(name, by_name.keys(), "GPU")
    return gpu


def load_gpu_file(path: Path | str) -> GpuSpec:
    """Read a GPU file outside the catalog (same strict rules; not cached)."""
    return parse_gpu_file(Path(path))
