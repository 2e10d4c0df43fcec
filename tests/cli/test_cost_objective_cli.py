"""`vramopt solve --objective cost` and `cost-per-token` on the command line (issue 17
item 3), and their bad input: one line on stderr, exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runner import invoke

EXAMPLE_PRICES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "prices.toml"


def test_the_must_show_405b_command_picks_by_money_and_prices_the_runners_up():
    """issue 17 must-show: 405B on H100, H200 or B200, up to 1,024 GPUs, 15T tokens."""
    args = ["solve", "--model", "405b", "--gpu", "h100", "--gpu", "h200", "--gpu", "b200", "--max-gpus", "1024",
            "--total-tokens", "15e12", "--objective", "cost", "--prices", str(EXAMPLE_PRICES), "--deadline-days", "365"]
    result = invoke([*args, "--format", "json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    cost = data["time_and_cost"]
    assert cost["total_tokens"] == 15 * 10**12 and cost["wall_clock_days"] <= 365
    assert data["solver"]["objective"].startswith("cost: least money for 15,000,000,000,000 tokens within 365 days")
    for runner in data["runners_up"]:
        other = runner["time_and_cost"]
        # Least money: within the deadline no runner-up is cheaper (up to the price rounding).
        if other["wall_clock_days"] <= 365:
            assert other["usd"] >= cost["usd"] * (1 - 1e-4)
    table = invoke(args)
    assert table.exit_code == 0, table.stderr
    assert "why       the least money for the token budget" in table.stdout
    header = next(line for line in table.stdout.splitlines() if line.startswith("runner-up tokens/s"))
    assert "days" in header and "USD" in header


def test_token_budget_in_scientific_notation_and_digits_agree():
    common = ["solve", "--model", "8b", "--gpu", "h100", "--max-gpus", "8", "--price", "h100=2", "--format", "json"]
    short = json.loads(invoke([*common, "--total-tokens", "1.5e12"]).stdout)
    digits = json.loads(invoke([*common, "--total-tokens", "1500000000000"]).stdout)
    assert short["time_and_cost"] == digits["time_and_cost"]


def _one_error_line(args):
    result = invoke(args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


BASE = ["solve", "--model", "8b", "--gpu", "h100", "--max-gpus", "8"]


@pytest.mark.parametrize("extra, words", [
    (["--objective", "cost", "--price", "h100=2"], "needs --total-tokens"),
    (["--objective", "cost", "--total-tokens", "1e12"], "needs a price for every GPU type searched: none for h100"),
    (["--objective", "cost", "--total-tokens", "1e12", "--price", "h100=-1"], "at least 0"),
    (["--objective", "cost", "--total-tokens", "1e12", "--price", "h800x=2"], "h800x"),
    (["--objective", "cost", "--total-tokens", "1e12", "--price", "h100=2", "--gpu", "b200"], "none for b200"),
    (["--total-tokens", "1e12", "--deadline-days", "10"], "only used with --objective cost"),
    (["--objective", "cost", "--total-tokens", "1.5", "--price", "h100=2"], "whole number"),
    (["--objective", "cost-per-token", "--price", "h100=2"], "for --workload infer"),
])
def test_bad_money_input_is_one_line_and_exit_2(extra, words):
    assert words in _one_error_line([*BASE, *extra])


def test_a_price_file_naming_an_unknown_gpu_is_one_line(tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices]\nh800x = { usd_per_gpu_hour = 2, source = "a typo" }\n')
    line = _one_error_line([*BASE, "--objective", "cost", "--total-tokens", "1e12", "--prices", str(prices)])
    assert "h800x" in line and "prices.toml" in line


def test_an_unreachable_deadline_says_the_fastest_plans_days():
    fastest = json.loads(invoke([*BASE, "--total-tokens", "1e12", "--format", "json"]).stdout)["time_and_cost"]
    line = _one_error_line([*BASE, "--objective", "cost", "--total-tokens", "1e12", "--price", "h100=2",
                            "--deadline-days", f"{fastest['wall_clock_days'] / 2:.3f}"])
    assert f"takes {fastest['wall_clock_days']:,.1f} days" in line and "--deadline-days" in line


def test_serving_cost_per_token_prices_the_runners_up():
    result = invoke(["solve", "--model", "8b", "--workload", "infer", "--gpu", "h100", "--gpu", "l40s", "--max-gpus", "4",
                     "--objective", "cost-per-token", "--price", "h100=2.69", "--price", "l40s=0.86", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    chosen = data["time_and_cost"]["usd_per_million_output_tokens"]
    assert data["runners_up"]
    for runner in data["runners_up"]:
        assert runner["time_and_cost"]["usd_per_million_output_tokens"] >= chosen * (1 - 1e-4)
