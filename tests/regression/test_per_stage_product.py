"""Issue 18 item 1: per-stage activation checkpointing in the product: ``estimate
--stage-checkpointing``, ``solve --per-stage``, the JSON contract (schema and API) and the
exports (vramopt/stage_checkpointing.py, vramopt/display_stages.py)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from vramopt import api, cli
from vramopt.errors import InputError
from vramopt.estimate import estimate_training
from vramopt.exporters import export
from vramopt.optimizer.per_stage import per_stage_search
from vramopt.types import SearchSpace, TrainingPlan, TrainingWorkload

from tests.cli_runner import make_runner

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schema"

# Llama 3.1 70B, tp 4 pp 4 on 16 A100 40GB (the per-stage library test's case): memory binds, so stages differ.
LLAMA_ARGS = ["--model", "llama-3.1-70b", "--gpu", "a100-40gb", "--gpus", "16", "--tp", "4", "--pp", "4", "--sequence-parallel",
              "--flash-attention", "--zero", "1", "--offload", "cpu", "--global-batch", "64"]
LLAMA_WORKLOAD = TrainingWorkload(model="llama-3.1-70b", global_batch=64)
LLAMA_SPACE = SearchSpace(gpus=("a100-40gb",), max_gpus=16, workers=1,
                          pin={"pipeline_parallel": ("4",), "tensor_parallel": ("4",), "gpus": ("16",)})
GPT3_PLAN = {"gpu": "a100-80gb", "gpus": 64, "tensor_parallel": 4, "pipeline_parallel": 8, "virtual_stages": 4,
             "sequence_parallel": True, "zero_stage": 1, "flash_attention": True, "micro_batch": 1}
TORCHTITAN_PLAN = {"gpu": "a100-40gb", "gpus": 16, "tensor_parallel": 4, "pipeline_parallel": 4, "sequence_parallel": True,
                   "zero_stage": 3, "grad_comm_precision": "fp32", "flash_attention": True, "micro_batch": 1}
"""A plan torchtitan runs (a model it has a config for; FSDP2: no ZeRO-1, gradients reduced in fp32)."""
GPT3_WORKLOAD = {"model": "gpt3-175b", "seq_len": 2048, "global_batch": 64}


def invoke(args):
    result = make_runner().invoke(cli.main, args)
    assert "Traceback" not in result.output + result.stderr
    return result


def response_schema():
    return json.loads((SCHEMAS / "vramopt-v1.schema.json").read_text())


def test_estimate_shows_and_carries_each_stage():
    """issue 18 item 1: estimate accepts one checkpointing per stage, displays each stage's
    memory, budget and headroom, and the JSON (valid against the v1 schema) carries them."""
    args = ["estimate", *LLAMA_ARGS, "--stage-checkpointing", "block:8,block:2,none,none"]
    table = invoke(args)
    assert table.exit_code == 0, table.stderr
    assert "per-stage checkpointing:" in table.stdout
    assert "stage 0: 20 layers, block:8" in table.stdout and "stage 3: 20 layers, none" in table.stdout
    data = json.loads(invoke([*args, "--format", "json"]).stdout)
    jsonschema.validate(data, response_schema())
    block = data["per_stage"]
    assert [row["checkpointing"] for row in block["stages"]] == ["block:8", "block:2", "none", "none"]
    assert [row["in_flight_micro_batches"] for row in block["stages"]] == [4.0, 3.0, 2.0, 1.0]
    assert block["fits"] and all(row["headroom_bytes"] >= 0 for row in block["stages"])
    assert not data["memory"]["fits"]  # the uniform plan (checkpointing none) does not fit; the per-stage one does
    assert block["exports"]["megatron"]["expressible"] is False


def test_estimate_with_one_value_on_every_stage_is_the_uniform_estimate():
    """issue 18 item 1: the same checkpointing on every stage gives back the uniform estimate:
    its heaviest stage's memory is the plan's total, its slowest stage's step the plan's."""
    for value in ("none", "selective", "every:1", "every:4"):
        data = json.loads(invoke(["estimate", *LLAMA_ARGS, "--checkpoint", value, "--stage-checkpointing", ",".join([value] * 4),
                                  "--format", "json"]).stdout)
        block = data["per_stage"]
        assert max(row["memory_bytes"] for row in block["stages"]) == pytest.approx(data["memory"]["total_bytes"], rel=1e-12)
        assert block["step_time_s"] == pytest.approx(data["throughput"]["step_time_s"], rel=1e-12)
        assert block["gain_fraction"] == pytest.approx(0.0, abs=1e-12)


def test_the_estimate_of_the_searched_plan_is_the_search_answer():
    """issue 18 item 1: estimate's per-stage figures and the search's are the same terms: the
    per-stage optimum re-evaluated stage by stage gives its memory per stage and its tokens/s."""
    answer = per_stage_search(LLAMA_WORKLOAD, LLAMA_SPACE)
    response = api.estimate({"workload": {"model": "llama-3.1-70b", "global_batch": 64}, "plan": _plan_of(answer.plan),
                             "stage_checkpointing": [stage.checkpointing for stage in answer.stages]}).to_dict()
    block = response["per_stage"]
    assert block["tokens_per_s"] == pytest.approx(answer.tokens_per_s, rel=1e-12)
    for row, stage in zip(block["stages"], answer.stages):
        assert row["memory_bytes"] == pytest.approx(stage.memory_bytes, rel=1e-12)
        assert row["checkpointing"] == stage.checkpointing and row["fits"]


def _plan_of(plan: TrainingPlan) -> dict:
    return {name: getattr(plan, name) for name in plan.__slots__}


@pytest.mark.parametrize(("value", "message"), [
    ("block:8,none", "names 2 stages; the plan has pipeline_parallel 4"),
    ("block:x,none,none,none", "block:N needs N a positive integer"),
    ("none,sometimes,none,none", "'sometimes' is not one of none, selective"),
    ("block:21,none,none,none", "stage 0 checkpointing block:21: the stage has 20 layers"),
    ("none,,none,none", "one value per pipeline stage"),
    ("none,none,none,none --format csv", "no CSV view"),
])
def test_bad_stage_checkpointing_is_one_line(value, message):
    """issue 18 item 1: a malformed per-stage request is one error line and exit status 2."""
    value, *extra = value.split(" ")
    result = invoke(["estimate", *LLAMA_ARGS, "--stage-checkpointing", value, *extra])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and message in result.stderr and result.stderr.count("\n") == 1


def test_solve_per_stage_adds_the_optimum_and_leaves_the_uniform_answer():
    """issue 18 item 1: solve --per-stage keeps the uniform answer exactly and adds the
    per-stage optimum: at least as fast, every stage within budget, each with a why."""
    base = ["solve", "--model", "llama-3.1-70b", "--gpu", "a100-40gb", "--max-gpus", "16", "--global-batch", "64",
            "--pin", "gpus=16", "--pin", "tensor_parallel=4", "--pin", "pipeline_parallel=4", "--workers", "1", "--format", "json"]
    plain = json.loads(invoke(base).stdout)
    result = invoke([*base, "--per-stage"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["plan"] == plain["plan"] and data["throughput"] == plain["throughput"]
    block = data["per_stage"]
    assert block["uniform_tokens_per_s"] == plain["throughput"]["tokens_per_s"]
    assert block["tokens_per_s"] >= block["uniform_tokens_per_s"] * (1 - 1e-9) and block["gain_fraction"] > 0
    assert block["fits"] and all(row["why"] and row["memory_bytes"] <= row["budget_bytes"] for row in block["stages"])
    assert "checkpointing" not in block["plan"] and block["plan"]["pipeline_parallel"] == 4
    table = invoke(base[:-2] + ["--per-stage"]).stdout
    assert "per-stage checkpointing:" in table and "against the uniform plan" in table


def test_solve_per_stage_refuses_what_it_does_not_search():
    """issue 18 item 1: --per-stage with the exhaustive engine or a non-throughput objective is refused, not ignored."""
    base = ["solve", "--model", "llama-3.1-8b", "--gpu", "h100", "--max-gpus", "8", "--per-stage"]
    for extra, message in ((["--engine", "exhaustive"], "searched by CP-SAT"), (["--format", "csv"], "no CSV view"),
                           (["--objective", "per-gpu"], "does not apply to objective per-gpu")):
        result = invoke([*base, *extra])
        assert result.exit_code == 2 and result.stderr.startswith("error: ") and message in result.stderr


def test_an_infeasible_per_stage_solve_names_the_stage():
    """issue 18 item 1: an infeasible per-stage request names the stage that does not fit."""
    result = invoke(["solve", "--model", "llama-3.1-405b", "--gpu", "a100-40gb", "--max-gpus", "16", "--global-batch", "64",
                     "--pin", "pipeline_parallel=2", "--pin", "tensor_parallel=8", "--forbid", "offload=cpu,nvme", "--per-stage"])
    assert result.exit_code == 2
    assert "stage 0 of 2 needs at least" in result.stderr or "stage 1 of 2 needs at least" in result.stderr


def test_megatron_writes_block_recomputation_when_every_stage_takes_it():
    """issue 18 item 1: Megatron-LM expresses the same block:N on every stage as
    --recompute-granularity full --recompute-method block --recompute-num-layers N."""
    response = api.estimate({"workload": GPT3_WORKLOAD, "plan": GPT3_PLAN, "stage_checkpointing": ["block:5"] * 8}).to_dict()
    arguments = export("megatron", response).content["arguments"]
    at = arguments.index("--recompute-method")
    assert arguments[at:at + 4] == ["--recompute-method", "block", "--recompute-num-layers", "5"]
    assert arguments[arguments.index("--recompute-granularity") + 1] == "full"
    assert "not expressible" in " ".join(export("deepspeed", response).notes)
    response = _torchtitan_response(["block:5"] * 4)
    notes = " ".join(export("torchtitan", response).notes)
    assert "not expressible" in notes and "block:5" in notes


def _torchtitan_response(stages):
    return api.estimate({"workload": {"model": "llama-3.1-70b", "global_batch": 64}, "plan": TORCHTITAN_PLAN,
                         "stage_checkpointing": stages}).to_dict()


def test_different_stages_are_not_expressible_in_any_framework():
    """issue 18 item 1: a per-stage choice that differs between stages is written as the uniform
    plan with a 'not expressible' note naming the framework's setting, for each exporter."""
    stages = ["block:5", "block:3", "block:1"] + ["none"] * 5
    response = api.estimate({"workload": GPT3_WORKLOAD, "plan": GPT3_PLAN, "stage_checkpointing": stages}).to_dict()
    megatron = export("megatron", response)
    assert "--recompute-method" not in megatron.content["arguments"]
    assert any("not expressible" in note and "recompute_num_layers" in note for note in megatron.notes)
    assert any("not expressible" in note and "activation_checkpoint_interval" in note for note in export("deepspeed", response).notes)
    response = _torchtitan_response(["block:5", "none", "none", "none"])
    assert any("not expressible" in note and "apply_ac" in note for note in export("torchtitan", response).notes)


def test_the_requests_carry_the_per_stage_fields():
    """issue 18 item 1: the API's requests carry the per-stage fields (round trip, the request
    schema, bad values refused with the field named)."""
    request = api.EstimateRequest.from_dict({"workload": GPT3_WORKLOAD, "plan": GPT3_PLAN, "stage_checkpointing": ["full"] * 8})
    assert request.stage_checkpointing == ("every:1",) * 8
    again = api.EstimateRequest.from_dict(request.to_dict())
    assert again == request
    schema = json.loads((SCHEMAS / "vramopt-request-v1.schema.json").read_text())
    jsonschema.validate(request.to_dict(), schema)
    solve = api.SolveRequest.from_dict({"workload": {"model": "llama-3.1-8b"}, "per_stage": True})
    assert solve.per_stage and api.SolveRequest.from_dict(solve.to_dict()) == solve
    jsonschema.validate(solve.to_dict(), schema)
    with pytest.raises(InputError, match="request stage_checkpointing"):
        api.EstimateRequest.from_dict({"workload": GPT3_WORKLOAD, "plan": GPT3_PLAN, "stage_checkpointing": "none"})
    with pytest.raises(InputError, match="request per_stage"):
        api.SolveRequest.from_dict({"workload": {"model": "llama-3.1-8b"}, "per_stage": True, "engine": "exhaustive"})


def test_the_api_solve_with_per_stage_matches_the_library_search():
    """issue 18 item 1: api.solve with per_stage returns the per-stage search's optimum."""
    data = api.solve({"workload": {"model": "llama-3.1-70b", "global_batch": 64}, "per_stage": True,
                      "space": {"gpus": ["a100-40gb"], "max_gpus": 16, "workers": 1,
                                "pin": {"pipeline_parallel": "4", "tensor_parallel": "4", "gpus": "16"}}}).to_dict()
    answer = per_stage_search(LLAMA_WORKLOAD, LLAMA_SPACE)
    assert data["per_stage"]["tokens_per_s"] == pytest.approx(answer.tokens_per_s, rel=1e-12)
    assert [row["checkpointing"] for row in data["per_stage"]["stages"]] == [stage.checkpointing for stage in answer.stages]
    assert estimate_training(LLAMA_WORKLOAD, answer.plan).plan.pipeline_parallel == 4


def test_a_solve_export_writes_the_per_stage_plan_where_megatron_runs_it():
    """issue 18 item 1: exporting a solve whose per-stage plan Megatron-LM can run writes that
    plan (its own layout and offload, block recomputation), not the uniform answer."""
    from vramopt.stage_checkpointing import estimate_stages

    data = api.solve({"workload": GPT3_WORKLOAD, "per_stage": True,
                      "space": {"gpus": ["a100-80gb"], "max_gpus": 64, "workers": 1, "framework": "megatron",
                                "pin": {"gpus": "64", "tensor_parallel": "4", "pipeline_parallel": "8"}}}).to_dict()
    assert data["plan"]["offload"] != data["per_stage"]["plan"]["offload"]  # the per-stage optimum drops the offload
    # The same layout with one block count on every stage (what Megatron-LM runs): its block as estimate gives it.
    plan = TrainingPlan(**{name: value for name, value in data["per_stage"]["plan"].items() if name in TrainingPlan.__slots__})
    data["per_stage"] = {**estimate_stages(TrainingWorkload(**GPT3_WORKLOAD), plan, ("block:5",) * 8, "megatron"),
                         "plan": data["per_stage"]["plan"]}
    exported = export("megatron", data)
    arguments = exported.content["arguments"]
    assert "--optimizer-cpu-offload" not in arguments and "--optimizer-cpu-offload" in export("megatron", {**data, "per_stage": None}).content["arguments"]
    assert arguments[arguments.index("--recompute-num-layers") + 1] == "5"
    assert any("every stage block:5" in note for note in exported.notes)
