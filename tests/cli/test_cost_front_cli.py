"""`vramopt pareto --axes time,cost` (issue 17 item 3): the time-money front on the CLI."""

from __future__ import annotations

import csv
import io
import json

from tests.cli_runner import invoke

ARGS = ["pareto", "--model", "8b", "--gpu", "h100", "--gpu", "b200", "--max-gpus", "32", "--axes", "time,cost",
        "--total-tokens", "1e12", "--price", "h100=1.0", "--price", "b200=5.98"]


def test_training_front_trades_days_for_dollars():
    result = invoke([*ARGS, "--format", "json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    front = data["front"]
    days = [point["time_and_cost"]["wall_clock_days"] for point in front]
    usd = [point["time_and_cost"]["usd"] for point in front]
    # Fastest first; each slower point is strictly cheaper (else it would be dominated).
    assert days == sorted(days)
    assert all(later < earlier for earlier, later in zip(usd, usd[1:]))
    chosen = [point for point in front if point["chosen"]]
    assert len(chosen) == 1 and chosen[0]["time_and_cost"]["usd"] == min(usd)
    for point in front:
        money = point["time_and_cost"]
        price = {"h100": 1.0, "b200": 5.98}[point["plan"]["gpu"]]
        assert abs(money["usd"] - money["gpu_hours"] * price) <= 1e-6 * money["usd"]


def test_csv_has_the_money_columns_and_the_table_its_header():
    rows = list(csv.DictReader(io.StringIO(invoke([*ARGS, "--format", "csv"]).stdout)))
    assert rows and "time_and_cost.usd" in rows[0] and "time_and_cost.wall_clock_days" in rows[0]
    table = invoke(ARGS).stdout
    assert "wall-clock days down, USD down" in table


def test_serving_front_and_bad_flags():
    serving = invoke(["pareto", "--model", "8b", "--workload", "infer", "--gpu", "h100", "--gpu", "l40s", "--max-gpus", "4",
                      "--axes", "time,cost", "--price", "h100=2.69", "--price", "l40s=0.86", "--format", "json"])
    assert serving.exit_code == 0, serving.stderr
    front = json.loads(serving.stdout)["front"]
    speeds = [point["throughput"]["tokens_per_s"] for point in front]
    per_million = [point["time_and_cost"]["usd_per_million_output_tokens"] for point in front]
    # Fastest first; a slower point is never dearer per token (ties within the integer
    # rounding of the ticks are possible: two replicas at twice one's speed and cost).
    assert speeds == sorted(speeds, reverse=True)
    assert all(later <= earlier * (1 + 1e-5) for earlier, later in zip(per_million, per_million[1:]))
    for args, words in (
        (["pareto", "--model", "8b", "--gpu", "h100", "--axes", "time,cost", "--price", "h100=2"], "need --total-tokens"),
        (["pareto", "--model", "8b", "--gpu", "h100", "--axes", "time,cost", "--total-tokens", "1e12"], "none for h100"),
        (["pareto", "--model", "8b", "--gpu", "h100", "--total-tokens", "1e12", "--price", "h100=2"], "--axes time,cost"),
    ):
        result = invoke(args)
        assert result.exit_code == 2, result.stdout
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and words in lines[0], result.stderr
