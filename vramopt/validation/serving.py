"""The SGLang/vLLM offline serving runs of the calibration set, and vramopt's prediction.

Data: ``data/serving_published_runs.csv`` (copied from ``../shared/calibration/published-runs.csv``
with their sources). Every request is queued at once (request rate inf), so the prediction
is the plan's saturation capacity (``costs/request_serving.py``). Lengths: the mean output
of 194 tokens is the published output tokens/s over requests/s (3856.01 / 19.84 = 4281.51 /
22.03 = 194.35); the mean input of 230 tokens is ShareGPT's as another run measured it with
the Llama 3.1 tokenizer (vllm-project/vllm PR 18566: 229,711 input tokens over 1,000 ShareGPT
requests); the README does not print it. vLLM 0.6 runs at most 256 sequences
(``max_num_seqs``); SGLang's batch is bounded by its KV pool, so its rows take the largest slot
count that fits. Nothing is fitted to these rows: they are out of sample.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass

from vramopt.validation.published import DATA

SERVING_FILE = DATA / "serving_published_runs.csv"
SLOT_CEILING = 2048
"""The largest slot count of the search grid (constraints/kv_cache.py)."""


@dataclass(frozen=True, slots=True)
class ServingPrediction:
    case_id: str
    slots: int
    predicted_output_tokens_per_s: float
    published_output_tokens_per_s: float
    predicted_requests_per_s: float
    published_requests_per_s: float

    def relative_error(self) -> float:
        return self.predicted_output_tokens_per_s / self.published_output_tokens_per_s - 1.0


def serving_rows() -> list[dict[str, str]]:
    with SERVING_FILE.open(newline="") as handle:
        return list(csv.DictReader(handle))


def predict_serving_row(row: dict[str, str]) -> ServingPrediction:
    from vramopt.estimate import estimate_serving
    from vramopt.types import ServingPlan, ServingWorkload

    workload = ServingWorkload(
        model=row["model"], context=4096, headroom_fraction=round(1.0 - float(row["memory_fraction"]), 6),
        input_tokens=int(row["input_tokens_mean"]), output_tokens=int(row["output_tokens_mean"]),
    )

    def estimate(slots: int):
        plan = ServingPlan(gpu=row["gpu"], gpus=int(row["gpus"]), tensor_parallel=int(row["tensor_parallel"]), slots=slots)
        return estimate_serving(workload, plan)

    if row["max_num_seqs"]:
        slots = int(row["max_num_seqs"])
    else:
        low, high = 1, SLOT_CEILING
        while low < high:  # the largest slot count whose KV cache fits the pool
            middle = (low + high + 1) // 2
            low, high = (middle, high) if estimate(middle).fits else (low, middle - 1)
        slots = low
    values = estimate(slots).values
    return ServingPrediction(
        case_id=row["case_id"], slots=slots,
        predicted_output_tokens_per_s=float(values["capacity_tokens_per_s"]),
        published_output_tokens_per_s=float(row["published_output_tokens_per_s"]),
        predicted_requests_per_s=float(values["capacity_requests_per_s"]),
        published_requests_per_s=float(row["published_requests_per_s"]),
    )


def serving_predictions() -> list[ServingPrediction]:
    return [predict_serving_row(row) for row in serving_rows()]
