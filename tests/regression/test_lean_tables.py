"""issue 18 item 3 (a lean model, table building): the distinct rows of the key columns are
found by one sort per column (``grid_rules.row_groups``) instead of numpy's row-wise
``unique``; the state table is evaluated once per key class and item (``distinct_rows``); a
rule on a key x item grid builds only the columns it reads. Each must give exactly what the
straightforward computation gives."""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.optimizer.distinct_rows import evaluate_distinct, key_classes
from vramopt.optimizer.grid_rules import KeyItemGrid, row_groups


@pytest.mark.parametrize("seed", range(5))
def test_row_groups_equal_numpy_unique_of_the_rows(seed):
    """issue 18 item 3: the same groups, in the same (lexicographic) order, first rows too."""
    generator = np.random.default_rng(seed)
    rows = int(generator.integers(1, 400))
    columns = [generator.integers(-3, int(generator.integers(1, 9)), size=rows) for _ in range(int(generator.integers(1, 6)))]
    _, first, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_index=True, return_inverse=True)
    groups, firsts = row_groups(columns)
    np.testing.assert_array_equal(groups, inverse.reshape(-1))
    np.testing.assert_array_equal(firsts, first)


def test_key_classes_blind_only_the_ignored_columns():
    """issue 18 item 3: keys equal but for their virtual-stage count share a class."""
    keys = {"pipeline_parallel": np.array([2, 2, 4, 2]), "virtual_stages": np.array([1, 2, 1, 1]), "micro_batch": np.array([1, 1, 1, 2])}
    classes = key_classes(keys, ("virtual_stages",))
    assert classes[0] == classes[1] and len({int(classes[0]), int(classes[2]), int(classes[3])}) == 3
    assert key_classes(keys, ("context_parallel",)) is None


def test_evaluate_distinct_equals_the_evaluation_of_every_row():
    """issue 18 item 3: one evaluation per row code, with the ignored column at 1, spread back."""
    gathered = {"a": np.array([3, 3, 5, 3, 5]), "virtual_stages": np.array([1, 4, 2, 2, 1])}
    codes = np.array([0, 0, 7, 0, 7])
    calls = []

    def evaluate(columns):
        calls.append(len(columns["a"]))
        return {"out": columns["a"] * 10.0 + columns["virtual_stages"]}

    shared = evaluate_distinct(evaluate, gathered, ("virtual_stages",), codes)
    assert calls == [2]
    np.testing.assert_array_equal(shared["out"], [31.0, 31.0, 51.0, 31.0, 51.0])
    np.testing.assert_array_equal(evaluate_distinct(evaluate, gathered, ("virtual_stages",), None)["out"], [31, 34, 52, 32, 51])


def test_a_rule_on_the_grid_equals_the_rule_on_every_row():
    """issue 18 item 3: the grid evaluates the rule on the product of the distinct values of
    the columns it reads (built on first read) and reads it back per row."""
    generator = np.random.default_rng(7)
    keys, items = 40, 12
    key_codes = {"tp": generator.integers(1, 4, size=keys), "pp": generator.integers(1, 3, size=keys), "dp": generator.integers(1, 9, size=keys)}
    item_codes = {"ckpt": generator.integers(0, 3, size=items), "flash": generator.integers(0, 2, size=items)}
    constant = {"zero": 1}

    def rule(columns):
        # Masks over key, item and constant columns together.
        return {"first": (columns.tp == 2) & (columns.pp == 2) & (columns.ckpt == 1), "second": (columns.flash == 0) & (columns.zero == 1) & (columns.dp > 6)}

    broken = KeyItemGrid(keys, items, key_codes, item_codes, constant).broken(rule)
    full = {name: np.repeat(values, items) for name, values in key_codes.items()}
    full.update({name: np.tile(values, keys) for name, values in item_codes.items()})
    full["zero"] = np.ones(keys * items, dtype=np.int64)

    class Columns:
        def __getattr__(self, name):
            return full[name]

    masks = rule(Columns())
    np.testing.assert_array_equal(broken, (masks["first"] | masks["second"]).reshape(keys, items))
