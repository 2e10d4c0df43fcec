"""Reading what the user hands over: one bounded file reader and one strict JSON parser.

Every file vramopt reads (requests, cluster, jobs and running files, catalogs, Hugging
Face ``config.json``) goes through ``read_bounded``: at most a limit of bytes is read, even
from a file that grows or a device that never ends. Every JSON text (those files, stdin,
the API's JSON strings) goes through ``parse_json``, which refuses what Python's ``json``
module accepts silently: a key given twice (the last one would win) and integers too large
to convert to float or to print (``check_integers``, also applied to API dicts and TOML).
Each failure is the caller's error type (``InputError`` or ``CatalogError``), one line.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

from vramopt.errors import VramoptError, show_value

MAX_INTEGER_BITS = 1023
"""Integers of 2**1023 (about 9e307) or more are refused wherever they appear: every
number vramopt reads is a count bounded by ``types.MAX_COUNT`` or a quantity converted to
float, and such integers overflow ``float()`` (and beyond 4,300 digits cannot even be
printed, CPython's default ``sys.int_info.default_max_str_digits``)."""

MAX_INTEGER_DIGITS = 308
"""A JSON integer literal of more digits is at least 10**308 > 2**1023: refused unparsed."""

Failure = Callable[[str], VramoptError]
"""Turns a detail ("not UTF-8 text", ...) into the caller's one-line error."""


class _Refused(Exception):
    """Raised inside ``json.loads`` hooks; turned into the caller's error by ``parse_json``."""


def display_path(path: str | Path) -> str:
    """A file name for an error line: as given, or quoted when it holds a NUL byte."""
    text = str(path)
    return repr(text) if "\x00" in text else text


def read_bounded(path: str | Path, limit_bytes: int, fail: Failure, stdin: bool = False) -> bytes:
    """The bytes of ``path`` (or of stdin when ``stdin``), refusing more than ``limit_bytes``.

    ``fail(detail)`` builds the error: ``cannot read (...)`` or ``larger than allowed
    (more than N bytes)``. Only ``limit_bytes + 1`` bytes are ever read.
    """
    try:
        if stdin:
            stream = sys.stdin
            if stream is None:
                raise fail("cannot read (stdin is closed)")
            raw = (stream.buffer if hasattr(stream, "buffer") else stream).read(limit_bytes + 1)
            if isinstance(raw, str):
                raw = raw.encode("utf-8", "surrogateescape")
        else:
            with open(path, "rb") as handle:  # a directory fails here, a device is read bounded
                raw = handle.read(limit_bytes + 1)
    except OSError as error:
        raise fail(f"cannot read ({error.strerror or error})") from None
    except ValueError as error:  # a NUL byte in the path
        raise fail(f"cannot read ({error})") from None
    if len(raw) > limit_bytes:
        raise fail(f"larger than allowed (more than {limit_bytes:,} bytes)")
    return raw


def decode_utf8(raw: bytes, fail: Failure) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise fail("not UTF-8 text") from None


def parse_json(text: str | bytes, fail: Failure, allow_constants: bool = True) -> Any:
    """``json.loads`` that refuses duplicate keys and oversized integers.

    ``fail(detail)`` builds the error for invalid JSON; the detail starts with "not valid
    JSON". ``allow_constants=False`` also refuses NaN and Infinity.
    """
    if isinstance(text, bytes):
        text = decode_utf8(text, fail)

    def reject_constant(name: str) -> Any:
        if not allow_constants:
            raise _Refused(f"{name} is not a valid value")
        return float(name)

    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_int=_integer, parse_constant=reject_constant)
    except _Refused as error:
        raise fail(f"not valid JSON ({error})") from None
    except json.JSONDecodeError as error:
        raise fail(f"not valid JSON ({error.msg} at line {error.lineno} column {error.colno})") from None
    except RecursionError:
        raise fail("not valid JSON (nested too deeply)") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Refused(f"the key {show_value(key)} is given twice in one object")
        result[key] = value
    return result


def _integer(literal: str) -> int:
    digits = len(literal.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        raise _Refused(f"an integer of {digits:,} digits; integers from 2**{MAX_INTEGER_BITS} (about 9e307) up are refused")
    value = int(literal)
    if abs(value).bit_length() > MAX_INTEGER_BITS:
        raise _Refused(f"the integer {literal[:20]}... is too large; integers from 2**{MAX_INTEGER_BITS} (about 9e307) up are refused")
    return value


def check_integers(document: Any, fail: Failure, where: str = "") -> None:
    """Refuse any integer of 2**1023 or more inside a parsed document (dicts, lists, tuples).

    Iterative and cycle-safe: an API caller's dict may be deep or refer to itself.
    """
    stack: list[tuple[Any, str]] = [(document, where)]
    seen: set[int] = set()
    while stack:
        value, place = stack.pop()
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            if abs(value).bit_length() > MAX_INTEGER_BITS:
                digits = math.floor(abs(value).bit_length() * math.log10(2)) + 1
                raise fail(f"{place or 'a value'}: an integer of about {digits:,} digits is too large "
                           f"(integers from 2**{MAX_INTEGER_BITS}, about 9e307, up are refused)")
            continue
        if isinstance(value, dict):
            if id(value) in seen:
                continue
            seen.add(id(value))
            for key, item in value.items():
                stack.append((key, place))
                label = (f"{place}.{key}" if place else key) if isinstance(key, str) else place
                stack.append((item, label))
        elif isinstance(value, (list, tuple)):
            if id(value) in seen:
                continue
            seen.add(id(value))
            for index, item in enumerate(value):
                stack.append((item, f"{place}[{index}]"))


def check_fields(*instances: Any) -> None:
    """``check_integers`` over the fields of request dataclasses (workloads, plans, search
    spaces) that a caller built directly: an ``InputError`` naming the field."""
    from vramopt.errors import InputError

    for instance in instances:
        if dataclasses.is_dataclass(instance) and not isinstance(instance, type):
            for item in dataclasses.fields(instance):
                check_integers(getattr(instance, item.name), InputError, item.name)
