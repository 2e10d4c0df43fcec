"""The optimizer-state field through the CLI (issue 12 item 5): --allow optimizer=... on solve,
the why line that says what the format buys, --optimizer on estimate, one-line errors."""

from __future__ import annotations

import json

import pytest

from tests.cli_runner import invoke

LORA_4090 = ["solve", "--model", "8b", "--workload", "lora", "--gpu", "rtx4090", "--max-gpus", "1"]


def test_default_domain_is_adam_only():
    result = invoke(LORA_4090 + ["--format", "json"])
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["plan"]["optimizer"] == "adam"
    assert "optimizer_gain" not in body


def test_allowing_8bit_adam_picks_it_and_the_why_line_says_what_it_buys():
    result = invoke(LORA_4090 + ["--allow", "optimizer=adam,adam8bit"])
    assert result.exit_code == 0, result.stderr
    why = result.stdout.split("\nwhy", 1)[1].split("\nsolver", 1)[0]
    assert "optimizer 8-bit Adam (bitsandbytes, block-wise)" in why
    assert "GB per GPU" in why


def test_the_why_line_names_the_fit_when_adam_would_not_fit():
    """At 1,024 tokens the chosen plan (no checkpointing) needs 23.1 GB with Adam: over the
    22.8 GB limit of a 4090 with 10% headroom; 8-bit Adam's 0.25 GB saving makes it fit."""
    result = invoke(LORA_4090 + ["--seq-len", "1024", "--allow", "optimizer=adam,adam8bit", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    gain = body["optimizer_gain"]
    assert body["plan"]["optimizer"] == "adam8bit"
    assert gain["with_adam_fits"] is False and gain["with_adam_total_bytes"] > gain["limit_bytes"]
    text = invoke(LORA_4090 + ["--seq-len", "1024", "--allow", "optimizer=adam,adam8bit"]).stdout
    assert "is what makes this plan fit: with adam it would need" in text


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["solve", "--model", "8b", "--workload", "infer", "--gpu", "h100", "--allow", "optimizer=adam8bit"],
         "optimizer is a field of training plans"),
        (["estimate", "--model", "8b", "--workload", "infer", "--gpu", "h100", "--optimizer", "adam8bit"],
         "--optimizer does not apply to --workload infer"),
        (["estimate", "--model", "8b", "--workload", "lora", "--gpu", "h100", "--optimizer", "adafactor"],
         "adafactor is not modelled for LoRA/QLoRA adapters"),
        (["estimate", "--model", "8b", "--gpu", "h100", "--gpus", "8", "--zero", "1", "--offload", "cpu", "--optimizer", "sgd"],
         "offload cpu or nvme needs optimizer adam"),
        (LORA_4090 + ["--allow", "optimizer=lion"], "optimizer value 'lion' is not one of adam, adam8bit, adafactor, sgd"),
    ],
)
def test_bad_optimizer_input_is_one_line_exit_2(args, fragment):
    result = invoke(args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr
