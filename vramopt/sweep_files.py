"""The files of a sweep: the grid file (TOML or CSV), the result CSV (one line per cell,
read back by ``--resume``) and its Parquet copy.

The CSV is the record: every value is written as text the same way every time (floats as
Python's shortest round-trip repr, booleans as true/false, nothing as an empty field), and
the Parquet file is converted from it with a fixed column schema, so both files depend
only on the rows.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Iterable, Mapping

from vramopt.errors import InputError, show_value
from vramopt.input_files import decode_utf8, display_path, read_bounded
from vramopt.sweep import AXES, COLUMNS, KEY_COLUMNS, Cell, SweepGrid

MAX_GRID_FILE_BYTES = 1_000_000
"""A grid file lists a few dozen names and numbers; a megabyte is refused unread."""

GRID_SETTINGS = ("headroom_fraction", "time_limit_s")
"""Keys of a TOML grid file besides the axes: the settings every cell shares."""

INTEGER_COLUMNS = frozenset({"max_gpus", "seq_len", "gpus", "nodes", "tensor_parallel", "pipeline_parallel", "data_parallel",
                             "zero_stage", "micro_batch", "slots", "replicas"})
FLOAT_COLUMNS = frozenset({"required_headroom_fraction", "tokens_per_s", "tokens_per_s_per_gpu", "latency_per_token_ms", "memory_per_gpu_bytes",
                           "capacity_bytes", "headroom_fraction"})
BOOLEAN_COLUMNS = frozenset({"feasible"})


# ---------------------------------------------------------------------------------------
# The grid file


def read_grid(path: str) -> SweepGrid:
    """A grid from a TOML file (``models = [...]``, one list per axis, and optionally
    ``headroom_fraction`` and ``time_limit_s``) or a CSV file (a header naming axes, each
    column listing that axis's values downwards; blank fields are padding). Axes left out
    take SweepGrid's defaults (workloads: train, max_gpus: 8, seq_lens: the workload's)."""

    def fail(detail: str) -> InputError:
        return InputError(f"grid {display_path(path)}: {detail}")

    text = decode_utf8(read_bounded(path, MAX_GRID_FILE_BYTES, fail), fail)
    suffix = Path(path).suffix.lower()
    if suffix == ".toml":
        values = _toml_grid(text, fail)
    elif suffix == ".csv":
        values = _csv_grid(text, fail)
    else:
        raise fail("is neither .toml nor .csv")
    for axis in ("models", "gpus"):
        if axis not in values:
            raise fail(f"has no '{axis}' axis")
    try:
        return SweepGrid(**values)
    except InputError as error:
        raise fail(str(error)) from None


def _toml_grid(text: str, fail: Any) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    try:
        document = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError, ValueError) as error:
        raise fail(f"not valid TOML ({error})") from None
    unknown = sorted(set(document) - set(AXES) - set(GRID_SETTINGS))
    if unknown:
        raise fail(f"unknown key '{unknown[0]}' (known: {', '.join(AXES + GRID_SETTINGS)})")
    values: dict[str, Any] = {}
    for key, value in document.items():
        if key in AXES:
            if not isinstance(value, list):
                raise fail(f"axis {key} must be a list, got {show_value(value)}")
            values[key] = tuple(value)
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise fail(f"{key} must be a number, got {show_value(value)}")
            values[key] = float(value)
    return values


def _csv_grid(text: str, fail: Any) -> dict[str, Any]:
    try:
        records = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as error:
        raise fail(f"not valid CSV ({error})") from None
    if not records:
        raise fail("is empty (the first line names the axes)")
    header = [name.strip() for name in records[0]]
    for name in header:
        if name not in AXES:
            raise fail(f"unknown column '{name}' (known: {', '.join(AXES)})")
    repeated = [name for index, name in enumerate(header) if name in header[:index]]
    if repeated:
        raise fail(f"column '{repeated[0]}' is given twice")
    columns: dict[str, list[Any]] = {name: [] for name in header}
    for line, record in enumerate(records[1:], start=2):
        if len(record) > len(header):
            raise fail(f"line {line} has {len(record)} fields, the header {len(header)}")
        for name, field in zip(header, record):
            field = field.strip()
            if not field:
                continue
            if name in ("max_gpus", "seq_lens"):
                try:
                    columns[name].append(int(field))
                except ValueError:
                    raise fail(f"line {line}: {name} '{field}' is not an integer") from None
            else:
                columns[name].append(field)
    return {name: tuple(items) for name, items in columns.items()}


# ---------------------------------------------------------------------------------------
# The result CSV


def csv_field(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def csv_line(values: Iterable[Any]) -> str:
    """One CSV line, newline included (a reason's own line breaks are already spaces)."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow([csv_field(value) for value in values])
    return buffer.getvalue()


HEADER_LINE = csv_line(COLUMNS)


def row_line(row: Mapping[str, Any]) -> str:
    return csv_line(row[name] for name in COLUMNS)


def row_key(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The row's cell as Cell.key spells it."""
    return tuple(csv_field(row[name]) for name in KEY_COLUMNS)


def read_done_rows(path: str, grid_cells: list[Cell]) -> tuple[dict[tuple[str, ...], str], int]:
    """For ``--resume``: the lines of ``path`` by cell key, and the length in bytes of its
    complete part (a last line cut short by a killed run is dropped; the caller truncates
    the file there). The header must be this version's; every row must be a cell of this
    grid, once."""
    def fail(detail: str) -> InputError:
        return InputError(f"--resume {display_path(path)}: {detail}")

    raw = read_bounded(path, 1 << 34, fail)
    complete = raw[: raw.rfind(b"\n") + 1]
    text = decode_utf8(complete, fail)
    lines = text.splitlines(keepends=True)
    if not lines:
        return {}, 0
    if lines[0] != HEADER_LINE:
        raise fail("its header is not the one `vramopt sweep` writes (a different file, or another vramopt version's)")
    known = {cell.key for cell in grid_cells}
    done: dict[tuple[str, ...], str] = {}
    for number, line in enumerate(lines[1:], start=2):
        try:
            (record,) = list(csv.reader(io.StringIO(line, newline="")))
        except (csv.Error, ValueError):
            raise fail(f"line {number} is not one CSV row") from None
        if len(record) != len(COLUMNS):
            raise fail(f"line {number} has {len(record)} fields, not {len(COLUMNS)}")
        key = tuple(record[: len(KEY_COLUMNS)])
        if key not in known:
            cell = ", ".join(f"{name} {value}" for name, value in zip(KEY_COLUMNS, key))
            raise fail(f"line {number} ({cell}) is not a cell of this grid; resume with the grid (and --headroom) "
                       "that wrote the file")
        if key in done:
            raise fail(f"line {number} repeats the cell of an earlier line")
        done[key] = line
    return done, len(complete)


# ---------------------------------------------------------------------------------------
# Parquet


def parquet_bytes(csv_text: str) -> bytes:
    """The Parquet file of a result CSV, with a fixed schema (integers int64, figures
    float64, feasible a boolean, the rest strings; an empty field is null)."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise InputError("--parquet needs pyarrow, which is not installed: pip install 'vramopt[sweep]'") from None
    records = list(csv.reader(io.StringIO(csv_text, newline="")))[1:]
    columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    for record in records:
        for name, field in zip(COLUMNS, record):
            if field == "":
                value: Any = None
            elif name in INTEGER_COLUMNS:
                value = int(field)
            elif name in FLOAT_COLUMNS:
                value = float(field)
            elif name in BOOLEAN_COLUMNS:
                value = field == "true"
            else:
                value = field
            columns[name].append(value)

    def kind(name: str) -> Any:
        if name in INTEGER_COLUMNS:
            return pyarrow.int64()
        if name in FLOAT_COLUMNS:
            return pyarrow.float64()
        if name in BOOLEAN_COLUMNS:
            return pyarrow.bool_()
        return pyarrow.string()

    schema = pyarrow.schema([(name, kind(name)) for name in COLUMNS])
    table = pyarrow.Table.from_pydict(columns, schema=schema)
    sink = pyarrow.BufferOutputStream()
    pyarrow.parquet.write_table(table, sink)
    return sink.getvalue().to_pybytes()
