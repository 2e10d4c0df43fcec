"""Rules on a key x item table, evaluated once per distinct combination of the columns they read.

A group's table (``problem._evaluate_group``) holds every key with every item, so the
distinct values that any set of columns takes over its rows are exactly the product of the
keys' distinct values of the key columns among them and the items' distinct values of the
item columns among them. A rule (message -> mask, a function of the columns it reads) is
therefore evaluated on that product and read back per row: exact, and for most rules a few
hundred or thousand rows instead of the table's hundreds of thousands (the layout's rules
read key columns only: one row per distinct key; the virtual-stage rule reads the pipeline
columns and one item column).

Which columns a rule reads is recorded while it runs (``ColumnReads``), starting from none
and repeated on the product of what it read until it reads nothing new: a column read only
for some values is read on the product too, since the product holds every combination of
the values of the columns read that the table holds.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np


class ColumnReads:
    """A stand-in for ``PlanColumns`` that records the columns read (``read``)."""

    __slots__ = ("_values", "_size", "read")

    def __init__(self, values: Mapping[str, np.ndarray], size: int) -> None:
        self._values = values
        self._size = size
        self.read: set[str] = set()

    def __getattr__(self, name: str):
        try:
            value = self._values[name]
        except KeyError:
            raise AttributeError(name) from None
        self.read.add(name)
        return value

    def __len__(self) -> int:
        return self._size

    def column_names(self) -> tuple[str, ...]:
        self.read.update(self._values)
        return tuple(self._values)


class _ProductColumns(Mapping):
    """The columns of the product of some keys and some items, each built when first read
    (a rule reads a few of the table's columns)."""

    def __init__(self, grid: "KeyItemGrid", key_first: np.ndarray, item_first: np.ndarray) -> None:
        self._grid, self._key_first, self._item_first = grid, key_first, item_first
        self._built: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        built = self._built.get(name)
        if built is None:
            grid, keys, items = self._grid, len(self._key_first), len(self._item_first)
            if name in grid.key_codes:
                built = np.repeat(grid.key_codes[name][self._key_first], items)
            elif name in grid.item_codes:
                built = np.tile(grid.item_codes[name][self._item_first], keys)
            elif name in grid.constant_codes:
                built = np.full(keys * items, grid.constant_codes[name], dtype=np.int64)
            else:
                raise KeyError(name)
            self._built[name] = built
        return built

    def __iter__(self):
        grid = self._grid
        return iter({**dict.fromkeys(grid.key_codes), **dict.fromkeys(grid.item_codes), **dict.fromkeys(grid.constant_codes)})

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _factorized(column: np.ndarray) -> tuple[np.ndarray, int]:
    """(index of each row's value among the column's distinct values, how many there are)."""
    values, inverse = np.unique(column, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), len(values)


def _groups(factors: list[tuple[np.ndarray, int]], size: int) -> tuple[np.ndarray, np.ndarray]:
    """(group of each row, first row of each group) of the rows' combinations of the
    factorized columns (mixed radix, renumbered before it could overflow)."""
    if not factors:
        return np.zeros(size, dtype=np.int64), np.zeros(1 if size else 0, dtype=np.int64)
    combined, radix = np.zeros(size, dtype=np.int64), 1
    for inverse, count in factors:
        if radix * count >= 2**62:
            values, combined = np.unique(combined, return_inverse=True)
            combined, radix = combined.reshape(-1).astype(np.int64), len(values)
        combined = combined * count + inverse
        radix *= count
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    return inverse.reshape(-1), first


def row_groups(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(group of each row, first row of each group) of the rows of equal-length integer
    columns, groups numbered in the rows' lexicographic order: what
    ``np.unique(np.stack(columns, axis=1), axis=0, return_index=True, return_inverse=True)``
    gives, from one sort per column and one of the combined codes instead of a sort of the
    rows as byte strings (several times slower on the key tables)."""
    size = len(columns[0]) if columns else 0
    return _groups([_factorized(np.asarray(column)) for column in columns], size)


class KeyItemGrid:
    """The columns of a key x item table as per-key, per-item and constant codes."""

    def __init__(self, keys: int, items: int, key_codes: Mapping[str, np.ndarray], item_codes: Mapping[str, np.ndarray],
                 constant_codes: Mapping[str, int]) -> None:
        self.keys, self.items = keys, items
        self.key_codes, self.item_codes, self.constant_codes = key_codes, item_codes, constant_codes
        self._groups: dict[tuple, tuple] = {}
        self._factors: dict[tuple, tuple] = {}

    def _factor(self, codes: Mapping[str, np.ndarray], name: str) -> tuple[np.ndarray, int]:
        cached = self._factors.get((id(codes), name))
        if cached is None:
            cached = self._factors[(id(codes), name)] = _factorized(codes[name])
        return cached

    def _side(self, codes: Mapping[str, np.ndarray], names: tuple[str, ...], size: int):
        cached = self._groups.get((id(codes), names))
        if cached is None:
            cached = _groups([self._factor(codes, name) for name in names], size)
            self._groups[(id(codes), names)] = cached
        return cached

    def broken(self, rule: Callable[[ColumnReads], Mapping[str, object]]) -> np.ndarray:
        """[keys, items] bool: the rows that break any of the rule's masks."""
        reads: set[str] = set()
        while True:
            key_group, key_first = self._side(self.key_codes, tuple(sorted(reads & self.key_codes.keys())), self.keys)
            item_group, item_first = self._side(self.item_codes, tuple(sorted(reads & self.item_codes.keys())), self.items)
            rows = len(key_first) * len(item_first)
            columns = ColumnReads(_ProductColumns(self, key_first, item_first), rows)
            masks = rule(columns)
            if columns.read <= reads:
                break
            reads |= columns.read
        broken = np.zeros(rows, dtype=bool)
        for mask in masks.values():
            broken |= np.broadcast_to(np.asarray(mask, dtype=bool), (rows,))
        return broken.reshape(len(key_first), len(item_first))[key_group][:, item_group]
