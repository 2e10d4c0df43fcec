"""The JSON of the request-level serving model (``costs/request_serving.py``): the response's
``requests`` object and the request targets inside ``requirements`` (docs/json-contract.md).
Present only when the workload gives input and output lengths."""

from __future__ import annotations

import math
from typing import Any, Mapping

from vramopt.costs.request_serving import RequestLoad, request_targets_met

QUEUEING_MODEL = (
    "continuous batching with chunked prefill; steady state by Little's law; TTFT = M/G/1 queueing of prompt tokens "
    "(mean: Pollaczek-Khinchine; tail: exponential, exact for M/M/1, Kingman's heavy-traffic form otherwise) + the request's "
    "own chunked prefill; TPOT = mean step time with its prefill share"
)


def _finite_or_none(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _mode(load: RequestLoad) -> str:
    if load.rate_per_s is not None:
        return "rate"
    return "concurrency" if load.concurrency is not None else "saturation"


def requests_dict(values: Mapping[str, Any], load: RequestLoad) -> dict[str, Any]:
    """Per-request figures of one evaluated plan; null where the load is not served."""
    return {
        "input_tokens": load.input_tokens + load.cached_prefix_tokens,
        "output_tokens": load.output_tokens,
        "cached_prefix_tokens": load.cached_prefix_tokens,
        "length_samples": len(load.inputs) if len(load.inputs) > 1 else None,
        "lengths_from": load.lengths_from,
        "mode": _mode(load),
        "rate_per_s": load.rate_per_s,
        "concurrency": load.concurrency,
        "served": bool(values["sustainable"]),
        "requests_per_s": float(values["requests_per_s"]),
        "output_tokens_per_s": float(values["output_tokens_per_s_at_load"]),
        "ttft_mean_ms": _ms(values["ttft_mean_s"]),
        "ttft_p99_ms": _ms(values["ttft_p99_s"]),
        "tpot_ms": _ms(values["tpot_s"]),
        "tpot_p99_ms": _ms(values["tpot_p99_s"]),
        "prefill_ms": _ms(values["prefill_alone_s"]),
        "running_per_replica": float(values["running_per_replica"]),
        "prompt_tokens_per_step": float(values["prompt_tokens_per_step"]),
        "capacity_requests_per_s": float(values["capacity_requests_per_s"]),
        "capacity_output_tokens_per_s": float(values["capacity_tokens_per_s"]),
        "saturation_batch_per_replica": int(values["saturation_batch"]),
        "queueing_model": QUEUEING_MODEL,
    }


def _ms(seconds) -> float | None:
    value = _finite_or_none(seconds)
    return None if value is None else value * 1e3


def request_requirements(values: Mapping[str, Any], load: RequestLoad, workload) -> dict[str, Any]:
    """The request targets and whether the plan meets them (the test solve applies)."""
    met = {name: bool(mask) for name, mask in request_targets_met(values, load).items()}
    return {
        "load_served": met["load served"],
        "ttft_p99_target_ms": workload.ttft_p99_ms,
        "ttft_p99_met": met.get("p99 TTFT", True),
        "tpot_target_ms": workload.tpot_ms,
        "tpot_met": met.get("mean TPOT", True),
    }
