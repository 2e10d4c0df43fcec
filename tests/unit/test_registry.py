"""A checklist that matters, as a test: every technique module is registered, declares its
group, domain, columns and decode step, and every plan field has a technique."""

from __future__ import annotations

import importlib
import pkgutil

import vramopt.constraints as constraints_package
from vramopt.constraints import registry
from vramopt.constraints.technique import GROUPS, Technique
from vramopt.types import ServingPlan, TrainingPlan

SHARED_MODULES = {"technique", "registry", "headroom"}


def _technique_modules():
    for info in pkgutil.iter_modules(constraints_package.__path__):
        if info.name not in SHARED_MODULES:
            yield info.name, importlib.import_module(f"vramopt.constraints.{info.name}")


def test_every_technique_module_is_registered():
    for name, module in _technique_modules():
        assert module in registry.MODULES, f"vramopt/constraints/{name}.py is not in registry.MODULES"
        assert getattr(module, "TECHNIQUES", ()), f"vramopt/constraints/{name}.py declares no TECHNIQUES"


def test_every_technique_declares_domain_columns_and_decode():
    for technique in registry.TECHNIQUES:
        assert isinstance(technique, Technique)
        assert technique.group in GROUPS
        assert callable(technique.decode), f"{technique.field} has no decode step"
        assert callable(technique.columns) and callable(technique.default_values) and callable(technique.parse)
        assert technique.description


def test_every_plan_field_is_decided_by_a_technique():
    assert set(TrainingPlan.__slots__) <= set(registry.fields_for("train"))
    assert set(ServingPlan.__slots__) <= set(registry.fields_for("infer"))


def test_groups_cover_the_separable_fields():
    training = set(registry.KEY_FIELDS) | set(registry.STATE_FIELDS) | set(registry.ACTIVATION_FIELDS)
    serving = set(registry.SERVING_KEY_FIELDS) | set(registry.SERVING_ITEM_FIELDS)
    assert training == set(registry.fields_for("train"))
    assert serving == set(registry.fields_for("infer"))
    assert training | serving == set(registry.BY_FIELD)
    for field in registry.STATE_FIELDS + registry.SERVING_ITEM_FIELDS:
        assert registry.technique(field).group == "state"
    for field in registry.ACTIVATION_FIELDS:
        assert registry.technique(field).group == "activation"
    for field in registry.SERVING_KEY_FIELDS:
        assert registry.technique(field).group == "key"


def test_headroom_module_encodes_the_memory_budget():
    from vramopt.constraints import headroom

    assert callable(headroom.encode_memory_budget)
