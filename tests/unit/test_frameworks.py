"""The framework modules (issue 15 item 1): rules read only their group, every rule has a
source naming the release, the neutral plan runs everywhere, and the known wrong answer
(pp2 + ZeRO-2 exported to DeepSpeed) is gone."""

from __future__ import annotations

import re

import numpy as np
import pytest

from vramopt.costs.columns import PlanColumns
from vramopt.errors import InputError, UnknownNameError
from vramopt.estimate import estimate_training
from vramopt.frameworks import FRAMEWORKS, load_framework, neutral_codes, space_for_framework
from vramopt.frameworks.rule import group_column_names
from vramopt.optimizer.search import solve
from vramopt.types import SearchSpace, TrainingPlan, TrainingWorkload

RANGES = {
    "gpus": (1, 64), "tensor_parallel": (1, 8), "context_parallel": (1, 8), "pipeline_parallel": (1, 8),
    "data_parallel": (1, 8), "precision": (0, 4), "micro_batch": (1, 4), "zero_stage": (0, 3), "offload": (0, 2),
    "grad_comm_precision": (0, 4), "optimizer": (0, 3), "checkpoint_kind": (0, 2), "checkpoint_every": (0, 4),
    "flash_attention": (0, 1), "sequence_parallel": (0, 1), "virtual_stages": (1, 4),
    "expert_parallel": (1, 8), "expert_tensor_parallel": (0, 8),
    "first_stage_layers": (0, 4), "last_stage_layers": (0, 4), "expert_comm_overlap": (0, 1),
    "data_parallel_shard": (0, 4),
}


def _random_columns(rng, size=4000) -> dict[str, np.ndarray]:
    return {name: rng.integers(low, high + 1, size=size) for name, (low, high) in RANGES.items()}


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_each_rule_reads_only_the_key_and_its_own_group(name):
    """A rule that read another group's column would break the separable tables."""
    rng = np.random.default_rng(15)
    for rule in FRAMEWORKS[name].all_rules:
        base = _random_columns(rng)
        groups = group_column_names()
        allowed = set(groups["key"]) | set(groups[rule.group])
        changed = dict(base)
        for column in RANGES:
            if column not in allowed:
                changed[column] = rng.integers(RANGES[column][0], RANGES[column][1] + 1, size=len(base[column]))
        before = np.asarray(rule.refuses(PlanColumns(**base)), dtype=bool)
        after = np.asarray(rule.refuses(PlanColumns(**changed)), dtype=bool)
        assert np.array_equal(before, after), rule.message
        assert before.any(), f"{rule.message}: refuses nothing over random plans"


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_every_rule_cites_the_frameworks_release_and_the_neutral_plan_runs(name):
    framework = FRAMEWORKS[name]
    neutral = PlanColumns.from_scalars(**neutral_codes())
    for rule in framework.all_rules:
        assert framework.version in rule.source and ".py" in rule.source, rule.source
        assert not bool(np.asarray(rule.refuses(neutral)).any()), rule.message


def test_an_unknown_framework_suggests_the_closest():
    with pytest.raises(UnknownNameError, match="did you mean deepspeed"):
        load_framework("deepsped")
    assert load_framework(" Megatron ").name == "megatron"


def test_deepspeed_never_gets_pipeline_with_zero_2_the_issues_example():
    """issue 15: `solve --model 70b --max-gpus 8` gave pp2 + ZeRO-2, which DeepSpeed refuses. Under
    the operator-level throughput model (issue 13) the 8-GPU answer has no pipeline; at 16 GPUs
    the generic physics still prefers a pipeline with ZeRO-3."""
    workload = TrainingWorkload(model="70b")
    generic = solve(workload, SearchSpace(max_gpus=16)).estimate.plan
    assert generic.pipeline_parallel > 1 and generic.zero_stage >= 2  # the generic physics still prefers it
    plan = solve(workload, SearchSpace(max_gpus=16, framework="deepspeed")).estimate.plan
    assert not (plan.pipeline_parallel > 1 and plan.zero_stage >= 2)
    assert plan.virtual_stages == 1 and plan.context_parallel == 1


def test_a_pin_the_framework_cannot_run_names_the_rule():
    with pytest.raises(InputError, match="pipeline parallelism needs zero_stage <= 1.*pipe/engine.py"):
        space_for_framework(SearchSpace(max_gpus=8, pin={"zero_stage": "3", "pipeline_parallel": "8"}, framework="deepspeed"))
    with pytest.raises(InputError, match="torchtitan: the optimizer is Adam"):
        space_for_framework(SearchSpace(pin={"optimizer": "sgd"}, framework="torchtitan"))
    # A pin alone is fine when the rule needs another field too (zero 3 without a pipeline).
    assert space_for_framework(SearchSpace(pin={"zero_stage": "3"}, framework="deepspeed")).framework == "deepspeed"


def test_torchtitan_searches_fp32_gradient_reduction_by_default():
    space = space_for_framework(SearchSpace(framework="torchtitan"))
    assert space.allow["grad_comm_precision"] == ("fp32",)
    plan = solve(TrainingWorkload(model="8b", global_batch=64), SearchSpace(gpus=("h100",), max_gpus=8, framework="torchtitan")).estimate.plan
    assert plan.grad_comm_precision == "fp32" and plan.zero_stage != 1 and plan.optimizer == "adam"


def test_estimate_refuses_a_plan_the_framework_cannot_run():
    workload = TrainingWorkload(model="8b", global_batch=64)
    plan = TrainingPlan(gpu="h100", gpus=8, pipeline_parallel=2, zero_stage=2)
    estimate_training(workload, plan)  # generic: fine
    with pytest.raises(InputError, match="cannot run under --framework deepspeed"):
        estimate_training(workload, plan, framework="deepspeed")
    estimate_training(workload, TrainingPlan(gpu="h100", gpus=8, pipeline_parallel=2, zero_stage=1, grad_comm_precision="bf16"),
                      framework="megatron")


def test_serving_has_no_framework():
    from vramopt.optimizer.problem import build_problem
    from vramopt.types import ServingWorkload

    with pytest.raises(InputError, match="applies to training workloads"):
        build_problem(ServingWorkload(model="8b"), SearchSpace(framework="megatron"))


def test_the_request_schema_lists_every_framework():
    import json
    from pathlib import Path

    from vramopt.frameworks import FRAMEWORK_NAMES

    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "schema" / "vramopt-request-v1.schema.json").read_text())
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "framework" in node.get("properties", {}):
                found.append(node["properties"]["framework"]["enum"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    assert found and all(tuple(enum) == FRAMEWORK_NAMES for enum in found)


def test_the_api_takes_the_framework_in_solve_and_estimate_requests():
    from vramopt import api

    request = {"workload": {"model": "8b", "global_batch": 64},
               "plan": {"gpu": "h100", "gpus": 8, "pipeline_parallel": 2, "zero_stage": 2}}
    assert api.estimate(request).data["plan"]["zero_stage"] == 2  # generic: fine
    with pytest.raises(InputError, match="cannot run under --framework deepspeed"):
        api.estimate({**request, "framework": "deepspeed"})
    with pytest.raises(UnknownNameError, match="did you mean megatron"):
        api.estimate({**request, "framework": "megatorn"})
    assert api.EstimateRequest.from_dict({**request, "framework": "megatron"}).to_dict()["framework"] == "megatron"
    solved = api.solve({"workload": {"model": "8b", "global_batch": 64}, "space": {"gpus": ["h100"], "max_gpus": 8, "framework": "megatron"}})
    assert solved.data["plan"]["zero_stage"] <= 1


@pytest.mark.parametrize(("framework", "change", "rule"), [
    ("deepspeed", {"context_parallel": 2, "gpus": 2}, "no ring-attention context parallelism"),
    ("megatron", {"optimizer": "adam8bit"}, "--optimizer takes adam or sgd"),
    ("torchtitan", {"optimizer": "adafactor", "zero_stage": 3, "grad_comm_precision": "fp32"}, "the optimizer is Adam or AdamW"),
])
def test_a_techniques_declared_framework_rule_refuses_the_plan(framework, change, rule):
    """The refusals that live with their technique (Contribution.framework_rules) are the
    framework's rules like any other (DeepSpeed 0.19.8 has no KV ring; Megatron-LM's
    --optimizer choices; torchtitan's torch.optim Adam/AdamW)."""
    from vramopt.estimate import estimate_training

    plan = TrainingPlan(**{"gpu": "h100", "gpus": 1, **change})
    with pytest.raises(InputError, match=re.escape(rule)):
        estimate_training(TrainingWorkload(model="llama-3.1-8b", seq_len=8192, global_batch=8), plan, framework=framework)
