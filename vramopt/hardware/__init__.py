"""The hardware catalog: GPUs, their MIG profiles and the servers that hold them.

Data lives in ``gpus/<name>.toml`` (one file per GPU, every value with its source); the
strict loader is ``catalog.py``. The parsed catalog is cached once per process and is
immutable, so it is safe to share between threads.

A user's hardware file (``user_file.py``) is merged into a ``HardwareCatalog`` value and
made visible to one call with ``using_hardware(catalog)``: a ``contextvars`` variable, so
the override belongs to the calling thread (and asyncio task) only; other threads calling
the API at the same time keep seeing the built-in catalog. Nothing is stored globally.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from pathlib import Path
from typing import Iterator, Mapping

from vramopt.catalog_files import suggest
from vramopt.hardware.catalog import GPU_DIRECTORY, load_catalog, lookup_table, parse_gpu_file
from vramopt.hardware.user_file import HardwareCatalog, load_hardware_file as _load_hardware_file, merge_hardware
from vramopt.types import GpuSpec

__all__ = [
    "HardwareCatalog", "active_hardware", "all_gpus", "builtin_gpus", "gpu_names", "load_gpu", "load_gpu_file", "load_hardware_file",
    "merge_hardware", "using_hardware",
]

_ACTIVE_HARDWARE: contextvars.ContextVar[HardwareCatalog | None] = contextvars.ContextVar("vramopt_hardware", default=None)


@functools.lru_cache(maxsize=1)
def _builtin_catalog() -> tuple[tuple[GpuSpec, ...], Mapping[str, GpuSpec]]:
    gpus = load_catalog(GPU_DIRECTORY)
    return gpus, lookup_table(gpus)


def _catalog() -> tuple[tuple[GpuSpec, ...], Mapping[str, GpuSpec]]:
    active = _ACTIVE_HARDWARE.get()
    if active is not None:
        return active.gpus, active.by_name
    return _builtin_catalog()


def builtin_gpus() -> tuple[GpuSpec, ...]:
    """The shipped catalog, whatever hardware file is active."""
    return _builtin_catalog()[0]


def load_hardware_file(path: Path | str) -> HardwareCatalog:
    """The built-in catalog merged with a hardware file (docs/hardware.md)."""
    return _load_hardware_file(path, builtin_gpus())


def active_hardware() -> HardwareCatalog | None:
    """The hardware file active in this thread's call, or None for the built-in catalog."""
    return _ACTIVE_HARDWARE.get()


@contextlib.contextmanager
def using_hardware(catalog: HardwareCatalog | None) -> Iterator[None]:
    """Within the block, this thread's catalog look-ups see ``catalog`` (None: built-in)."""
    token = _ACTIVE_HARDWARE.set(catalog)
    try:
        yield
    finally:
        _ACTIVE_HARDWARE.reset(token)


def all_gpus() -> tuple[GpuSpec, ...]:
    """Every GPU of the active catalog (the shipped one unless ``using_hardware``), sorted by name."""
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
