"""The CSV of request lengths behind ``--lengths FILE``: a header ``input_tokens,output_tokens``
and one row per sampled request (for example the prompts and outputs of a benchmark
dataset, tokenized). Read through the bounded reader; every fault is one line."""

from __future__ import annotations

import csv
import io

from vramopt.errors import InputError
from vramopt.input_files import display_path, read_bounded

MAX_LENGTHS_FILE_BYTES = 64 * 2**20
"""A million rows of two integers fit well within 64 MiB."""

HEADER = ["input_tokens", "output_tokens"]


def read_length_samples(path: str) -> tuple[tuple[int, int], ...]:
    """The (input, output) pairs of the file; the pairs are checked again by the model."""
    where = display_path(path)
    raw = read_bounded(path, MAX_LENGTHS_FILE_BYTES, lambda detail: InputError(f"--lengths {where}: {detail}"))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"--lengths {where}: not UTF-8 text") from None
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or [cell.strip() for cell in rows[0]] != HEADER:
        raise InputError(f"--lengths {where}: the first line must be the header {','.join(HEADER)}")
    pairs = []
    for number, row in enumerate(rows[1:], start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        try:
            prompt, output = (int(cell.strip()) for cell in row)
        except ValueError:
            raise InputError(f"--lengths {where} line {number}: expected two integers, got {','.join(row)!r}") from None
        if prompt < 1 or output < 1:
            raise InputError(f"--lengths {where} line {number}: lengths must be positive, got {prompt},{output}")
        pairs.append((prompt, output))
    if not pairs:
        raise InputError(f"--lengths {where}: no request rows after the header")
    return tuple(pairs)
