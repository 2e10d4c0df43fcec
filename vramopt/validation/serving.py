"""The SGLang/vLLM offline serving runs of the calibration set, and vramopt's prediction.

Data: ``data/serving_published_runs.csv`` (copied from ``../shared/calibration/published-runs.csv``
with their sources). The published runs send 5,000 ShareGPT requests at once (request rate
inf) and report the output tokens over the run's wall time, so the prediction replays the
same kind of run through the engine's scheduler (``costs/offline_benchmark.py``), each step
timed by the request model's step (``costs/serving_step.py``): the drain at the end, the
prompt-only steps of engines without chunked prefill and vLLM's multi-step groups are in it.

Lengths: ``data/sharegpt_lengths.csv``, 5,000 (input, output) pairs drawn the way SGLang 0.3's
``bench_serving --dataset-name sharegpt`` draws them (first two turns, ``random.seed(1)``
shuffle, Llama 3 tokenizer with its BOS token, prompts of 4 to 1,024 tokens and pairs of at
most 2,048; ``benchmarks/sharegpt_lengths.py``). The packaged ShareGPT V3 file holds the first
17,671 of its conversations, so the draw is from those: mean input 219.6, mean output 198.3
tokens, against the published runs' 194.35 (output tokens/s over requests/s) and 229.7 input
tokens that vllm-project/vllm PR 18566 measured over 1,000 requests.

Nothing is fitted to these rows: they are out of sample.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache

from vramopt.validation.published import DATA

SERVING_FILE = DATA / "serving_published_runs.csv"
LENGTHS_FILE = DATA / "sharegpt_lengths.csv"


@dataclass(frozen=True, slots=True)
class ServingPrediction:
    case_id: str
    slots: int
    """Sequences decoding per decode step over the simulated run (mean)."""
    predicted_output_tokens_per_s: float
    published_output_tokens_per_s: float
    predicted_requests_per_s: float
    published_requests_per_s: float
    steady_state_output_tokens_per_s: float
    """The steady-state capacity at 256 sequences (``costs/request_serving.py``), for comparison."""

    def relative_error(self) -> float:
        return self.predicted_output_tokens_per_s / self.published_output_tokens_per_s - 1.0


def serving_rows() -> list[dict[str, str]]:
    with SERVING_FILE.open(newline="") as handle:
        return list(csv.DictReader(handle))


@lru_cache(maxsize=1)
def sharegpt_lengths() -> tuple[tuple[int, int], ...]:
    with LENGTHS_FILE.open(newline="") as handle:
        return tuple((int(row["input_tokens"]), int(row["output_tokens"])) for row in csv.DictReader(handle))


def sglang_pool_tokens(values: dict, memory_fraction: float) -> float:
    """SGLang 0.3's KV pool (model_runner.py ``profile_max_num_token``): the memory free after
    the weights less (1 - mem_fraction_static) of the memory free at start, in tokens; the
    memory free at start is the runtime's capacity less the CUDA context and NCCL (the GPU's
    framework reserve)."""
    free_at_start = values["capacity_bytes"] - values["reserve_bytes"]
    rest = free_at_start - values["weights_bytes"] - free_at_start * (1.0 - memory_fraction)
    return rest / values["kv_read_bytes_per_token"]


def predict_serving_row(row: dict[str, str]) -> ServingPrediction:
    from vramopt.costs.inference import evaluate_serving
    from vramopt.costs.offline_benchmark import ENGINES, simulate_offline
    from vramopt.costs.request_serving import mix_contexts
    from vramopt.costs.serving_step import StepModel, step_inputs
    from vramopt.estimate import serving_case, serving_columns
    from vramopt.types import ServingPlan, ServingWorkload

    lengths = sharegpt_lengths()
    policy = ENGINES[row["engine"]]
    memory_fraction = float(row["memory_fraction"])
    workload = ServingWorkload(model=row["model"], context=4096, headroom_fraction=round(1.0 - memory_fraction, 6),
                               length_samples=[list(pair) for pair in lengths])
    case = serving_case(workload, row["gpu"])
    slots = policy.max_running or 256  # the step does not depend on the slots; vLLM's pool does (its sampler profiling)
    plan = ServingPlan(gpu=case.gpu.name, gpus=int(row["gpus"]), tensor_parallel=int(row["tensor_parallel"]), slots=slots)
    columns = serving_columns(case, [plan])
    values = evaluate_serving(case, columns)
    scalars = {name: float(array[0]) for name, array in values.items() if getattr(array, "ndim", 0) == 1 and array.dtype.kind == "f"}
    decode_context, prefill_context = mix_contexts(case.requests)
    model = StepModel(case, step_inputs(columns, values), float(case.requests.input_tokens), decode_context, prefill_context)
    pool = scalars["kv_capacity_tokens"] if policy.reservation == "blocks" else sglang_pool_tokens(scalars, memory_fraction)
    run = simulate_offline(model.step, lengths, pool, policy, case.kv_block_tokens)
    return ServingPrediction(
        case_id=row["case_id"], slots=round(run.mean_running),
        predicted_output_tokens_per_s=run.output_tokens_per_s,
        published_output_tokens_per_s=float(row["published_output_tokens_per_s"]),
        predicted_requests_per_s=len(lengths) / run.duration_s,
        published_requests_per_s=float(row["published_requests_per_s"]),
        steady_state_output_tokens_per_s=scalars["capacity_tokens_per_s"],
    )


def serving_predictions() -> list[ServingPrediction]:
    return [predict_serving_row(row) for row in serving_rows()]
