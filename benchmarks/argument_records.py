"""The record of an argparse parser that the export tests check against: every option's
names, action kind, type, nargs and choices (the fixture scripts of the frameworks whose
packages CI does not install: benchmarks/megatron_arguments_fixture.py and
benchmarks/sglang_arguments_fixture.py)."""

from __future__ import annotations

import argparse


def action_kind(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "store_true"
    if isinstance(action, argparse._StoreFalseAction):
        return "store_false"
    if isinstance(action, argparse.BooleanOptionalAction):
        return "boolean_optional"
    if isinstance(action, argparse._StoreConstAction):
        return "store_const"
    if isinstance(action, argparse._AppendAction):
        return "append"
    if isinstance(action, argparse._HelpAction):
        return "help"
    return "store"


def _choices(choices) -> list[str] | None:
    """The choices as strings, in the parser's order (sorted when the parser holds a set,
    whose order changes from run to run)."""
    if choices is None:
        return None
    names = [str(choice) for choice in choices]
    return sorted(names) if isinstance(choices, (set, frozenset)) else names


def argument_records(parser: argparse.ArgumentParser) -> list[dict]:
    """One record per option of ``parser`` (positional arguments and --help left out)."""
    records = []
    for action in parser._actions:
        if not action.option_strings or action_kind(action) == "help":
            continue
        records.append({
            "options": list(action.option_strings),
            "dest": action.dest,
            "kind": action_kind(action),
            "type": getattr(action.type, "__name__", None) if action.type is not None else None,
            "nargs": action.nargs if isinstance(action.nargs, (int, str)) else None,
            "choices": _choices(action.choices),
        })
    return records
