"""The --framework option of estimate, solve and pareto, and how it meets --export.

An unknown name is refused with the closest known names. ``--export deepspeed`` (and the
other training exporters) without ``--framework`` searches what that framework runs; with
another framework's name it is refused in one line; with ``--framework generic`` named
explicitly the physics-only plan is exported, and the exporter refuses it when the
framework's code would (its enforced rules), leaving the rest to notes. No exported file
holds a plan its framework refuses at start-up.
"""

from __future__ import annotations

from typing import Any, Callable

import click

from vramopt.errors import InputError
from vramopt.frameworks import DEFAULT_FRAMEWORK, FRAMEWORK_NAMES, load_framework

EXPORT_TARGETS = ("deepspeed", "megatron", "torchtitan", "vllm", "sglang")
"""The --export targets of solve (vramopt.exporters.EXPORTERS)."""

TRAINING_EXPORT_FRAMEWORKS = {"deepspeed": "deepspeed", "megatron": "megatron", "torchtitan": "torchtitan"}
"""Export target -> the framework whose rules its plans must keep."""


class FrameworkType(click.ParamType):
    name = "framework"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return load_framework(value).name
        except InputError as error:  # UnknownNameError is an InputError: it names the closest
            self.fail(str(error), param, ctx)


def framework_option(function: Callable) -> Callable:
    return click.option(
        "--framework", "framework", type=FrameworkType(), default=None,
        help=f"Training framework whose rules restrict the plans: {', '.join(FRAMEWORK_NAMES)} "
             f"(default {DEFAULT_FRAMEWORK}; --export deepspeed|megatron|torchtitan implies that framework).",
    )(function)


def resolve_framework(framework: str | None, export_target: str | None) -> str:
    """The framework to search under, from --framework and --export."""
    wanted = TRAINING_EXPORT_FRAMEWORKS.get(export_target or "")
    if wanted is None:
        return framework or DEFAULT_FRAMEWORK
    if framework is None or framework == wanted:
        return wanted
    if framework == DEFAULT_FRAMEWORK:
        return framework  # asked for by name: the exporter still refuses what the framework's code raises on
    raise InputError(f"--export {export_target} writes plans for {load_framework(wanted).display_name}, but --framework is "
                     f"{framework}; use --framework {wanted} or leave --framework out")
