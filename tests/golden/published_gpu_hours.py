"""vramopt's predicted GPU-hours for the token budgets of published training runs
(data/published_gpu_hours.csv), shared by the golden test and benchmarks/cost_figures.py.

Protocol, the same for every row: the fastest plan vramopt finds (objective throughput)
on up to the run's GPU count of its GPU type, at its sequence length, global batch and
precision (pinned), then the plan's time and cost for the run's token budget. The runs'
own layouts are expressible (DeepSeek-V3's 16 stages over 61 layers and Llama 3.1 405B's
16 over 126 as uneven first/last stages, costs/pipeline_stages.py), but the search picks
vramopt's fastest plan, not theirs (tests/golden/test_uneven_pipeline_stages.py evaluates
the published layouts themselves).
"""

from __future__ import annotations

import csv
from pathlib import Path

from vramopt import api

DATA = Path(__file__).parent / "data" / "published_gpu_hours.csv"
REPOSITORY = Path(__file__).resolve().parents[2]


def cases() -> list[dict[str, str]]:
    with DATA.open(newline="") as stream:
        return list(csv.DictReader(stream))


def predict(case: dict[str, str]) -> dict:
    """The solve response (with ``time_and_cost``) of one row; the price, where the row has
    one, is the built-in one (the row's usd_per_gpu_hour is what it must be)."""
    hardware = None
    if case["hardware_file"]:
        import tomllib

        hardware = tomllib.loads((REPOSITORY / case["hardware_file"]).read_text())
    space = {"gpus": [case["gpu"]], "max_gpus": int(case["max_gpus"]), "pin": {"precision": case["precision"]},
             "total_tokens": int(case["total_tokens"]), "workers": 1, "time_limit_s": 120.0}
    request = {"workload": {"model": case["model"], "seq_len": int(case["seq_len"]), "global_batch": int(case["global_batch"])},
               "space": space}
    if hardware is not None:
        request["hardware"] = hardware
    return api.solve(request).to_dict()


def error_pct(case: dict[str, str], response: dict) -> float:
    published = float(case["published_gpu_hours"])
    return (response["time_and_cost"]["gpu_hours"] - published) / published * 100
