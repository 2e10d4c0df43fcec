"""`vramopt solve/estimate --workload infer` with requests (issue 16 items 1-3, 5): the
must-show min-gpus command answers with the layout, TTFT/TPOT and runner-ups; the JSON
validates against docs/schema/vramopt-serving-v1.schema.json and carries the per-request
figures; bad lengths and rates are one line on stderr and exit 2."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.cli_runner import invoke

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "schema" / "vramopt-serving-v1.schema.json").read_text())
MUST_SHOW = ["solve", "--workload", "infer", "--model", "70b", "--gpu", "h100", "--rate", "10", "--input-tokens", "1000",
             "--output-tokens", "1000", "--ttft-p99-ms", "2000", "--tpot-ms", "50", "--objective", "min-gpus"]


def _schema_errors():
    spec = importlib.util.spec_from_file_location("_vramopt_cli_estimate_helpers", Path(__file__).with_name("test_cli_estimate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.schema_errors


def test_the_must_show_command_answers_with_layout_latencies_and_runner_ups():
    result = invoke(MUST_SHOW)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "time to first token, p99" in out and "time per output token, mean" in out
    assert "p99 TTFT    ok" in out and "mean TPOT   ok" in out
    assert "why       the fewest GPUs serving 10 requests/s with p99 TTFT <= 2000 ms and mean TPOT <= 50 ms" in out
    assert "runner-up" in out


def test_the_must_show_json_meets_the_targets_and_validates():
    result = invoke(MUST_SHOW + ["--format", "json"])
    assert result.exit_code == 0, result.output
    response = json.loads(result.stdout)
    requests, requirements = response["requests"], response["requirements"]
    assert requests["served"] and requests["requests_per_s"] == 10 <= requests["capacity_requests_per_s"]
    assert requests["ttft_p99_ms"] <= 2000 and requests["tpot_ms"] <= 50
    assert requirements["met"] and requirements["ttft_p99_met"] and requirements["tpot_met"]
    assert response["runners_up"]
    body = {key: value for key, value in response.items() if key not in ("solver", "runners_up", "explanation", "offload_cost")}
    assert _schema_errors()(body, SCHEMA, SCHEMA) == []
    # Fewest GPUs: one GPU fewer of the same type cannot serve the load within the targets.
    fewer = invoke(MUST_SHOW[:-2] + ["--objective", "min-gpus", "--max-gpus", str(response["plan"]["gpus"] - 1), "--format", "json"])
    assert json.loads(fewer.stdout)["plan"] is None


def test_estimate_with_requests_shows_per_request_figures():
    result = invoke(["estimate", "--workload", "infer", "--model", "8b", "--gpu", "a100-80gb", "--input-tokens", "230",
                     "--output-tokens", "194", "--concurrency", "64", "--slots", "256"])
    assert result.exit_code == 0, result.output
    assert "requests  230 input + 194 output tokens; 64 clients" in result.stdout
    assert "capacity: output tokens/s at saturation" in result.stdout


@pytest.mark.parametrize("extra", [
    ["--rate", "0"], ["--rate", "-1"], ["--rate", "nan"], ["--concurrency", "0"], ["--input-tokens", "200000"],
    ["--rate", "1", "--concurrency", "4"], ["--tpot-ms", "-5"],
])
def test_bad_lengths_and_rates_are_one_line_and_exit_2(extra):
    base = ["solve", "--workload", "infer", "--model", "70b", "--gpu", "h100", "--input-tokens", "1000", "--output-tokens", "1000"]
    arguments = base + [value for value in extra]
    if "--input-tokens" in extra:
        arguments = ["solve", "--workload", "infer", "--model", "70b", "--gpu", "h100", *extra, "--output-tokens", "1000"]
    result = invoke(arguments)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr


def test_request_flags_do_not_apply_to_training():
    result = invoke(["solve", "--model", "8b", "--rate", "3"])
    assert result.exit_code == 2 and "--rate does not apply to --workload train" in result.stderr


def test_a_lengths_csv_drives_the_request_model(tmp_path):
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("input_tokens,output_tokens\n" + "".join(f"{100 + 37 * i % 900},{20 + 53 * i % 400}\n" for i in range(200)))
    result = invoke(["solve", "--workload", "infer", "--model", "8b", "--gpu", "a100-80gb", "--lengths", str(lengths), "--rate", "5",
                     "--tpot-ms", "40", "--objective", "min-gpus", "--format", "json"])
    assert result.exit_code == 0, result.output
    response = json.loads(result.stdout)
    assert response["requests"]["length_samples"] == 200 and response["requirements"]["met"]
    body = {key: value for key, value in response.items() if key not in ("solver", "runners_up", "explanation", "offload_cost")}
    assert _schema_errors()(body, SCHEMA, SCHEMA) == []
    missing = invoke(["solve", "--workload", "infer", "--model", "8b", "--lengths", str(tmp_path / "none.csv")])
    assert missing.exit_code == 2 and missing.stderr.startswith("error: --lengths")
