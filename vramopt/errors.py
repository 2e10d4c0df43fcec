"""Exception types: one per failure kind, each carrying a one-line message for the user.

The CLI turns every ``VramoptError`` into that line and exit status 2; anything else
escaping the library is a bug.
"""

from __future__ import annotations


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
