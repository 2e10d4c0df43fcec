"""Evaluate a vectorized function once per distinct input row and spread the results back.

A serving table is a product of layouts and items (slots, KV dtype, paged or not, ...), and
much of the request-level model depends on only a few of those columns: the step time at
a given load does not depend on the slots or on paging, so 71 slot values share one
fixed-point computation. ``evaluate_once_per_row`` finds the distinct rows of the inputs
(their exact float64 bits, hashed and then compared bit for bit, so a hash collision only
costs the sharing, never a wrong value) and calls the function on those rows alone. The
function must be elementwise over rows: each output row depends only on the same input
row, so evaluating a subset gives exactly the values of the full evaluation.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
"""Odd 64-bit multiplier of the row hash (the golden-ratio constant of Fibonacci hashing,
Knuth, The Art of Computer Programming vol. 3, section 6.4)."""


def distinct_rows(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """(index of one row per distinct row, each row's position in that index), or None when
    every row is distinct. Rows are equal when every array holds the same float64 bits."""
    bits = [np.ascontiguousarray(array, dtype=np.float64).view(np.uint64) for array in arrays]
    size = bits[0].size
    # Columns equal on every row separate no rows: neither hashed nor checked.
    varying = [column for column in bits if not (column == column[0]).all()]
    if not varying:
        return np.zeros(1, dtype=np.intp), np.zeros(size, dtype=np.intp)
    key = np.zeros(size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in varying:
            np.bitwise_xor(key, column, out=key)
            np.multiply(key, _MULTIPLIER, out=key)
            np.bitwise_xor(key, key >> np.uint64(29), out=key)
    # The row index in the low bits: one sort (much faster than an argsort) groups equal
    # hashes, each group's rows in index order.
    shift = np.uint64(max(int(size - 1).bit_length(), 1))
    tagged = np.sort(((key >> shift) << shift) | np.arange(size, dtype=np.uint64))
    index = (tagged & ((np.uint64(1) << shift) - np.uint64(1))).astype(np.intp)
    hashes = tagged >> shift
    starts = np.empty(size, dtype=bool)
    starts[0] = True
    np.not_equal(hashes[1:], hashes[:-1], out=starts[1:])
    first = index[starts]
    if first.size == size:
        return None
    inverse = np.empty(size, dtype=np.intp)
    inverse[index] = np.cumsum(starts) - 1
    # A hash collision would merge two different rows: check every column bit for bit.
    for column in varying:
        if not np.array_equal(column, column[first].take(inverse)):
            return None
    return first, inverse


def evaluate_once_per_row(function: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
                          inputs: Mapping[str, np.ndarray], size: int, share: bool = True) -> dict[str, np.ndarray]:
    """``function(inputs)`` for ``size`` rows, computed on the distinct rows only. Inputs
    are broadcast to ``size`` rows of float64; outputs must be arrays of one value per row.
    ``share=False`` evaluates every row (the reference the shared evaluation must equal)."""
    arrays = {name: np.broadcast_to(np.asarray(value, dtype=np.float64), (size,)) for name, value in inputs.items()}
    groups = distinct_rows(list(arrays.values())) if share and size > 1 else None
    if groups is None:
        return function(arrays)
    first, inverse = groups
    results = function({name: array[first] for name, array in arrays.items()})
    return {name: np.asarray(value)[inverse] for name, value in results.items()}
