"""A checklist that matters, as a test: every technique module is registered, every value of
its domain survives the trip through the coefficient columns and the decode step, every plan
field has a technique, and the headroom constraint admits exactly the plans within budget."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import vramopt.constraints as constraints_package
from vramopt.constraints import registry
from vramopt.constraints.expert_parallel import SAME_AS_TENSOR_PARALLEL
from vramopt.constraints.precision import SAME_AS_PRECISION
from vramopt.constraints.technique import GROUPS, DomainContext, Technique
from vramopt.types import PRECISIONS, ServingPlan, TrainingPlan

SHARED_MODULES = {"technique", "registry", "headroom", "contribution", "validity", "serving_layout", "key_domain",
                  "parallelism_exports"}
"""Modules without techniques of their own (serving_layout is the serving half of parallelism.py's layout fields,
parallelism_exports their exports)."""


def _technique_modules():
    for info in pkgutil.iter_modules(constraints_package.__path__):
        if info.name not in SHARED_MODULES:
            yield info.name, importlib.import_module(f"vramopt.constraints.{info.name}")


def test_every_technique_module_is_registered():
    for name, module in _technique_modules():
        assert module in registry.MODULES, f"vramopt/constraints/{name}.py is not in registry.MODULES"
        assert getattr(module, "TECHNIQUES", ()), f"vramopt/constraints/{name}.py declares no TECHNIQUES"


EXTRA_VALUES = {"precision": PRECISIONS, "grad_comm_precision": PRECISIONS, "gpus": (1, 8, 16), "data_parallel": (1, 2, 4),
                "expert_tensor_parallel": (1, 2, 4)}
"""Values outside the default domains: what --allow may bring (grad_comm_precision defaults
to 'same'), the GPU count and dp, whose domains come from --max-gpus and the layout, and the
experts' tensor-parallel degrees, which a dense model's default domain leaves out."""


def context(kind: str) -> DomainContext:
    return DomainContext(layers=80, gpus_per_node=8, max_gpus=16, global_batch=1024, allow_tp_across_nodes=False,
                         allow_fp4=True, supported_precisions=PRECISIONS, kind=kind)


def as_text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@pytest.mark.parametrize("kind", ["train", "infer"])
def test_every_technique_round_trips_its_values_through_parse_columns_and_decode(kind):
    """What the solver relies on: a value written into the coefficient columns decodes back to
    itself, two values never share codes, and the text a user types parses to the value."""
    for technique in registry.TECHNIQUES:
        if kind not in technique.workloads:
            continue
        assert isinstance(technique, Technique) and technique.group in GROUPS and technique.description
        # The sentinels 'same as the key's precision / tp' resolve against another field's value.
        values = [value for value in technique.default_values(context(kind))
                  if value != SAME_AS_PRECISION and not (technique.field == "expert_tensor_parallel" and value == SAME_AS_TENSOR_PARALLEL)]
        values += [value for value in EXTRA_VALUES.get(technique.field, ()) if value not in values]
        if technique.field == "gpu":  # the GPU type picks the coefficient table; no column carries it
            assert values == [] and technique.columns("b200") == {} and technique.parse(" B200 ") == "b200"
            continue
        assert values, f"{technique.field} has an empty default domain for {kind}"
        codes_seen: dict[tuple, object] = {}
        for value in values:
            assert technique.parse(as_text(value)) == value, (technique.field, value)
            codes = technique.columns(value)
            assert codes, f"{technique.field}={value} writes no coefficient column"
            assert technique.decode(codes) == value, (technique.field, value, codes)
            key = tuple(sorted(codes.items()))
            assert key not in codes_seen, f"{technique.field}: {value} and {codes_seen[key]} share the codes {codes}"
            codes_seen[key] = value


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


@pytest.mark.parametrize(("state_mib", "activation_mib", "fits"), [(60, 40, True), (60, 41, False), (0, 100, True), (101, 0, False)])
def test_the_memory_budget_admits_exactly_the_pairs_within_it(state_mib, activation_mib, fits):
    """One key with a 100 MiB budget: a state item and an activation item fit together iff
    their MiB add up to at most 100 (the boundary included); with the key off, nothing of it
    may be chosen."""
    from ortools.sat.python import cp_model

    from vramopt.constraints import headroom

    cp = cp_model.CpModel()
    key = cp.new_bool_var("key")
    state, activation = cp.new_bool_var("state"), cp.new_bool_var("activation")
    headroom.encode_memory_budget(cp, key, [(state, state_mib)], [(activation, activation_mib)], 100, "test")
    cp.add(key == 1)
    cp.add(state == 1)
    cp.add(activation == 1)
    status = cp_model.CpSolver().solve(cp)
    assert (status in (cp_model.OPTIMAL, cp_model.FEASIBLE)) == fits

    off = cp_model.CpModel()
    key, state = off.new_bool_var("key"), off.new_bool_var("state")
    headroom.encode_memory_budget(off, key, [(state, 1)], [], 100, "test")
    off.add(key == 0)
    off.add(state == 1)
    assert cp_model.CpSolver().solve(off) == cp_model.INFEASIBLE
