"""How a key technique enters the key enumeration (``optimizer/keys.py``).

A key fixes the layout, the precision and the micro-batch of a candidate row. Each key
technique declares, in its own module, a ``KeyDomain``: its candidate values for one GPU
type with the rules on a value alone already applied (tp divides the heads, cp splits the
sequence into whole tiles, ep divides the experts), and its ``KeyRule`` s on the layout,
each over the columns of the fields it reads (ep x etp divides the stage's GPUs, the
micro-batch divides the replica's share of the batch), the products asked of
``ParallelLayout``. The enumerator expands the fields of ``registry.KEY_FIELDS`` one after
the other, applies each rule as soon as the fields it reads are there, and orders the rows
by each field's position in its candidates, in ``KEY_FIELDS`` order: the tie-break order.

A field may also be
- *computed* from the layout (``derive``): the GPU count is the layout's world size, and its
  candidates are then the counts it must be one of (enumerating the data-parallel degrees
  over the divisors of the global batch, not every count, keeps a million-GPU space fast);
- *dependent* on earlier fields (``after``): the stage splits are a list per pipeline degree;
- *joint* with others (``fields``): one value sets several key fields (first and last stage
  layers), the others declare ``with_field``;
- *resolved* (``same_as``): two codes that resolve to the same degree (etp 0 = tp and etp = tp)
  are one layout, the first in tie-break order kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from vramopt.constraints.technique import DomainContext


@dataclass(frozen=True, slots=True)
class KeyRequest:
    """One GPU type's request, as the key domains read it."""

    gpu: Any
    """The ``GpuSpec`` searched."""
    model: Any
    workload: Any
    space: Any
    context: DomainContext
    choices: Mapping[str, Mapping[str, tuple]]
    resolve: Callable[..., tuple]
    """``resolve(field, default=None)``: the field's domain after --allow/--pin/--forbid
    (``optimizer/domains.domain`` bound to this context and these choices)."""
    fit_only: bool = False
    """Only whether some plan of each layout fits is asked (the relaxation probes): a domain may
    keep just the candidates that hold the least memory (the largest virtual-stage count)."""

    def named(self, field: str) -> bool:
        """Whether the user named values of ``field`` (--pin or --allow)."""
        return field in self.choices["pin"] or field in self.choices["allow"]

    def forbidden(self, field: str) -> tuple:
        return tuple(self.choices["forbid"].get(field, ()))


class KeyRows:
    """Partial key rows: one array per key column enumerated so far, read as attributes (so
    ``ParallelLayout.from_columns`` reads them; a degree not enumerated yet is absent)."""

    __slots__ = ("columns",)

    def __init__(self, columns: Mapping[str, np.ndarray]) -> None:
        self.columns = columns

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.columns[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(frozen=True, slots=True)
class KeyRule:
    """A rule on the layout: ``admits(request, rows)`` is the mask of the rows kept."""

    reads: tuple[str, ...]
    """The key fields whose columns it reads (applied once all are enumerated)."""
    admits: Callable[[KeyRequest, KeyRows], np.ndarray]


@dataclass(frozen=True, slots=True)
class KeyDomain:
    values: Callable[..., Sequence] | None = None
    """The candidate values for one GPU type in tie-break order, rules on a value alone
    applied: ``values(request)``, or with ``after`` ``values(request, **codes)``, the
    column codes of the earlier fields it depends on."""
    rules: tuple[KeyRule, ...] = ()
    after: tuple[str, ...] = ()
    derive: Callable[[KeyRows], np.ndarray] | None = None
    """A computed field: its value per row from the columns of ``derive_reads``; rows whose
    value is not among ``values(request)`` are dropped."""
    derive_reads: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    """Joint fields: a candidate value is a tuple, one value per field named here."""
    with_field: str = ""
    """This field is set jointly by that field's domain (its ``fields``)."""
    same_as: Callable[[KeyRows], np.ndarray] | None = None
    """The degree a code resolves to: rows equal but for codes resolving alike are one layout."""
