"""A user's hardware file: GPUs and node profiles added to, or overriding, the built-in catalog.

The file holds one or more ``[gpu.NAME]`` tables written with exactly the keys of a catalog
file (``vramopt/hardware/gpus/*.toml``; every quantity ``key_UNIT = { value, source }``):

- NAME is a built-in GPU's name: the table overrides only the keys it gives; every other key
  keeps the built-in value and source. ``[gpu.NAME.node]`` and ``[gpu.NAME.peak_dense_tflops]``
  override key by key too; any other value (a ``{value, source}`` pair, a list) is replaced
  whole, so an overridden value never keeps the built-in source. Writing a quantity in
  another unit (``runtime_memory_mib`` for a built-in ``runtime_memory_gib``) replaces it.
- NAME is new: either the table gives every key of a catalog file, or ``based_on = "h100"``
  starts it from that built-in GPU (its aliases are not inherited) and the table overrides
  keys as above: this is how a node profile of one's own cluster is written.

The merged table is read by the catalog's own strict loader, so unknown keys, missing keys,
missing units and impossible values are refused naming the file and the key
(``CatalogError``). Nothing is global: the result is a ``HardwareCatalog`` value that the
caller activates for one call with ``vramopt.hardware.using_hardware``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from vramopt.catalog_files import read_toml
from vramopt.errors import CatalogError
from vramopt.hardware.catalog import GPU_DIRECTORY, lookup_table, parse_gpu_table
from vramopt.input_files import display_path
from vramopt.types import GpuSpec
from vramopt.units import SUFFIX_FACTORS

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
"""GPU names as the catalog spells them: lower case, digits, '.', '_' and '-'."""

MERGED_TABLES = ("node", "peak_dense_tflops")
"""Sub-tables overridden key by key; every other value is replaced whole."""

_UNITS_LONGEST_FIRST = sorted(SUFFIX_FACTORS, key=len, reverse=True)
_UNIT_TAILS = ("_per_gpu",)


@dataclass(frozen=True)
class HardwareCatalog:
    """The GPUs one call sees: the built-in catalog merged with a user's hardware file."""

    gpus: tuple[GpuSpec, ...]
    by_name: Mapping[str, GpuSpec]
    origin: str
    """The file (or "request") the additions and overrides came from."""
    changed: tuple[str, ...]
    """Names of the GPUs the file added or overrode, sorted."""


def _quantity_stem(key: str) -> str | None:
    """``runtime_memory`` for ``runtime_memory_gib``; ``network`` + tail for
    ``network_gbit_per_s_per_gpu``; None for a key without a unit suffix."""
    tail = next((tail for tail in _UNIT_TAILS if key.endswith(tail)), "")
    body = key[: len(key) - len(tail)] if tail else key
    for unit in _UNITS_LONGEST_FIRST:
        if body.endswith(unit) and len(body) > len(unit):
            return body[: -len(unit)] + "|" + tail
    return None


def _merge(base: Mapping[str, Any], override: Mapping[str, Any], merge_sub_tables: bool, shown: str, where: str) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        stem = _quantity_stem(key)
        if stem is None and key not in base:
            written = [other for other in base if _quantity_stem(other) in (f"{key}|", f"{key.removesuffix('_per_gpu')}|_per_gpu")]
            if written:
                raise CatalogError(f"{shown}: key '{where}.{key}' has no unit: write it with its unit suffix, as in '{written[0]}'")
        if stem is not None:
            # The same quantity in another unit replaces the base entry instead of clashing.
            for other in [other for other in merged if other != key and _quantity_stem(other) == stem]:
                del merged[other]
        if merge_sub_tables and key in MERGED_TABLES and isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value, False, shown, f"{where}.{key}")
        else:
            merged[key] = value
    return merged


def _builtin_document(name: str) -> dict[str, Any]:
    return read_toml(GPU_DIRECTORY / f"{name}.toml")


def merge_hardware(document: Mapping[str, Any], path: Path, builtin: tuple[GpuSpec, ...]) -> HardwareCatalog:
    """The built-in GPUs with ``document``'s ``[gpu.NAME]`` tables added or applied."""
    shown = display_path(path) if isinstance(path, Path) else str(path)

    def fail(detail: str) -> CatalogError:
        return CatalogError(f"{shown}: {detail}")

    unknown = sorted(set(document) - {"gpu"})
    if unknown:
        raise fail(f"key '{unknown[0]}' is not a known key (a hardware file holds [gpu.NAME] tables)")
    tables = document.get("gpu")
    if not isinstance(tables, Mapping) or not tables:
        raise fail("key 'gpu' is missing or empty (a hardware file holds one or more [gpu.NAME] tables)")
    builtin_names = {gpu.name for gpu in builtin}
    by_name = {gpu.name: gpu for gpu in builtin}
    for name, table in tables.items():
        where = f"gpu.{name}"
        if not NAME_PATTERN.match(name):
            raise fail(f"table '{where}': the name must be lower case letters, digits, '.', '_' or '-' (at most 64)")
        if not isinstance(table, Mapping):
            raise fail(f"key '{where}' must be a table")
        table = dict(table)
        based_on = table.pop("based_on", None)
        if name in builtin_names:
            if based_on is not None:
                raise fail(f"key '{where}.based_on' is only for a new GPU; '{name}' is built in and the table overrides it")
            base = _builtin_document(name)
        elif based_on is not None:
            if not isinstance(based_on, str) or based_on not in builtin_names:
                known = ", ".join(sorted(builtin_names))
                raise fail(f"key '{where}.based_on' must name a built-in GPU ({known}), got {based_on!r}")
            base = {key: value for key, value in _builtin_document(based_on).items() if key not in ("aliases", "name")}
        else:
            base = {}
        merged = _merge(base, table, True, shown, where)
        merged.setdefault("name", name)
        by_name[name] = parse_gpu_table(merged, Path(shown), where, name, "the table name")
    gpus = tuple(sorted(by_name.values(), key=lambda gpu: gpu.name))
    owners: dict[str, str] = {}
    for gpu in gpus:
        for lookup_name in (gpu.name.lower(), *(alias.lower() for alias in gpu.aliases)):
            other = owners.get(lookup_name)
            if other is not None and other != gpu.name:
                raise fail(f"GPU '{gpu.name}': the name or alias '{lookup_name}' is already used by '{other}'")
            owners[lookup_name] = gpu.name
    return HardwareCatalog(gpus=gpus, by_name=lookup_table(gpus), origin=shown, changed=tuple(sorted(tables)))


def load_hardware_file(path: Path | str, builtin: tuple[GpuSpec, ...]) -> HardwareCatalog:
    """Read a hardware file strictly (bounded size, TOML) and merge it with ``builtin``."""
    path = Path(path)
    return merge_hardware(read_toml(path), path, builtin)
