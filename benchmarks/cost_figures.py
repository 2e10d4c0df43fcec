"""Print vramopt's predicted GPU-hours (and dollars, where the source gives a price) beside
the published figures of tests/golden/data/published_gpu_hours.csv: the table of
docs/cost.md. Run from the repository root: python benchmarks/cost_figures.py"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "golden"))

from published_gpu_hours import cases, error_pct, predict  # noqa: E402


def main() -> None:
    print("case | plan | days | predicted GPU-hours | published GPU-hours | difference | predicted USD")
    for case in cases():
        response = predict(case)
        plan, money = response["plan"], response["time_and_cost"]
        layout = (f"{plan['gpus']}x {plan['gpu']} tp{plan['tensor_parallel']} pp{plan['pipeline_parallel']} "
                  f"dp{plan['data_parallel']} ZeRO-{plan['zero_stage']} {plan['precision']} ckpt={plan['checkpointing']}")
        usd = "-" if money["usd"] is None else f"${money['usd'] / 1e6:,.3f}M"
        print(f"{case['case_id']} | {layout} | {money['wall_clock_days']:,.1f} | {money['gpu_hours'] / 1e6:,.3f}M | "
              f"{float(case['published_gpu_hours']) / 1e6:,.3f}M | {error_pct(case, response):+.1f}% | {usd} "
              f"| MFU {response['throughput']['mfu']:.1%}, {response['throughput']['achieved_tflops_per_gpu']:,.0f} TFLOP/s per GPU")


if __name__ == "__main__":
    main()
