"""Strict TOML reading shared by the hardware and model catalogs.

Every quantity in a catalog file is written as ``key_UNIT = { value = X, source = "..." }``
where the key's suffix names the unit (see ``units.SUFFIX_FACTORS``); the loader converts
it to the internal unit once, here. Unknown or missing keys raise ``CatalogError`` naming
the file and the key.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

from vramopt.errors import CatalogError, UnknownNameError
from vramopt.input_files import MAX_INTEGER_BITS, check_integers, decode_utf8, display_path, read_bounded
from vramopt.units import SUFFIX_FACTORS

MAX_CATALOG_FILE_BYTES = 1_000_000
"""Catalog and config files are small; refuse anything larger rather than parse it."""


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file, bounded in size; tomllib already refuses a key given twice."""

    def fail(detail: str) -> CatalogError:
        return CatalogError(f"{display_path(path)}: {detail}")

    text = decode_utf8(read_bounded(path, MAX_CATALOG_FILE_BYTES, fail), fail)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise fail(f"not valid TOML ({error})") from None
    except RecursionError:
        raise fail("not valid TOML (nested too deeply)") from None
    except ValueError:  # tomllib's int() of more than 4,300 digits
        raise fail(f"not valid TOML (an integer too long; integers from 2**{MAX_INTEGER_BITS} up are refused)") from None
    check_integers(document, fail)
    return document


class TableReader:
    """Reads one TOML table, remembering which keys were used so leftovers are rejected."""

    def __init__(self, table: Mapping[str, Any], path: Path, where: str = "") -> None:
        if not isinstance(table, Mapping):
            raise CatalogError(f"{path}: {where or 'top level'} must be a table")
        self.table = table
        self.path = path
        self.where = where
        self.used: set[str] = set()

    def _key(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def error(self, key: str, message: str) -> CatalogError:
        return CatalogError(f"{self.path}: key '{self._key(key)}' {message}")

    def has(self, key: str) -> bool:
        return key in self.table

    def raw(self, key: str, default: Any = ..., kind: type | tuple[type, ...] | None = None) -> Any:
        if key not in self.table:
            if default is ...:
                raise self.error(key, "is missing")
            return default
        self.used.add(key)
        value = self.table[key]
        if kind is not None:
            # bool is an int in Python; never accept it where a number is meant.
            numeric = kind in (int, float, (int, float))
            if not isinstance(value, kind) or (numeric and isinstance(value, bool)):
                raise self.error(key, f"has the wrong type ({type(value).__name__})")
        return value

    def text(self, key: str, default: Any = ...) -> str:
        value = self.raw(key, default, str)
        if isinstance(value, str) and not value.strip() and default is ...:
            raise self.error(key, "is empty")
        return value

    def integer(self, key: str, default: Any = ..., minimum: int | None = 0) -> int:
        value = self.raw(key, default, int)
        if minimum is not None and isinstance(value, int) and value < minimum:
            raise self.error(key, f"must be at least {minimum}, got {value}")
        return value

    def boolean(self, key: str, default: Any = ...) -> bool:
        return self.raw(key, default, bool)

    def strings(self, key: str, default: Any = ...) -> tuple[str, ...]:
        value = self.raw(key, default, list)
        if not all(isinstance(item, str) for item in value):
            raise self.error(key, "must be a list of strings")
        return tuple(value)

    def sub(self, key: str, default: Any = ...) -> "TableReader | None":
        value = self.raw(key, default, dict)
        if value is None:
            return None
        return TableReader(value, self.path, self._key(key))

    def quantity(self, stem: str, units: Iterable[str], minimum: float = 0.0) -> tuple[float, str]:
        """Read ``stem_UNIT = {value, source}`` for exactly one of the allowed units.

        Returns the value in the internal unit and its source.
        """
        units = tuple(units)
        present = [unit for unit in units if f"{stem}{unit}" in self.table]
        if not present:
            names = " or ".join(f"'{self._key(stem + unit)}'" for unit in units)
            raise CatalogError(f"{self.path}: {names} is missing")
        if len(present) > 1:
            raise self.error(f"{stem}{present[1]}", f"duplicates '{self._key(stem + present[0])}'")
        key = f"{stem}{present[0]}"
        value, source = self.sourced(key)
        if value < minimum:
            raise self.error(key, f"must be at least {minimum}, got {value}")
        return value * SUFFIX_FACTORS[present[0]], source

    def sourced(self, key: str) -> tuple[float, str]:
        """Read ``key = { value = X, source = "..." }``: a number and a non-empty source."""
        entry = self.raw(key, ..., dict)
        inner = TableReader(entry, self.path, self._key(key))
        value = inner.raw("value", ..., (int, float))
        source = inner.text("source")
        inner.finish()
        return float(value), source

    def finish(self) -> None:
        """Reject keys nobody read: a typo must not be silently ignored."""
        unknown = sorted(set(self.table) - self.used)
        if unknown:
            raise self.error(unknown[0], "is not a known key")


def suggest(name: str, known: Iterable[str], noun: str) -> UnknownNameError:
    """An error for an unknown name that lists the closest known names."""
    known = sorted(set(known))
    close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(known[:12])}{' ...' if len(known) > 12 else ''}"
    return UnknownNameError(f"unknown {noun} '{name}'{hint}")
