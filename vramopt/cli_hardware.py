"""``--hardware FILE.toml``: the option every catalog-reading command shares.

The file is read and merged before the command runs, and the merged catalog is active
(``vramopt.hardware.using_hardware``) for the whole command, display included.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Mapping

import click

from vramopt.hardware import HardwareCatalog, load_hardware_file, using_hardware

HARDWARE_HELP = ("A TOML file of [gpu.NAME] tables adding GPUs and node profiles or overriding built-in keys, "
                 "same strict keys as the catalog (docs/hardware.md).")


def hardware_option(command: Callable) -> Callable:
    """Add ``--hardware`` to a command and run its body with the merged catalog active."""

    @click.option("--hardware", "hardware_path", type=str, default=None, help=HARDWARE_HELP)
    @functools.wraps(command)
    def run(*args: Any, hardware_path: str | None = None, **kwargs: Any) -> Any:
        catalog: HardwareCatalog | None = load_hardware_file(hardware_path) if hardware_path is not None else None
        with contextlib.ExitStack() as stack:
            stack.enter_context(using_hardware(catalog))
            context = click.get_current_context()
            context.meta[_STACK_KEY] = stack
            context.meta[_GIVEN_KEY] = catalog is not None
            return command(*args, **kwargs)

    return run


_STACK_KEY = "vramopt.hardware_stack"
_GIVEN_KEY = "vramopt.hardware_given"


def use_request_hardware(hardware: Mapping[str, Any] | None) -> None:
    """Activate a ``--request`` file's inline ``hardware`` for the rest of the command."""
    from vramopt.api import hardware_scope

    if hardware is None:
        return
    context = click.get_current_context()
    if context.meta.get(_GIVEN_KEY):
        raise click.UsageError("--hardware and the request's 'hardware' field cannot both be given")
    context.meta[_STACK_KEY].enter_context(hardware_scope(hardware))


def hardware_note(catalog: HardwareCatalog | None, builtin_names: set[str]) -> str:
    """One line saying which GPUs the hardware file added or overrode."""
    if catalog is None:
        return ""
    parts = [f"{name} ({'overrides built-in' if name in builtin_names else 'added'})" for name in catalog.changed]
    return f"From {catalog.origin}: " + ", ".join(parts)
