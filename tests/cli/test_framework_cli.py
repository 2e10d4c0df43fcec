"""--framework on estimate, solve and pareto, and its meeting with --export (issue 15 item 1)."""

from __future__ import annotations

import json

from tests.cli_runner import invoke


def _one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_export_deepspeed_without_framework_exports_a_plan_deepspeed_runs(tmp_path):
    """issue 15: the default plan of this command was pp2 + ZeRO-2, which DeepSpeed refuses."""
    target = tmp_path / "ds.json"
    result = invoke(["solve", "--model", "70b", "--max-gpus", "8", "--export", "deepspeed", str(target), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)["plan"]
    config = json.loads(target.read_text())
    assert config["zero_optimization"]["stage"] == plan["zero_stage"]
    assert not (plan["pipeline_parallel"] > 1 and plan["zero_stage"] >= 2)


def test_pinning_zero_3_with_a_pipeline_under_deepspeed_names_the_rule(tmp_path):
    result = invoke(["solve", "--model", "70b", "--max-gpus", "8", "--pin", "zero_stage=3", "--pin", "pipeline_parallel=8",
                     "--export", "deepspeed", str(tmp_path / "ds.json")])
    _one_line_error(result, "framework deepspeed", "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism", "pipe/engine.py")
    assert not (tmp_path / "ds.json").exists()


def test_export_deepspeed_with_another_framework_is_refused(tmp_path):
    result = invoke(["solve", "--framework", "megatron", "--export", "deepspeed", str(tmp_path / "ds.json")])
    _one_line_error(result, "--export deepspeed", "--framework is megatron")


def test_unknown_framework_suggests_the_closest():
    result = invoke(["solve", "--framework", "torchtittan"])
    assert result.exit_code == 2
    assert "did you mean torchtitan" in result.stderr and "Traceback" not in result.stderr


def test_estimate_under_a_framework_refuses_what_it_cannot_run():
    args = ["estimate", "--model", "8b", "--gpu", "h100", "--gpus", "8", "--pp", "2", "--zero", "2", "--global-batch", "64"]
    assert invoke(args).exit_code == 0
    _one_line_error(invoke(args + ["--framework", "deepspeed"]), "cannot run under --framework deepspeed", "pipeline parallelism")


def test_pareto_under_megatron_keeps_its_rules():
    result = invoke(["pareto", "--model", "8b", "--gpu", "h100", "--max-gpus", "8", "--global-batch", "64",
                     "--framework", "megatron", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    front = json.loads(result.stdout)["front"]
    assert front and all(point["plan"]["zero_stage"] <= 1 for point in front)


def test_framework_generic_named_with_export_deepspeed_still_refuses_what_deepspeed_raises_on(tmp_path):
    target = tmp_path / "ds.json"
    # 16 GPUs: where the generic optimum is a pipeline with ZeRO-3 (issue 13's model).
    result = invoke(["solve", "--model", "70b", "--max-gpus", "16", "--framework", "generic", "--export", "deepspeed", str(target)])
    _one_line_error(result, "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism")
    assert not target.exists()


def test_export_torchtitan_and_megatron_write_launch_scripts(tmp_path):
    for target, marker in (("torchtitan", "-m torchtitan.train --module llama3 --config llama3_8b"), ("megatron", "pretrain_gpt.py")):
        path = tmp_path / f"{target}.sh"
        result = invoke(["solve", "--model", "8b", "--gpu", "h100", "--max-gpus", "8", "--global-batch", "64",
                         "--export", target, str(path), "--format", "json"])
        assert result.exit_code == 0, result.stderr
        text = path.read_text()
        assert text.startswith("#!/usr/bin/env bash") and marker in text and "torchrun --nnodes 1" in text


def test_export_prints_the_launch_line_with_world_size_and_nodes(tmp_path):
    result = invoke(["solve", "--model", "70b", "--gpu", "h100", "--max-gpus", "16", "--export", "megatron", str(tmp_path / "run.sh")])
    assert result.exit_code == 0, result.stderr
    launch = [line for line in result.stderr.splitlines() if line.startswith("note (megatron): launch (")]
    assert len(launch) == 1 and "torchrun --nnodes" in launch[0] and "pretrain_gpt.py" in launch[0]
