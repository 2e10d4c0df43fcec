"""How the empty-domain explanations write and compare plan values: as the user types them
after ``--pin field=``, a short listing, and the nearest valid value to one that is not."""

from __future__ import annotations

from typing import Any, Sequence

MAX_LISTED = 8
"""Values a reason lists before '...' (the reason stays one readable line)."""


def text(value: Any) -> str:
    """A value as the user writes it after --pin field=."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def listing(values: Sequence[Any]) -> str:
    shown = ", ".join(text(value) for value in values[:MAX_LISTED])
    return shown + (", ..." if len(values) > MAX_LISTED else "")


def number_of(value: Any) -> int | None:
    """The number a value stands for (every:K -> K), to find the nearest valid one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.startswith("every:"):
        return int(value.split(":", 1)[1])
    return None


def nearest_value(target: Any, candidates: Sequence[Any]) -> Any:
    number = number_of(target)
    if number is None:
        return candidates[0]

    def distance(value: Any) -> tuple:
        other = number_of(value)
        return (1, 0, 0) if other is None else (0, abs(other - number), other)

    return min(candidates, key=distance)
