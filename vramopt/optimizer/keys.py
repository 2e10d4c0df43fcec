"""The training keys of one GPU type, generated from the key techniques' declarations.

Each field of ``registry.KEY_FIELDS`` with a ``KeyDomain`` (``constraints/key_domain.py``)
is expanded in that order into columns of candidate rows (numpy arrays, no Python loop per
row); a computed field (the GPU count, the layout's world size) is computed as soon as the
fields it reads are there, and each rule on the layout is applied as soon as the fields it
reads are, so that the rows stay few. The rows are then ordered by each field's position in
its candidates, in ``KEY_FIELDS`` order (the fixed tie-break order), and codes that resolve
to the same layout are kept once, the first. No technique is named here: a new key
technique declares its ``KeyDomain`` in its own module and its field in the registry.
"""

from __future__ import annotations

import numpy as np

from vramopt.constraints import registry
from vramopt.constraints.key_domain import KeyDomain, KeyRequest, KeyRows
from vramopt.optimizer.grid_rules import row_groups
from vramopt.optimizer.tables import KEY_COLUMNS


def key_domains() -> tuple[tuple[str, KeyDomain], ...]:
    """(field, domain) of every enumerated key field, in ``KEY_FIELDS`` order (the GPU type,
    which has no column, is the caller's outer loop; a joint field is its leader's)."""
    found = []
    for field in registry.KEY_FIELDS:
        domain = registry.technique(field).key_domain
        if domain is not None and not domain.with_field:
            found.append((field, domain))
    return tuple(found)


def training_keys(request: KeyRequest, gpu_index: int) -> dict[str, np.ndarray]:
    """The key columns (``gpu_index`` and ``KEY_COLUMNS``) of one GPU type, in tie-break order."""
    domains = key_domains()
    columns: dict[str, np.ndarray] = {}
    positions: dict[str, np.ndarray] = {}
    rows = 1
    present: set[str] = set()
    waiting = [(rule.reads, rule) for _, domain in domains for rule in domain.rules]
    computed = [(field, domain) for field, domain in domains if domain.derive is not None]
    for field, domain in domains:
        if domain.derive is None:
            rows = _expand(request, field, domain, columns, positions, rows)
            present.update(domain.fields or (field,))
        rows = _settle(request, present, waiting, computed, columns, positions, rows)
    if waiting or computed:
        raise RuntimeError("key rules read fields no key domain enumerates: "
                           + ", ".join(sorted({name for reads, _ in waiting for name in reads} - present)))
    order = [positions[field] for field, _ in domains]
    if rows and order:
        ranked = np.lexsort(tuple(reversed(order)))
        columns = {name: values[ranked] for name, values in columns.items()}
        columns = _first_of_each_layout(domains, columns)
        rows = len(next(iter(columns.values())))
    result = {"gpu_index": np.full(rows, gpu_index, dtype=np.int64)}
    result.update({name: np.asarray(columns[name], dtype=np.int64) for name in KEY_COLUMNS})
    return result


def _codes(field: str, domain: KeyDomain, values) -> dict[str, np.ndarray]:
    """Each candidate value's column codes, written by its technique(s)."""
    fields = domain.fields or (field,)
    written: dict[str, list[int]] = {}
    for value in values:
        parts = value if domain.fields else (value,)
        for name, part in zip(fields, parts):
            for column, code in registry.technique(name).columns(part).items():
                written.setdefault(column, []).append(int(code))
    return {column: np.array(codes, dtype=np.int64) for column, codes in written.items()}


def _expand(request, field, domain: KeyDomain, columns, positions, rows: int) -> int:
    """Every row times each of the field's candidates (those of its row's earlier fields
    when the domain depends on them)."""
    if domain.after:
        return _expand_dependent(request, field, domain, columns, positions, rows)
    values = tuple(domain.values(request))
    count = len(values)
    for name in list(columns):
        columns[name] = np.repeat(columns[name], count)
    for name in list(positions):
        positions[name] = np.repeat(positions[name], count)
    for column, codes in _codes(field, domain, values).items():
        columns[column] = np.tile(codes, rows)
    positions[field] = np.tile(np.arange(count, dtype=np.int64), rows)
    if count == 0:
        for column in _columns_of(field, domain):
            columns.setdefault(column, np.zeros(0, dtype=np.int64))
    return rows * count


def _expand_dependent(request, field, domain: KeyDomain, columns, positions, rows: int) -> int:
    if rows == 0:
        for column in _columns_of(field, domain):
            columns[column] = np.zeros(0, dtype=np.int64)
        positions[field] = np.zeros(0, dtype=np.int64)
        return 0
    inverse, first = row_groups([columns[name] for name in domain.after])
    lists = [tuple(domain.values(request, **{name: int(columns[name][row]) for name in domain.after}))
             for row in first.tolist()]
    sizes = np.array([len(values) for values in lists], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    flat = _codes(field, domain, [value for values in lists for value in values])
    per_row = sizes[inverse]
    source = np.repeat(np.arange(rows), per_row)
    starts = np.repeat(np.cumsum(per_row) - per_row, per_row)
    within = np.arange(int(per_row.sum()), dtype=np.int64) - starts
    for name in list(columns):
        columns[name] = columns[name][source]
    for name in list(positions):
        positions[name] = positions[name][source]
    chosen = offsets[inverse[source]] + within
    for column in _columns_of(field, domain):
        columns[column] = flat[column][chosen] if column in flat else np.zeros(len(source), dtype=np.int64)
    positions[field] = within
    return len(source)


def _columns_of(field: str, domain: KeyDomain) -> tuple[str, ...]:
    return domain.fields or (field,)


def _settle(request, present, waiting, computed, columns, positions, rows: int) -> int:
    """Compute the fields and apply the rules whose inputs are all enumerated now."""
    progress = True
    while progress:
        progress = False
        for entry in list(computed):
            field, domain = entry
            if set(domain.derive_reads) <= present:
                computed.remove(entry)
                rows = _compute(request, field, domain, columns, positions, rows)
                present.add(field)
                progress = True
        for entry in list(waiting):
            reads, rule = entry
            if set(reads) <= present:
                waiting.remove(entry)
                if rows:
                    keep = np.broadcast_to(np.asarray(rule.admits(request, KeyRows(columns)), dtype=bool), (rows,))
                    rows = _keep(keep, columns, positions)
    return rows


def _compute(request, field, domain: KeyDomain, columns, positions, rows: int) -> int:
    """A computed field's value per row and its position among its candidates; rows whose
    value is none of them are dropped."""
    candidates = np.array(tuple(domain.values(request)), dtype=np.int64)
    values = np.broadcast_to(np.asarray(domain.derive(KeyRows(columns)), dtype=np.int64), (rows,)) if rows else np.zeros(0, np.int64)
    if candidates.size == 0:
        found, position = np.zeros(rows, dtype=bool), np.zeros(rows, dtype=np.int64)
    else:
        sorter = np.argsort(candidates, kind="stable")
        at = np.clip(np.searchsorted(candidates[sorter], values), 0, candidates.size - 1)
        found, position = candidates[sorter][at] == values, sorter[at]
    columns[field] = np.array(values)
    positions[field] = np.asarray(position, dtype=np.int64)
    return _keep(found, columns, positions)


def _keep(mask: np.ndarray, columns, positions) -> int:
    for name in list(columns):
        columns[name] = columns[name][mask]
    for name in list(positions):
        positions[name] = positions[name][mask]
    return int(np.count_nonzero(mask))


def _first_of_each_layout(domains, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Rows equal but for codes that resolve to the same degree are one layout: keep the
    first in tie-break order (the rows are already in it)."""
    for field, domain in domains:
        if domain.same_as is None or len(columns[field]) == 0:
            continue
        resolved = dict(columns)
        resolved[field] = np.asarray(domain.same_as(KeyRows(columns)), dtype=np.int64)
        _, first = row_groups([resolved[name] for name in sorted(resolved)])
        keep = np.sort(first)
        columns = {name: values[keep] for name, values in columns.items()}
    return columns
