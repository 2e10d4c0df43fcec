"""Evaluate the cost model once per distinct row of the columns a table's terms read.

The state table's terms (weights, gradients, optimizer state, the data-parallel collectives,
offload, the optimizer step, logits and reserve) do not read the pipeline schedule: keys that
differ only in their virtual-stage count have equal state rows. Since interleaving became a
key field (constraints/parallelism.py), 2t on 64 GPUs has 25,042 keys where it had 5,864, and
evaluating the state table on each would repeat the same rows about four times.
``tests/regression/test_interleaving_domain.py`` holds the deduplicated table to the full evaluation.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

SCHEDULE_COLUMNS = ("virtual_stages",)
"""Key columns the state group's terms do not read (their neutral value is 1)."""


def evaluate_distinct(evaluate: Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]],
                      gathered: Mapping[str, np.ndarray], ignored: tuple[str, ...]) -> dict[str, np.ndarray]:
    """``evaluate(gathered)`` computed on the distinct rows of ``gathered`` with the
    ``ignored`` columns set to 1, and spread back to every row."""
    present = [name for name in ignored if name in gathered]
    rows = len(next(iter(gathered.values())))
    if not present or rows == 0:
        return dict(evaluate(gathered))
    blind = {name: (np.ones_like(values) if name in present else values) for name, values in gathered.items()}
    matrix = np.stack([np.asarray(values, dtype=np.int64) for values in blind.values()], axis=1)
    _, first, inverse = np.unique(matrix, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if len(first) == rows:
        return dict(evaluate(gathered))
    values = evaluate({name: column[first] for name, column in blind.items()})
    return {name: (value[inverse] if isinstance(value, np.ndarray) and value.shape[:1] == (len(first),) else value)
            for name, value in values.items()}
