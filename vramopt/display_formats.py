"""The output formats and the helpers every view shares: JSON and CSV of plain data, the
plain-text table, and GB/percent/yes-no cells (GB = 1e9 bytes, as GPU datasheets use it)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from typing import Any, Iterable, Mapping, Sequence

from vramopt.units import BYTES_PER_GB

OUTPUT_FORMATS = ("table", "json", "csv")

CSV_SECTIONS = ("plan", "memory", "throughput", "time_and_cost")
"""time_and_cost is there only when --total-tokens or a price asked for it (docs/json-contract.md)."""
"""Sections of a v1 response flattened into dotted CSV columns (``plan.gpus`` ...)."""

MEMORY_LABELS = {
    "weights_bytes": "weights",
    "gradients_bytes": "gradients",
    "optimizer_bytes": "optimizer states (Adam)",
    "activations_bytes": "activations",
    "logits_bytes": "logits (fp32, last stage)",
    "kv_cache_bytes": "KV cache",
    "reserve_bytes": "framework reserve",
}
"""Memory terms of the v1 ``memory`` object, in contract order, with their display names."""


# ---------------------------------------------------------------------------------------
# Generic helpers


def to_plain(value: Any) -> Any:
    """Dataclasses, mappings and tuples -> JSON-ready dicts and lists (recursively)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: to_plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): to_plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    return value


def to_json(data: Any) -> str:
    """Indented JSON; NaN and infinity are refused (they are not JSON)."""
    return json.dumps(data, indent=2, allow_nan=False)


def flatten(result: Mapping[str, Any], sections: Sequence[str] = CSV_SECTIONS) -> dict[str, Any]:
    """``{"plan": {"gpus": 4}}`` -> ``{"plan.gpus": 4}`` for the given sections, in order."""
    row: dict[str, Any] = {}
    for section in sections:
        for key, value in result.get(section, {}).items():
            row[f"{section}.{key}"] = value
    return row


def csv_cell(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return value


def to_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    """One header row (the keys of the first row) and one line per row."""
    rows = list(rows)
    buffer = io.StringIO()
    if not rows:
        return ""
    writer = csv.writer(buffer, lineterminator="\n")
    header = list(rows[0])
    writer.writerow(header)
    for row in rows:
        writer.writerow([csv_cell(row.get(key, "")) for key in header])
    return buffer.getvalue()


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], align: str | None = None) -> str:
    """A plain monospace table; ``align`` has one 'l' or 'r' per column (default: 'l' first, 'r' rest)."""
    align = align or "l" + "r" * (len(headers) - 1)
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max([len(str(header))] + [len(row[index]) for row in cells]) for index, header in enumerate(headers)]

    def line(items: Sequence[str]) -> str:
        parts = [item.ljust(width) if side == "l" else item.rjust(width) for item, width, side in zip(items, widths, align)]
        return "  ".join(parts).rstrip()

    return "\n".join([line([str(header) for header in headers]), line(["-" * width for width in widths])] + [line(row) for row in cells])


def gb(value_bytes: float, digits: int = 1) -> str:
    return f"{value_bytes / BYTES_PER_GB:,.{digits}f}"


def percent(fraction: float, digits: int = 1) -> str:
    return f"{100.0 * fraction:.{digits}f}%"


def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def on_off(flag: bool) -> str:
    return "on" if flag else "off"


def written_lines(csv_path: str | None, plot_path: str | None) -> list[str]:
    """The lines a front's table ends with: where its CSV and its plot were written."""
    return ([f"CSV written to {csv_path}"] if csv_path else []) + ([f"plot written to {plot_path}"] if plot_path else [])
