"""Target frameworks: the plans each can run, as validity masks over the search tables.

``--framework generic`` (the default) searches every well-formed plan; ``deepspeed``,
``megatron`` and ``torchtitan`` add the rules of that framework's code (one module each,
every rule citing its file and release). The masks go into the state and activation tables
that both engines read (``optimizer/problem.py``), so CP-SAT and the exhaustive oracle
search the same restricted space; ``estimate`` refuses a plan that breaks a rule; a pin that
the framework cannot run is refused before the search, naming the rule.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

import numpy as np

from vramopt.catalog_files import suggest
from vramopt.costs.columns import PlanColumns
from vramopt.errors import InputError
from vramopt.frameworks.deepspeed import DEEPSPEED
from vramopt.frameworks.generic import GENERIC
from vramopt.frameworks.megatron import MEGATRON
from vramopt.frameworks.rule import Framework, Rule
from vramopt.frameworks.torchtitan import DEFAULT_ALLOW as TORCHTITAN_DEFAULT_ALLOW
from vramopt.frameworks.torchtitan import TORCHTITAN

FRAMEWORKS: dict[str, Framework] = {framework.name: framework for framework in (GENERIC, DEEPSPEED, MEGATRON, TORCHTITAN)}
FRAMEWORK_NAMES = tuple(FRAMEWORKS)
DEFAULT_FRAMEWORK = "generic"

DEFAULT_ALLOW: dict[str, Mapping[str, tuple[str, ...]]] = {
    "deepspeed": {"grad_comm_precision": ("bf16", "fp16", "fp32")},  # communication_data_type's choices
    "megatron": {"grad_comm_precision": ("fp32", "bf16", "fp16")},  # fp32 main gradients, --grad-reduce-in-bf16, fp16 training
    "torchtitan": TORCHTITAN_DEFAULT_ALLOW,
}
"""Per framework: the domains it searches where vramopt's default would be refused (the
default gradient precision follows the training precision, so fp8 training would send fp8
gradients, which none of these frameworks does)."""

def neutral_codes() -> dict[str, int]:
    """The columns of a plan every framework runs (one GPU, bf16, Adam, fp32 gradient
    reduction, flash attention, nothing else: the plan-field defaults with fp32 gradients):
    the values a pin is checked against for the fields not pinned (tests/unit/test_frameworks.py
    checks that no rule refuses it)."""
    from vramopt.plan import encode
    from vramopt.types import TrainingPlan

    from vramopt.constraints import registry
    from vramopt.constraints.technique import REQUIRED

    columns = encode([TrainingPlan(gpu="plain", gpus=1, grad_comm_precision="fp32")])
    resolved = TrainingPlan(gpu="plain", gpus=1)  # every field at its default, as construction resolves it
    codes = {name: int(np.asarray(getattr(columns, name)).reshape(-1)[0]) for name in columns.column_names()}
    # A default the plan resolves against another field on construction (expert_tensor_parallel 0
    # = the plan's tp) keeps its code, so that a pin of that other field is checked with it.
    for technique in registry.training_techniques():
        declaration = technique.plan_field
        if not technique.derived and declaration is not None and declaration.default is not REQUIRED \
                and declaration.default != getattr(resolved, technique.field, declaration.default):
            codes.update(technique.columns(declaration.default))
    return codes


def load_framework(name: Any) -> Framework:
    """The framework called ``name``, or an error that suggests the closest names."""
    if isinstance(name, Framework):
        return name
    if not isinstance(name, str):
        raise InputError(f"framework must be one of {', '.join(FRAMEWORK_NAMES)}, got {name!r}")
    key = name.strip().lower()
    if key not in FRAMEWORKS:
        raise suggest(name, FRAMEWORK_NAMES, "framework")
    return FRAMEWORKS[key]


def refused_masks(name: str, columns: PlanColumns, group: str) -> dict[str, np.ndarray]:
    """{reason: mask} of the framework's key rules and the rules of ``group`` ('state' or 'activation')."""
    return load_framework(name).refused(columns, ("key", group))


def first_refusal(name: str, columns: PlanColumns, enforced_only: bool = False) -> str | None:
    """The reason of the first rule that refuses row 0 of ``columns``, or None."""
    for reason, mask in load_framework(name).refused(columns, enforced_only=enforced_only).items():
        if bool(np.asarray(mask).reshape(-1)[0]):
            return reason
    return None


def check_runs(name: str, columns: PlanColumns, what: str = "the plan", enforced_only: bool = False) -> None:
    """Raise ``InputError`` naming the rule when the framework cannot run row 0 of ``columns``
    (only the rules its code raises on, with ``enforced_only``: what an exporter checks)."""
    reason = first_refusal(name, columns, enforced_only)
    if reason is not None:
        raise InputError(f"{what} cannot run under --framework {load_framework(name).name}: {reason}")


def space_for_framework(space) -> Any:
    """The search space under its framework: the framework's default domains added where the
    user set none, and a pin the framework cannot run refused with the rule's name."""
    framework = load_framework(getattr(space, "framework", DEFAULT_FRAMEWORK))
    if framework.name != getattr(space, "framework", None):
        space = replace(space, framework=framework.name)
    defaults = {field: values for field, values in DEFAULT_ALLOW.get(framework.name, {}).items()
                if field not in space.allow and field not in space.pin}
    if defaults:
        space = replace(space, allow={**space.allow, **defaults})
    _check_pins(framework, space)
    return space


def _check_pins(framework: Framework, space) -> None:
    if not framework.all_rules or not space.pin:
        return
    from vramopt.constraints import registry
    from vramopt.optimizer.domains import parsed_user_choices

    pins = parsed_user_choices(space)["pin"]
    codes = neutral_codes()
    for field, (value,) in pins.items():
        if field not in registry.BY_FIELD:
            continue
        if field == "grad_comm_precision" and value == "same":
            continue
        codes.update(registry.technique(field).columns(value))
    columns = PlanColumns.from_scalars(**{name: codes[name] for name in PlanColumns.__dataclass_fields__})
    reason = first_refusal(framework.name, columns)
    if reason is not None:
        pinned = ", ".join(f"{field}={space.pin[field]}" for field in space.pin)
        raise InputError(f"--pin {pinned} cannot run under --framework {framework.name}: {reason}")


def plan_columns(plan: Mapping[str, Any]) -> PlanColumns:
    """The columns of a response's training plan (for the exporters' framework check)."""
    from vramopt.plan import encode
    from vramopt.types import TrainingPlan

    fields = {name: plan[name] for name in TrainingPlan.__slots__ if name in plan}
    return encode([TrainingPlan(**fields)])


__all__ = [
    "DEFAULT_FRAMEWORK", "FRAMEWORKS", "FRAMEWORK_NAMES", "Framework", "Rule", "check_runs", "first_refusal",
    "load_framework", "plan_columns", "refused_masks", "space_for_framework",
]
