"""Every registered technique is complete: domain, validity, memory and time terms, contract
field, display, export mapping (or an explicit not-exported note) and sources (issue 12
item 2). Every registered technique, training and serving, has a ``Contribution`` with every
part (``registry.NOT_MIGRATED`` is empty); a field of both workloads also declares its
serving rules."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from vramopt.constraints import registry
from vramopt.constraints.contribution import EXPORTERS, Contribution, ContractField, Export, missing_parts, no_rules
from vramopt.constraints.technique import PlanField, Technique, parse_choice
from vramopt.costs.columns import PlanColumns
from vramopt.costs.training import TrainingCase
from vramopt.hardware import load_gpu
from vramopt.models import load_model

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schema" / "vramopt-v1.schema.json"
SERVING_SCHEMA = SCHEMA.with_name("vramopt-serving-v1.schema.json")
CONTRIBUTING = [technique for technique in registry.TECHNIQUES if technique.contribution is not None]


def test_every_technique_is_registered_with_its_parts():
    """No exception list: every registered technique, training and serving, has a Contribution."""
    assert registry.NOT_MIGRATED == ()
    for technique in registry.TECHNIQUES:
        assert technique.contribution is not None, (
            f"{technique.field} is registered without a Contribution (validity, memory, time, contract, display, "
            f"exports, sources): give it one"
        )


SAMPLE = Technique(
    field="sample",
    group="state",
    description="a complete technique, for the check's own tests",
    parse=parse_choice("sample", ("a", "b")),
    default_values=lambda context: ("a",),
    columns=lambda value: {},
    decode=lambda codes: "a",
    contribution=Contribution(
        validity=lambda case, columns: {"sample b needs nothing": np.zeros(1, dtype=bool)},
        memory=lambda model, columns: np.zeros(1),
        time=lambda *arguments: np.zeros(1),
        contract=ContractField(name="sample", json_type="string", description="a sample field", enum=("a", "b")),
        display=lambda plan: "sample a",
        exports={"deepspeed": Export(not_exported="nothing to set"), "vllm": Export(not_exported="nothing to set"),
                 "megatron": Export(not_exported="nothing to set"), "torchtitan": Export(not_exported="nothing to set")},
        sources=("assumption: a test fixture",),
    ),
    plan_field=PlanField(python_type=str, default="a", choices=("a", "b"), flags=("--sample",), help="A sample field."),
)


def test_the_sample_is_complete():
    assert missing_parts(SAMPLE) == []


@pytest.mark.parametrize("technique", CONTRIBUTING, ids=lambda technique: technique.field)
def test_every_contributing_technique_has_every_part(technique):
    assert missing_parts(technique) == [], technique.field


@pytest.mark.parametrize(
    "part, change",
    [
        ("display", {"display": None}),
        ("memory", {"memory": None}),
        ("time", {"time": None}),
        ("validity", {"validity": None}),
        ("sources", {"sources": ()}),
        ("export:vllm", {"exports": {"deepspeed": Export(not_exported="nothing to set")}}),
        ("contract", {"contract": dataclasses.replace(SAMPLE.contribution.contract, name="sampel")}),
        ("contract", {"contract": dataclasses.replace(SAMPLE.contribution.contract, json_type="text")}),
    ],
)
def test_the_check_fails_for_a_technique_missing_a_part(part, change):
    broken = dataclasses.replace(SAMPLE, contribution=dataclasses.replace(SAMPLE.contribution, **change))
    assert part in missing_parts(broken)


def test_a_technique_without_a_domain_is_incomplete():
    assert "domain" in missing_parts(dataclasses.replace(SAMPLE, default_values=None))
    assert missing_parts(dataclasses.replace(SAMPLE, contribution=None)) == ["contribution"]
    assert missing_parts(dataclasses.replace(SAMPLE, plan_field=None)) == ["plan_field"]


def _columns(**values):
    base = dict(gpus=8, tensor_parallel=1, pipeline_parallel=1, data_parallel=8, sequence_parallel=0, virtual_stages=1,
                zero_stage=1, checkpoint_kind=0, checkpoint_every=0, precision=1, grad_comm_precision=1, offload=0,
                flash_attention=1, micro_batch=1)
    base.update(values)
    return PlanColumns.from_scalars(**base)


def _serving_columns(**values):
    from vramopt.costs.inference import ServingColumns

    base = dict(gpus=8, tensor_parallel=2, pipeline_parallel=1, quantization=1, kv_cache_dtype=1, paged_kv=1, speculative=0,
                slots=16, mig_profile=-1)
    base.update(values)
    return ServingColumns(**{name: np.array([value]) for name, value in base.items()})


def _serving_case():
    from vramopt.costs.inference import ServingCase

    return ServingCase(model=load_model("llama-3.1-8b"), gpu=load_gpu("h100"), context=8192)


def _is_serving_only(technique) -> bool:
    return technique.workloads == ("infer",)


def _check_rules(rules, reasons, field):
    # A technique without rules of its own says so with no_rules; any other returns its rules.
    assert bool(reasons) != (rules is no_rules), field
    assert all(isinstance(message, str) and len(message) > 20 for message in reasons)
    for mask in reasons.values():
        assert np.asarray(mask).dtype == bool


@pytest.mark.parametrize("technique", CONTRIBUTING, ids=lambda technique: technique.field)
def test_validity_rules_are_messages_over_masks(technique):
    """Training rules read (TrainingCase, PlanColumns), serving rules (ServingCase,
    ServingColumns); a field of both declares both (``serving_validity``)."""
    contribution = technique.contribution
    if not _is_serving_only(technique):
        case = TrainingCase(model=load_model("llama-3.1-8b"), gpu=load_gpu("h100"), seq_len=4096, global_batch=64)
        _check_rules(contribution.validity, contribution.validity(case, _columns()), technique.field)
    if "infer" in technique.workloads:
        rules = contribution.validity if _is_serving_only(technique) else contribution.serving_validity
        _check_rules(rules, rules(_serving_case(), _serving_columns()), technique.field)


def test_a_field_of_both_workloads_without_serving_rules_is_incomplete():
    tensor_parallel = registry.technique("tensor_parallel")
    broken = dataclasses.replace(tensor_parallel, contribution=dataclasses.replace(tensor_parallel.contribution, serving_validity=None))
    assert "validity:serving" in missing_parts(broken)


def test_the_serving_rules_are_the_techniques_rules_in_serving_order():
    """Each serving technique owns its rules (issue 12 item 2); the gathered messages are the
    ones estimate and the solver have always used, in the serving order."""
    from vramopt.constraints.validity import serving_invalid_reasons

    reasons = serving_invalid_reasons(_serving_case(), _serving_columns())
    assert list(reasons) == [
        "tensor_parallel must divide the attention heads",
        "pipeline_parallel must divide the layers",
        "tensor_parallel x pipeline_parallel must divide the GPU count",
        "expert_parallel > 1 needs a mixture-of-experts model",
        "expert_parallel must divide the routed experts",
        "expert_parallel must be a multiple of tensor_parallel (the attention's tp groups, vLLM: ep = tp x dp)",
        "expert-parallel serving runs without pipeline parallelism (pipeline_parallel 1)",
        "expert-parallel serving runs on whole GPUs, not MIG instances",
        "expert_parallel must divide the GPU count",
        "the GPU cannot run this quantization",
        "a MIG instance serves one replica without tensor or pipeline parallelism",
        "the GPU has no MIG profiles",
        "fp8 KV cache needs fp8 support",
        "slots must be at least 1",
    ]
    assert not any(bool(mask.any()) for mask in reasons.values())
    on_a100 = ServingCaseFor("a100-80gb")
    broken = serving_invalid_reasons(on_a100, _serving_columns(tensor_parallel=3, mig_profile=0))
    assert {message for message, mask in broken.items() if mask.any()} == {
        "tensor_parallel must divide the attention heads", "tensor_parallel x pipeline_parallel must divide the GPU count",
        "the GPU cannot run this quantization", "a MIG instance serves one replica without tensor or pipeline parallelism",
        "fp8 KV cache needs fp8 support",
    }


def ServingCaseFor(gpu_name):
    from vramopt.costs.inference import ServingCase

    return ServingCase(model=load_model("llama-3.1-8b"), gpu=load_gpu(gpu_name), context=8192)


@pytest.mark.parametrize("technique", CONTRIBUTING, ids=lambda technique: technique.field)
def test_the_contract_field_is_in_the_json_schema(technique):
    contract = technique.contribution.contract
    schema = json.loads((SERVING_SCHEMA if _is_serving_only(technique) else SCHEMA).read_text())
    plan = schema["$defs"]["plan"]["properties"]
    assert contract.name in plan, f"docs/schema/vramopt-v1.schema.json has no plan.{contract.name}"
    entry = plan[contract.name]
    if "$ref" in entry:  # "#/$defs/precision"
        entry = schema["$defs"][entry["$ref"].rsplit("/", 1)[1]]
    if contract.enum:
        assert tuple(entry["enum"]) == tuple(contract.enum)


@pytest.mark.parametrize("technique", CONTRIBUTING, ids=lambda technique: technique.field)
def test_every_exporter_is_covered(technique):
    exports = technique.contribution.exports
    assert set(EXPORTERS) <= set(exports), technique.field


# ---------------------------------------------------------------------------------------
# The edges read the techniques: the plan object, the table lines and the exports come from
# the registry, so a technique that declares its parts is shown, serialized and exported.


def _estimate(**plan_values):
    from vramopt.estimate import estimate_training
    from vramopt.types import TrainingPlan, TrainingWorkload

    values = dict(gpu="h100", gpus=16, tensor_parallel=2, context_parallel=2, pipeline_parallel=2, sequence_parallel=True,
                  virtual_stages=2, zero_stage=1, checkpointing="every:2", precision="fp8", grad_comm_precision="bf16",
                  offload="cpu", flash_attention=True, micro_batch=2, optimizer="adam")
    values.update(plan_values)
    return estimate_training(TrainingWorkload(model="llama-3.1-8b", seq_len=16384, global_batch=64), TrainingPlan(**values))


def test_the_plan_order_holds_every_training_technique_once():
    training = [technique.field for technique in registry.TECHNIQUES if "train" in technique.workloads]
    techniques_in_order = [name for name in registry.PLAN_ORDER if name not in registry.WORKLOAD_PLAN_FIELDS]
    assert sorted(techniques_in_order) == sorted(training)
    assert len(set(registry.PLAN_ORDER)) == len(registry.PLAN_ORDER)


def test_training_plan_fields_are_the_techniques_that_are_not_derived():
    from vramopt.types import TrainingPlan

    fields = {technique.field for technique in registry.training_techniques() if not technique.derived}
    assert set(TrainingPlan.__slots__) == fields


def test_the_response_plan_is_in_plan_order():
    plan = _estimate().to_dict()["plan"]
    assert tuple(plan) == registry.PLAN_ORDER


@pytest.mark.parametrize("technique", [technique for technique in CONTRIBUTING
                                       if technique.contribution.display_line and not _is_serving_only(technique)],
                         ids=lambda technique: technique.field)
def test_every_displayed_phrase_is_on_its_line(technique):
    from vramopt.display import render_plan

    for overrides in ({}, {"optimizer": "adam8bit", "sequence_parallel": False, "zero_stage": 3, "offload": "none"}):
        result = _estimate(**overrides).to_dict()
        phrase = technique.contribution.display(result["plan"])
        line = next(line for line in render_plan(result).splitlines() if line.startswith(technique.contribution.display_line))
        assert phrase in line, (technique.field, phrase, line)


def test_a_phrase_a_technique_stops_declaring_leaves_the_table(monkeypatch):
    """The table is built from the declarations, not written out beside them."""
    from vramopt.display import render_plan

    zero = registry.technique("zero_stage")
    quiet = dataclasses.replace(zero, contribution=dataclasses.replace(zero.contribution, display=lambda plan: ""))
    monkeypatch.setitem(registry.BY_FIELD, "zero_stage", quiet)
    assert "ZeRO-1" not in render_plan(_estimate().to_dict())


def test_the_item_groups_are_the_techniques_of_each_group():
    """problem.py builds the state and activation items from these lists and each technique's
    domain and neutral value: a technique of either group must be in its list."""
    for group, fields in (("state", registry.STATE_FIELDS), ("activation", registry.ACTIVATION_FIELDS)):
        members = {technique.field for technique in registry.training_techniques() if technique.group == group}
        assert set(fields) == members, group
        for field in fields:
            technique = registry.technique(field)
            assert technique.neutral is not None, f"{field} declares no neutral value"
            technique.columns(technique.neutral)  # a value the technique can write
    keys = {technique.field for technique in registry.training_techniques() if technique.group == "key"}
    assert set(registry.KEY_FIELDS) == keys


def test_every_training_technique_has_an_estimate_option():
    """`vramopt estimate` builds its plan from one option per technique (cli_options.build_plan
    reads them by field name), and the option is refused on serving (TRAINING_ONLY) unless the
    field is shared with serving plans."""
    from vramopt.cli import estimate
    from vramopt.cli_options import TRAINING_ONLY

    options = {parameter.name for parameter in estimate.params}
    for technique in registry.training_techniques():
        if technique.derived:
            continue
        assert technique.field in options, f"estimate has no option for {technique.field}"
        if "infer" not in technique.workloads:
            assert technique.field in TRAINING_ONLY, f"{technique.field} is missing from cli_options.TRAINING_ONLY"


def test_the_schema_plan_is_the_plan_order():
    schema = json.loads(SCHEMA.read_text())
    training_plan = schema["$defs"]["plan"]
    assert tuple(training_plan["properties"]) == registry.PLAN_ORDER


# ---------------------------------------------------------------------------------------
# Serving: the same declarations drive the serving plan object, table and vLLM export.


def _serve(**plan_values):
    from vramopt.estimate import estimate_serving
    from vramopt.types import ServingPlan, ServingWorkload

    values = dict(gpu="h100", gpus=8, tensor_parallel=2, pipeline_parallel=2, quantization="fp8", kv_cache_dtype="fp8",
                  paged_kv=True, slots=32, speculative_decoding=True)
    values.update(plan_values)
    return estimate_serving(ServingWorkload(model="llama-3.1-70b", context=8192), ServingPlan(**values))


SERVING_PLANS = ({}, {"paged_kv": False, "speculative_decoding": False, "quantization": "bf16", "slots": 1},
                 {"gpus": 2, "tensor_parallel": 1, "pipeline_parallel": 1, "mig_profile": "3g.40gb", "quantization": "int4"})


def test_the_serving_order_holds_every_serving_technique_once():
    from vramopt.types import ServingPlan

    serving = {technique.field for technique in registry.TECHNIQUES if "infer" in technique.workloads}
    assert sorted(registry.SERVING_ORDER) == sorted(serving)
    assert [name for name in registry.SERVING_PLAN_ORDER if name not in registry.SERVING_WORKLOAD_PLAN_FIELDS] != []
    assert {name for name in registry.SERVING_PLAN_ORDER if name not in registry.SERVING_WORKLOAD_PLAN_FIELDS} == serving
    assert len(set(registry.SERVING_PLAN_ORDER)) == len(registry.SERVING_PLAN_ORDER)
    assert set(ServingPlan.__slots__) == serving


def test_the_serving_response_plan_and_schema_are_in_serving_plan_order():
    schema = json.loads(SERVING_SCHEMA.read_text())
    assert tuple(schema["$defs"]["plan"]["properties"]) == registry.SERVING_PLAN_ORDER
    assert tuple(_serve().to_dict()["plan"]) == registry.SERVING_PLAN_ORDER


@pytest.mark.parametrize("technique", [technique for technique in CONTRIBUTING if _is_serving_only(technique)],
                         ids=lambda technique: technique.field)
def test_every_serving_phrase_is_on_its_line(technique):
    from vramopt.display_solve import render_serving

    for overrides in SERVING_PLANS:
        result = _serve(**overrides).to_dict()
        phrase = technique.contribution.display(result["plan"])
        line = next(line for line in render_serving(result).splitlines() if line.startswith(technique.contribution.display_line))
        assert phrase in line, (technique.field, phrase, line)


def test_a_serving_phrase_a_technique_stops_declaring_leaves_the_table(monkeypatch):
    from vramopt.display_solve import render_serving

    slots = registry.technique("slots")
    monkeypatch.setitem(registry.BY_FIELD, "slots", dataclasses.replace(
        slots, contribution=dataclasses.replace(slots.contribution, display=lambda plan: "")))
    table = render_serving(_serve().to_dict())
    assert "slots each" not in table and "replicas  2 (tp=2 pp=2), 64 concurrent sequences" in table


def test_every_vllm_argument_a_technique_writes_has_its_place():
    """exporters/vllm.py is a loop over the serving techniques' exports; the arguments come
    out in its ARGUMENT_ORDER, so each one a technique writes must be listed there."""
    from vramopt.exporters.vllm import ARGUMENT_ORDER, vllm_args

    for overrides in SERVING_PLANS:
        content = vllm_args(_serve(**overrides).to_dict()).content
        assert list(content) == [name for name in ARGUMENT_ORDER if name in content]


def test_the_vllm_export_is_built_from_the_declarations(monkeypatch):
    from vramopt.exporters.vllm import vllm_args

    kv = registry.technique("kv_cache_dtype")
    monkeypatch.setitem(registry.BY_FIELD, "kv_cache_dtype", dataclasses.replace(
        kv, contribution=dataclasses.replace(kv.contribution, exports={**kv.contribution.exports, "vllm": Export(not_exported="x")})))
    assert "kv_cache_dtype" not in vllm_args(_serve().to_dict()).content
