"""issue 15 (known wrong answer): `vramopt solve --model 70b --max-gpus 8 --export deepspeed
ds.json` exported pipeline parallelism 2 with ZeRO-2, and pinning ZeRO-3 gave pp8 + ZeRO-3,
both refused by DeepSpeed's PipelineEngine ('ZeRO-2 and ZeRO-3 are incompatible with
pipeline parallelism', deepspeed/runtime/pipe/engine.py)."""

from __future__ import annotations

import json

from tests.cli_runner import invoke


def test_the_default_export_keeps_deepspeeds_pipeline_rule(tmp_path):
    """issue 15: the default plan exported to DeepSpeed."""
    target = tmp_path / "ds.json"
    result = invoke(["solve", "--model", "70b", "--max-gpus", "8", "--export", "deepspeed", str(target), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)["plan"]
    assert json.loads(target.read_text())["zero_optimization"]["stage"] == plan["zero_stage"]
    assert not (plan["pipeline_parallel"] > 1 and plan["zero_stage"] >= 2), plan


def test_pinning_zero_3_never_exports_a_pipeline(tmp_path):
    """issue 15: --pin zero_stage=3 gave pp8 + ZeRO-3."""
    target = tmp_path / "ds.json"
    result = invoke(["solve", "--model", "70b", "--max-gpus", "8", "--pin", "zero_stage=3", "--export", "deepspeed", str(target),
                     "--format", "json"])
    if result.exit_code == 0:
        plan = json.loads(result.stdout)["plan"]
        assert plan["pipeline_parallel"] == 1, plan
    else:
        assert not target.exists() and "Traceback" not in result.stderr
