"""Exception types: one per failure kind, each carrying a one-line message for the user.

The CLI turns every ``VramoptError`` into that line and exit status 2 (``Interrupted``:
the line "interrupted" and status 130); anything else escaping the library is a bug.
"""

from __future__ import annotations

import json
import math
import reprlib
from typing import Any

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 60, 60


def show_value(value: Any) -> str:
    """A user's value in an error message: as JSON when it is a JSON scalar, else a short
    repr (a set, bytes, a deeply nested list); never raises."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 256:
        # Too long to show (and beyond 4,300 digits Python refuses to print it): its size.
        digits = math.floor(abs(value).bit_length() * math.log10(2)) + 1
        return f"{'a negative' if value < 0 else 'an'} integer of about {digits:,} digits"
    if value is None or isinstance(value, (bool, int, float, str)):
        try:
            text = json.dumps(value)
        except (ValueError, OverflowError):
            text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."
    try:
        return _SHORT.repr(value)
    except ValueError:  # an integer inside too long to print
        return f"a {type(value).__name__} holding an integer too long to show"


class VramoptError(Exception):
    """Base class of every error vramopt raises on purpose."""


class CatalogError(VramoptError):
    """A hardware or model catalog file is malformed (names the file and the key)."""


class UnknownNameError(VramoptError):
    """A GPU or model name is not in the catalog (the message suggests close names)."""


class InputError(VramoptError):
    """A request, flag or plan is invalid (tp not dividing heads, negative sizes, ...)."""


class InfeasibleError(VramoptError):
    """No plan in the search space fits; carries the explanation and the relaxation."""

    def __init__(self, message: str, explanation: object | None = None) -> None:
        super().__init__(message)
        self.explanation = explanation


class Interrupted(VramoptError):
    """The run was cancelled (``vramopt.optimizer.cancel``: Ctrl-C in the CLI, or a
    scheduler's ``Cancellation.request()``) before it reached an answer; nothing is returned."""
