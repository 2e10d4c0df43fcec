"""Strict conversion of plain JSON values into the request dataclasses of vramopt/api.py:
every field checked against its type hint, unknown and missing fields refused, each
failure an ``InputError`` naming the field (``request space.max_gpus: ...``)."""

from __future__ import annotations

import collections.abc
import math
import numbers
import typing
from dataclasses import fields
from typing import Any, Mapping

from vramopt.errors import InputError, show_value


# ---------------------------------------------------------------------------------------
# Strict conversion of plain JSON values into the request dataclasses


def _fail(where: str, message: str) -> InputError:
    return InputError(f"request {where}: {message}")



def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in arguments:
            return None
        (inner,) = [argument for argument in arguments if argument is not type(None)]
        return _coerce(inner, value, where)
    if hint is bool:
        if not isinstance(value, bool):
            raise _fail(where, f"must be true or false, got {show_value(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise _fail(where, f"must be an integer, got {show_value(value)}")
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise _fail(where, f"must be a finite number, got {show_value(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise _fail(where, f"must be a string, got {show_value(value)}")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise _fail(where, f"must be a list, got {show_value(value)}")
        return tuple(_coerce(arguments[0], item, f"{where}[{index}]") for index, item in enumerate(value))
    if origin in (dict, collections.abc.Mapping) or hint is Mapping:
        if not isinstance(value, dict):
            raise _fail(where, "must be an object")
        value_hint = arguments[1] if len(arguments) == 2 else Any
        if value_hint is float:  # space.usd_per_gpu_hour: GPU name -> a number
            return {str(key): _coerce(float, item, f"{where}.{key}") for key, item in value.items()}
        return {str(key): _pin_values(item, f"{where}.{key}", value_hint) for key, item in value.items()}
    raise _fail(where, f"has an unsupported type {hint}")


def _pin_values(value: Any, where: str, hint: Any) -> Any:
    """--pin takes one value, --allow/--forbid a list; numbers and booleans become text."""
    def text(item: Any) -> str:
        if isinstance(item, bool):
            return "true" if item else "false"
        if isinstance(item, (int, float, str)) and not (isinstance(item, float) and not math.isfinite(item)):
            return str(item)
        raise _fail(where, f"must be a string, number or boolean, got {show_value(item)}")

    if typing.get_origin(hint) is tuple:
        items = value if isinstance(value, list) else [value]
        return tuple(text(item) for item in items)
    return text(value)


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise _fail(where, "must be an object")
    hints = typing.get_type_hints(cls)
    names = [item.name for item in fields(cls)]
    unknown = sorted(set(data) - set(names), key=str)
    if unknown:
        raise _fail(where, f"unknown field '{unknown[0]}' (known: {', '.join(names)})")
    values = {name: _coerce(hints[name], value, f"{where}.{name}") for name, value in data.items()}
    missing = [item.name for item in fields(cls) if item.name not in values and _required(item)]
    if missing:
        raise _fail(where, f"missing field '{missing[0]}'")
    return cls(**values)


def _required(item) -> bool:
    from dataclasses import MISSING

    return item.default is MISSING and item.default_factory is MISSING


def _plain(instance: Any) -> dict[str, Any]:
    result = {}
    for item in fields(instance):
        value = getattr(instance, item.name)
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = {key: list(entry) if isinstance(entry, tuple) else entry for key, entry in value.items()}
        result[item.name] = value
    return result
