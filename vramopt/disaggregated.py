"""A disaggregated prefill/decode serving plan (xPyD) and its estimate.

The model is ``costs/disaggregated_serving.py``; this module checks a plan, builds the two
replica kinds' rows for ``costs/inference.evaluate_serving`` (their memory, with vLLM's
KV pool) and returns the deployment's figures. The search is
``optimizer/disaggregated_search.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np

from vramopt.constraints.validity import serving_invalid_reasons
from vramopt.costs.disaggregated_serving import (
    combined_figures, decode_figures, link_utilization, prefill_figures, prefill_load, prefill_slots, transfer_seconds_per_token,
)
from vramopt.costs.inference import evaluate_serving
from vramopt.errors import InputError
from vramopt.estimate import serving_case, serving_columns
from vramopt.types import MAX_COUNT, ServingPlan


@dataclass(frozen=True, kw_only=True, slots=True)
class DisaggregatedPlan:
    """Prefill replicas and decode replicas on one GPU type, one weight format and KV dtype."""

    gpu: str
    prefill_replicas: int
    prefill_tensor_parallel: int
    decode_replicas: int
    decode_tensor_parallel: int
    quantization: str = "bf16"
    kv_cache_dtype: str = "bf16"
    paged_kv: bool = True
    decode_slots: int = 16
    """Concurrent sequences per decode replica (vLLM max-num-seqs)."""
    speculative_decoding: bool = False
    """On the decode replicas."""

    @property
    def prefill_gpus(self) -> int:
        return self.prefill_replicas * self.prefill_tensor_parallel

    @property
    def decode_gpus(self) -> int:
        return self.decode_replicas * self.decode_tensor_parallel

    @property
    def gpus(self) -> int:
        return self.prefill_gpus + self.decode_gpus

    def label(self) -> str:
        return (f"{self.prefill_replicas} prefill x tp{self.prefill_tensor_parallel} + "
                f"{self.decode_replicas} decode x tp{self.decode_tensor_parallel}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu, "gpus": self.gpus,
            "prefill_replicas": self.prefill_replicas, "prefill_tensor_parallel": self.prefill_tensor_parallel,
            "decode_replicas": self.decode_replicas, "decode_tensor_parallel": self.decode_tensor_parallel,
            "quantization": self.quantization, "kv_cache_dtype": self.kv_cache_dtype, "paged_kv": self.paged_kv,
            "decode_slots": self.decode_slots, "speculative_decoding": self.speculative_decoding,
        }


def replica_cases(case):
    """(prefill case, decode case): the prefill replicas hold prompts and their first token;
    the decode replicas the whole requests. Neither carries the load's rate or targets
    (evaluate_serving's colocated figures are not read; the rate enters per side)."""
    load = case.requests
    decode_load = replace(load, rate_per_s=None, concurrency=None, ttft_p99_s=None, tpot_s=None)
    return replace(case, requests=prefill_load(load)), replace(case, requests=decode_load)


def _check(plan: DisaggregatedPlan) -> None:
    for name in ("prefill_replicas", "prefill_tensor_parallel", "decode_replicas", "decode_tensor_parallel", "decode_slots"):
        value = getattr(plan, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
            raise InputError(f"{name} must be an integer from 1 to {MAX_COUNT:,}, got {value!r}")


def estimate_disaggregated(workload, plan: DisaggregatedPlan) -> dict[str, Any]:
    """The figures of one disaggregated plan at the workload's request rate: each side's
    memory and fit, the prefill queueing, the KV transfer, TTFT, TPOT and capacity."""
    _check(plan)
    case = serving_case(workload, plan.gpu)
    load = case.requests
    if load is None or load.rate_per_s is None:
        raise InputError("a disaggregated plan is estimated at a request rate: give --input-tokens, --output-tokens and --rate")
    prefill_case, decode_case = replica_cases(case)
    budget = case.prefill_chunk_tokens
    prefill_plan = ServingPlan(gpu=case.gpu.name, gpus=plan.prefill_tensor_parallel, tensor_parallel=plan.prefill_tensor_parallel,
                               quantization=plan.quantization, kv_cache_dtype=plan.kv_cache_dtype, paged_kv=True,
                               slots=prefill_slots(load, budget))
    decode_plan = ServingPlan(gpu=case.gpu.name, gpus=plan.decode_tensor_parallel, tensor_parallel=plan.decode_tensor_parallel,
                              quantization=plan.quantization, kv_cache_dtype=plan.kv_cache_dtype, paged_kv=plan.paged_kv,
                              slots=plan.decode_slots, speculative_decoding=plan.speculative_decoding)
    sides = {}
    for name, side_case, side_plan in (("prefill", prefill_case, prefill_plan), ("decode", decode_case, decode_plan)):
        columns = serving_columns(side_case, [side_plan])
        for reason, mask in serving_invalid_reasons(side_case, columns).items():
            if bool(np.asarray(mask).any()):
                raise InputError(f"{reason} ({name} replicas: tp={side_plan.tensor_parallel}, {plan.quantization} on {case.gpu.name})")
        sides[name] = (columns, evaluate_serving(side_case, columns))
    prefill = prefill_figures(prefill_case, *sides["prefill"], np.array([plan.prefill_replicas]), load.rate_per_s)
    decode = decode_figures(decode_case, *sides["decode"], np.array([plan.decode_replicas]), load.rate_per_s)
    transfer = transfer_seconds_per_token(case, plan.kv_cache_dtype, plan.prefill_tensor_parallel, plan.decode_tensor_parallel, plan.gpus)
    prefill_link = link_utilization(case, plan.kv_cache_dtype, plan.prefill_tensor_parallel, plan.prefill_replicas, plan.gpus, load.rate_per_s)
    decode_link = link_utilization(case, plan.kv_cache_dtype, plan.decode_tensor_parallel, plan.decode_replicas, plan.gpus, load.rate_per_s)
    figures = combined_figures(load, prefill, decode, transfer, prefill_link, decode_link)
    scalar = _scalars
    return {
        "plan": plan,
        "inside_one_node": plan.gpus <= case.gpu.node.gpus_per_node,
        "prefill": {**scalar(prefill), "memory": _memory(sides["prefill"][1]), "slots": prefill_plan.slots,
                    "link_utilization": float(prefill_link)},
        "decode": {**scalar(decode), "memory": _memory(sides["decode"][1]), "link_utilization": float(decode_link)},
        **scalar(figures),
        "fits": bool(sides["prefill"][1]["fits"][0]) and bool(sides["decode"][1]["fits"][0]),
        "transfer_bytes_per_request": float(load.input_tokens * _kv_bytes(case, plan.kv_cache_dtype)),
        "case": case,
    }


def _kv_bytes(case, kv_dtype: str) -> float:
    from vramopt.costs.kv_cache import kv_cache_bytes_per_token

    return kv_cache_bytes_per_token(case.model, kv_dtype)


def _scalars(figures: Mapping[str, Any]) -> dict[str, Any]:
    return {name: np.asarray(value).reshape(-1)[0].item() for name, value in figures.items()}


def _memory(values: Mapping[str, np.ndarray]) -> dict[str, float]:
    return {name: float(np.asarray(values[name]).reshape(-1)[0])
            for name in ("weights_bytes", "kv_cache_bytes", "activations_bytes", "total_bytes", "capacity_bytes", "headroom_fraction")}
