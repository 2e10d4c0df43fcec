"""Evaluate the cost model once per distinct row of the columns a table's terms read.

The state table's terms (weights, gradients, optimizer state, the data-parallel collectives,
offload, the optimizer step, logits and reserve) do not read the pipeline schedule: keys that
differ only in their virtual-stage count have equal state rows. Since interleaving became a
key field (constraints/parallelism.py), 2t on 64 GPUs has 25,042 keys where it had 5,864, and
evaluating the state table on each would repeat the same rows about four times.
Rows are grouped by their key's class (``key_classes``: the keys equal once the schedule columns
are blinded) and their item, found on the keys alone, not by sorting the table's rows.
``tests/regression/test_interleaving_domain.py`` holds the deduplicated table to the full evaluation.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from vramopt.optimizer.grid_rules import row_groups

SCHEDULE_COLUMNS = ("virtual_stages",)
"""Key columns the state group's terms do not read (their neutral value is 1)."""


def key_classes(keys: Mapping[str, np.ndarray], ignored: tuple[str, ...]) -> np.ndarray | None:
    """Each key's class among the keys equal once the ``ignored`` columns are blinded (None
    when no ignored column is present: every key its own class)."""
    present = [name for name in ignored if name in keys]
    if not present:
        return None
    columns = [np.asarray(values, dtype=np.int64) for name, values in keys.items() if name not in present]
    if not columns or len(columns[0]) == 0:
        return np.zeros(len(next(iter(keys.values()))), dtype=np.int64)
    return row_groups(columns)[0]


def evaluate_distinct(evaluate: Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]],
                      gathered: Mapping[str, np.ndarray], ignored: tuple[str, ...],
                      row_codes: np.ndarray | None) -> dict[str, np.ndarray]:
    """``evaluate(gathered)`` computed once per distinct ``row_codes`` value (rows with equal
    codes are equal once the ``ignored`` columns are set to 1, which they are for the
    evaluation), and spread back to every row; every row evaluated when ``row_codes`` is None.

    The codes are small non-negative integers (a key class times the item count plus the
    item), so the distinct rows are found by scattering into a dense table, without a sort."""
    rows = len(next(iter(gathered.values())))
    if row_codes is None or rows == 0:
        return dict(evaluate(gathered))
    size = int(row_codes.max()) + 1
    representative = np.full(size, -1, dtype=np.int64)
    representative[row_codes] = np.arange(rows, dtype=np.int64)  # any row of a code stands for all of them
    used = np.flatnonzero(representative >= 0)
    if len(used) == rows:
        return dict(evaluate(gathered))
    first = representative[used]
    position = np.empty(size, dtype=np.int64)
    position[used] = np.arange(len(used), dtype=np.int64)
    inverse = position[row_codes]
    blind = {name: (np.ones(len(first), dtype=values.dtype) if name in ignored else values[first]) for name, values in gathered.items()}
    values = evaluate(blind)
    return {name: (value[inverse] if isinstance(value, np.ndarray) and value.shape[:1] == (len(first),) else value)
            for name, value in values.items()}
