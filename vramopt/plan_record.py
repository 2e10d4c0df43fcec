"""``TrainingPlan`` and ``ServingPlan``: the typed plans, generated from the techniques' declarations.

Each training technique declares its plan field (``constraints/technique.PlanField``: type,
default, doc, estimate option) in its own module; this module turns them, in
``registry.PLAN_ORDER``, into one frozen, keyword-only dataclass, so that adding a technique
adds its field without editing a shared record. ``vramopt.types.TrainingPlan`` is this
class (resolved on first use, because the techniques import the data layer). ``ServingPlan``
is built the same way from the serving techniques, in ``registry.SERVING_PLAN_ORDER``: the
layout fields they share with training (gpu, gpus, tp, pp) and the serving-only ones
(quantization, KV cache, slots, MIG, speculative decoding).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vramopt.constraints import registry
from vramopt.constraints.technique import REQUIRED, Technique


def plan_techniques() -> tuple[Technique, ...]:
    """The techniques with a field in the training plan, in ``registry.PLAN_ORDER``."""
    return tuple(technique for technique in registry.training_techniques() if not technique.derived)


def _resolve_fields(plan: Any) -> None:
    """Store the value each follower field stands for (etp 0 is tp): a plan always carries
    the degrees it runs."""
    for technique in _FOLLOWERS:
        object.__setattr__(plan, technique.field, technique.plan_field.resolve(plan))


def _field(technique: Technique) -> tuple[str, type, dataclasses.Field]:
    declaration = technique.plan_field
    metadata = {"doc": declaration.doc or technique.description}
    if declaration.default is REQUIRED:
        return technique.field, declaration.python_type, dataclasses.field(metadata=metadata)
    return technique.field, declaration.python_type, dataclasses.field(default=declaration.default, metadata=metadata)


def _plan_class() -> type:
    techniques = plan_techniques()
    missing = [technique.field for technique in techniques if technique.plan_field is None]
    if missing:
        raise TypeError(f"training techniques without a plan field declaration: {', '.join(missing)}")
    plan = dataclasses.make_dataclass(  # keyword-only, so a required field may follow a defaulted one
        "TrainingPlan", [_field(technique) for technique in techniques],
        namespace={"__post_init__": _resolve_fields, "__module__": __name__},
        frozen=True, kw_only=True, slots=True,
    )
    plan.__doc__ = ("One combination of techniques for training; the JSON contract's ``plan``. Fields, in "
                    "registry.PLAN_ORDER: " + ", ".join(technique.field for technique in techniques) + ".")
    return plan


_FOLLOWERS = tuple(technique for technique in plan_techniques() if technique.plan_field and technique.plan_field.resolve)

TrainingPlan = _plan_class()


def serving_plan_techniques() -> tuple[Technique, ...]:
    """The techniques with a field in the serving plan, in ``registry.SERVING_PLAN_ORDER``
    (the values the response adds, such as replicas, are not plan fields)."""
    return tuple(registry.BY_FIELD[name] for name in registry.SERVING_PLAN_ORDER
                 if name not in registry.SERVING_WORKLOAD_PLAN_FIELDS)


def _serving_plan_class() -> type:
    techniques = serving_plan_techniques()
    missing = [technique.field for technique in techniques if technique.plan_field is None]
    if missing:
        raise TypeError(f"serving techniques without a plan field declaration: {', '.join(missing)}")
    plan = dataclasses.make_dataclass(
        "ServingPlan", [_field(technique) for technique in techniques],
        namespace={"__module__": __name__}, frozen=True, kw_only=True, slots=True,
    )
    plan.__doc__ = ("One combination of techniques for serving; the JSON contract's ``plan`` for infer. Fields, in "
                    "registry.SERVING_PLAN_ORDER: " + ", ".join(technique.field for technique in techniques) + ".")
    return plan


ServingPlan = _serving_plan_class()


def serving_codes(values, gpu, fields=None) -> dict[str, int]:
    """The ``ServingColumns`` codes of one serving plan's values (a mapping of field ->
    value, or a ``ServingPlan``), written by each technique's ``serving_columns`` for the GPU
    type ``gpu``; ``fields`` limits them to some techniques (a table's item fields)."""
    read = values.get if isinstance(values, dict) else (lambda name: getattr(values, name))
    codes: dict[str, int] = {}
    for technique in serving_plan_techniques():
        if technique.serving_columns is not None and (fields is None or technique.field in fields):
            codes.update(technique.serving_columns(read(technique.field), gpu))
    return codes


def field_doc(name: str) -> str:
    """The declared meaning of one plan field (for docs and ``--help``)."""
    return next(field for field in dataclasses.fields(TrainingPlan) if field.name == name).metadata["doc"]
