"""Issue 11 item 10: input that belongs to another workload is refused, never ignored.

Before: ``solve --model 8b --pin quantization=fp8`` solved a training plan as if the pin
were not there, ``--workload infer --pin zero_stage=3`` a serving plan, a training request
with ``"pin": {"slots": 4}`` likewise; ``lora_rank: -5`` on a train request was accepted;
``--allow-fp4`` with ``--workload infer`` changed nothing; ``--forbid data_parallel=8``
still chose dp=8. Each is now one ``error:`` line and exit status 2 (an ``InputError`` from
the API), or, for the forbid, honoured.
"""

from __future__ import annotations

import json

import pytest

import vramopt
from tests.cli_runner import invoke
from vramopt.api import EstimateRequest, SolveRequest
from vramopt.constraints import registry
from vramopt.errors import InputError
from vramopt.optimizer.domains import parsed_user_choices
from vramopt.types import SearchSpace, TrainingWorkload

TRAINING_ONLY_FIELDS = ("context_parallel", "expert_tensor_parallel", "first_stage_layers", "last_stage_layers", "data_parallel", "sequence_parallel", "virtual_stages", "precision", "grad_comm_precision",
                        "micro_batch", "zero_stage", "data_parallel_shard", "offload", "optimizer", "checkpointing", "flash_attention", "expert_comm_overlap")
SERVING_ONLY_FIELDS = ("quantization", "mig_profile", "kv_cache_dtype", "paged_kv", "slots", "speculative_decoding")
"""Written out from the plan dataclasses (TrainingPlan / ServingPlan), not read from the
registry the code under test uses."""


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


def test_the_registry_splits_plan_fields_between_workloads_as_the_plans_do():
    """issue 11 item 10: the one place that says which workload a field belongs to."""
    shared = {"gpu", "gpus", "tensor_parallel", "pipeline_parallel", "expert_parallel"}  # ep: serving too (issue 14 item 2)
    for kind in ("train", "finetune", "lora", "qlora"):
        assert set(registry.fields_for(kind)) == shared | set(TRAINING_ONLY_FIELDS)
    assert set(registry.fields_for("infer")) == shared | set(SERVING_ONLY_FIELDS)


@pytest.mark.parametrize("option", ["--pin", "--allow", "--forbid"])
def test_a_serving_field_on_a_training_solve_is_refused(option):
    """issue 11 item 10: `solve --model 8b --pin quantization=fp8` solved a training plan."""
    result = invoke(["solve", "--model", "8b", option, "quantization=fp8", "--time-limit", "5"])
    assert_one_line_error(result, f"{option} quantization", "serving plans", "not of train plans")


@pytest.mark.parametrize("field, value", [("zero_stage", "3"), ("micro_batch", "2"), ("checkpointing", "selective"),
                                          ("precision", "fp8"), ("data_parallel", "2")])
def test_a_training_field_on_a_serving_solve_is_refused(field, value):
    """issue 11 item 10: `--workload infer --pin zero_stage=3` solved a serving plan."""
    result = invoke(["solve", "--workload", "infer", "--model", "8b", "--pin", f"{field}={value}", "--time-limit", "5"])
    assert_one_line_error(result, f"--pin {field}", "training plans", "not of infer plans")


def test_pareto_refuses_a_field_of_the_other_workload_too():
    """issue 11 item 10: the Pareto front reads the same search space."""
    result = invoke(["pareto", "--model", "8b", "--max-gpus", "2", "--pin", "slots=4"])
    assert_one_line_error(result, "--pin slots", "serving plans")


def test_lora_and_finetune_searches_refuse_serving_fields():
    """issue 11 item 10: every training kind has the training fields only."""
    for kind in ("finetune", "lora", "qlora"):
        result = invoke(["solve", "--workload", kind, "--model", "8b", "--pin", "kv_cache_dtype=fp8", "--time-limit", "5"])
        assert_one_line_error(result, "--pin kv_cache_dtype", f"not of {kind} plans")


def test_a_training_request_with_a_slots_pin_is_refused_by_the_api_and_in_a_request_file(tmp_path):
    """issue 11 item 10: a training job with "pin": {"slots": 4} was solved without it."""
    request = {"workload": {"model": "8b"}, "space": {"max_gpus": 2, "pin": {"slots": 4}}}
    with pytest.raises(InputError, match="slots is a field of serving plans"):
        vramopt.solve(request)
    with pytest.raises(InputError, match="slots is a field of serving plans"):
        vramopt.pareto(request)
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    assert_one_line_error(invoke(["solve", "--request", str(path)]), "--pin slots", "serving plans")


def test_a_serving_request_with_a_zero_stage_pin_is_refused_by_the_api():
    """issue 11 item 10: the API reads the same fields as the CLI."""
    request = SolveRequest(vramopt.ServingWorkload(model="8b"), SearchSpace(max_gpus=1, allow={"zero_stage": ("1", "2")}))
    with pytest.raises(InputError, match="zero_stage is a field of training plans"):
        vramopt.solve(request)


def test_check_workload_fields_is_the_function_every_reader_can_call():
    """issue 11 item 10: pack jobs call the same check (parsed_user_choices with a kind)."""
    from vramopt.optimizer.domains import check_workload_fields

    check_workload_fields("train", SearchSpace(pin={"zero_stage": "3"}, allow={"gpus": ("1", "2")}))
    check_workload_fields("infer", SearchSpace(pin={"slots": "4"}, forbid={"quantization": ("int4",)}))
    with pytest.raises(InputError, match="slots is a field of serving plans"):
        parsed_user_choices(SearchSpace(pin={"slots": "4"}), kind="lora")
    with pytest.raises(InputError, match="zero_stage is a field of training plans"):
        parsed_user_choices(SearchSpace(forbid={"zero_stage": ("0",)}), kind="infer")
    # An unknown name is still "unknown", with close names of that workload's fields.
    with pytest.raises(InputError, match="unknown plan field 'slot'"):
        check_workload_fields("infer", SearchSpace(pin={"slot": "4"}))


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--workload", "infer"], ["--allow-fp4", "does not apply to workload infer", "--allow quantization=bf16,fp8,fp4"]),
        (["--workload", "lora"], ["--allow-fp4", "workload lora", "--allow precision=bf16,fp4"]),
        (["--allow", "precision=bf16,fp8"], ["--allow-fp4", "which --allow precision replaces"]),
        (["--pin", "precision=bf16"], ["--allow-fp4", "which --pin precision replaces"]),
    ],
)
def test_allow_fp4_where_it_adds_nothing_is_refused(args, fragments):
    """issue 11 item 10: `--allow-fp4 --workload infer` was silently ignored."""
    result = invoke(["solve", "--model", "8b", "--allow-fp4", "--time-limit", "5"] + args)
    assert_one_line_error(result, *fragments)


def test_allow_fp4_on_pretraining_is_still_used():
    """issue 11 item 10: where --allow-fp4 does something it is accepted (b200 runs fp4)."""
    result = invoke(["solve", "--model", "8b", "--allow-fp4", "--pin", "gpus=8", "--format", "json", "--time-limit", "10"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["plan"]["precision"] == "fp4"


@pytest.mark.parametrize(
    "workload, fragment",
    [
        ({"model": "8b", "lora_rank": -5}, "workload.lora_rank: must be an integer from 1 to 65,536, got -5"),
        ({"model": "8b", "kind": "lora", "lora_rank": -5}, "workload.lora_rank: must be an integer from 1 to 65,536"),
        ({"model": "8b", "kind": "qlora", "lora_rank": 70_000}, "workload.lora_rank: must be an integer from 1 to 65,536"),
        ({"model": "8b", "lora_rank": 8}, "workload.lora_rank: applies only to workload kinds lora and qlora"),
        ({"model": "8b", "kind": "finetune", "lora_targets": ["q", "v"]}, "workload.lora_targets: applies only to"),
        ({"model": "8b", "kind": "lora", "lora_targets": ["q", "qkv"]}, "workload.lora_targets: 'qkv' is not one of"),
        ({"model": "8b", "kind": "lora", "lora_targets": []}, "workload.lora_targets: must be a non-empty list"),
        ({"model": "8b", "kind": "lora", "lora_targets": ["q", "q"]}, "workload.lora_targets: lists 'q' twice"),
    ],
)
def test_lora_fields_out_of_range_or_on_a_kind_without_adapters_are_refused(workload, fragment):
    """issue 11 item 10: `lora_rank: -5` on a train request was accepted by the API."""
    for call, request in ((vramopt.solve, {"workload": workload, "space": {"max_gpus": 1}}),
                          (vramopt.pareto, {"workload": workload, "space": {"max_gpus": 1}}),
                          (vramopt.estimate, {"workload": workload, "plan": {"gpu": "b200", "gpus": 1}})):
        with pytest.raises(InputError, match="request " + fragment.replace("(", r"\(").replace(")", r"\)")):
            call(request)


def test_a_request_dataclass_with_a_negative_rank_is_refused_and_a_default_rank_round_trips():
    """issue 11 item 10: the dataclass path is read by the same parser; a train request's
    to_dict() writes the default LoRA fields and must still be accepted."""
    with pytest.raises(InputError, match="lora_rank"):
        vramopt.estimate(EstimateRequest(TrainingWorkload(model="8b", lora_rank=-5), vramopt.TrainingPlan(gpu="b200", gpus=1)))
    request = EstimateRequest(TrainingWorkload(model="8b"), vramopt.TrainingPlan(gpu="b200", gpus=1))
    assert EstimateRequest.from_dict(request.to_dict()) == request
    assert vramopt.estimate(request.to_dict()).to_dict()["lora"] is None


def test_forbid_data_parallel_is_honoured():
    """issue 11 item 10: `--forbid data_parallel=8` still chose dp=8 (the default domain of
    data_parallel is 'any divisor of the global batch', and the forbid was not applied)."""
    result = invoke(["solve", "--model", "8b", "--pin", "gpus=8", "--forbid", "data_parallel=8", "--format", "json",
                     "--time-limit", "10"])
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)["plan"]
    assert plan["gpus"] == 8 and plan["data_parallel"] != 8
