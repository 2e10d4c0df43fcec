"""Time and money of a plan (issue 17 item 3): --total-tokens for training, cost per
million output tokens for serving, with prices from flags or a file."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from vramopt.prices import build_prices
from vramopt.time_cost import serving_time_and_cost, training_time_and_cost

from tests.cli_runner import invoke

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schema"


def test_training_figures_by_hand():
    """1,000 tokens/s on 8 GPUs: 86.4e6 tokens take one day, 192 GPU-hours, $480 at $2.5."""
    response = {"plan": {"gpu": "h100", "gpus": 8}, "throughput": {"tokens_per_s": 1000.0}}
    cost = training_time_and_cost(response, 86_400_000, build_prices(None, ["h100=2.5"]))
    assert cost["wall_clock_days"] == pytest.approx(1.0)
    assert cost["gpu_hours"] == pytest.approx(192.0)
    assert cost["usd"] == pytest.approx(480.0)
    assert cost["usd_source"] == "--price flag"
    unpriced = training_time_and_cost(response, 86_400_000, build_prices(None, []))
    assert unpriced["usd"] is None and unpriced["usd_per_gpu_hour"] is None
    assert "no price for GPU 'h100'" in unpriced["usd_source"]


def test_serving_figures_by_hand():
    """1,000 output tokens/s on 8 GPUs at $2.5: $20/hour, 3.6e6 tokens/hour, $5.56/M."""
    response = {"plan": {"gpu": "h100-sxm", "gpus": 8}, "throughput": {"tokens_per_s": 1000.0}}
    cost = serving_time_and_cost(response, build_prices(None, ["h100=2.5"]))
    assert cost["usd_per_hour"] == pytest.approx(20.0)
    assert cost["output_tokens_per_hour"] == pytest.approx(3.6e6)
    assert cost["usd_per_million_output_tokens"] == pytest.approx(20.0 / 3.6)


def test_cli_solve_training_json_matches_the_plan_and_the_schema(tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices]\nh100 = { usd_per_gpu_hour = 3, source = "our contract, 2026-11" }\n')
    result = invoke(["solve", "--model", "8b", "--gpu", "h100", "--max-gpus", "8", "--total-tokens", "1000000000000",
                     "--prices", str(prices), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    cost = data["time_and_cost"]
    seconds = 1e12 / data["throughput"]["tokens_per_s"]
    assert cost["wall_clock_days"] == pytest.approx(seconds / 86400)
    assert cost["gpu_hours"] == pytest.approx(seconds * data["plan"]["gpus"] / 3600)
    assert cost["usd"] == pytest.approx(cost["gpu_hours"] * 3)
    assert cost["usd_source"] == f"our contract, 2026-11 (price file {prices})"
    schema = json.loads((SCHEMAS / "vramopt-v1.schema.json").read_text())
    jsonschema.validate(cost, schema["properties"]["time_and_cost"])
    table = invoke(["solve", "--model", "8b", "--gpu", "h100", "--max-gpus", "8", "--total-tokens", "1000000000000",
                    "--prices", str(prices)])
    assert table.stdout.splitlines()[-1].startswith("time/cost 1,000,000,000,000 tokens: ")


def test_cli_estimate_serving_cost_and_schema():
    result = invoke(["estimate", "--model", "8b", "--gpu", "h100", "--workload", "infer", "--price", "h100=2",
                     "--format", "json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    cost = data["time_and_cost"]
    assert cost["usd_per_hour"] == pytest.approx(2.0 * data["plan"]["gpus"])
    assert cost["usd_per_million_output_tokens"] == pytest.approx(
        cost["usd_per_hour"] / (data["throughput"]["tokens_per_s"] * 3600) * 1e6)
    schema = json.loads((SCHEMAS / "vramopt-serving-v1.schema.json").read_text())
    jsonschema.validate(data, schema)
    csv = invoke(["estimate", "--model", "8b", "--gpu", "h100", "--workload", "infer", "--price", "h100=2", "--format", "csv"])
    assert "time_and_cost.usd_per_million_output_tokens" in csv.stdout.splitlines()[0]


def test_without_the_flags_nothing_is_added():
    data = json.loads(invoke(["estimate", "--model", "8b", "--gpu", "h100", "--gpus", "8", "--format", "json"]).stdout)
    assert "time_and_cost" not in data


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["solve", "--model", "8b", "--price", "h100=2"], "--price/--prices need --total-tokens"),
        (["solve", "--model", "8b", "--workload", "infer", "--total-tokens", "5"], "--total-tokens does not apply"),
        (["estimate", "--model", "8b", "--total-tokens", "10", "--price", "h100=-1"], "at least 0"),
        (["estimate", "--model", "8b", "--total-tokens", "10", "--price", "h999=1"], "unknown GPU 'h999'"),
        (["estimate", "--model", "8b", "--total-tokens", "0"], "--total-tokens"),
    ],
)
def test_bad_flags_are_one_line_exit_2(args, message):
    result = invoke(args)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1 and message in result.stderr
