"""Results and their JSON form: the versioned contract "vramopt/v1" (docs/json-contract.md).

Every response is a plain dict built here and nowhere else, so the CLI's JSON, the API's
``to_dict()`` and the solver's output share one shape.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from vramopt.costs.training import MEMORY_TERMS
from vramopt.types import ModelSpec, TrainingPlan, TrainingWorkload

SCHEMA = "vramopt/v1"


def model_summary(model: ModelSpec) -> dict[str, Any]:
    return {
        "name": model.name,
        "params_total": int(model.params_total),
        "params_active": int(model.params_active),
        "layers": model.layers,
        "hidden_size": model.hidden_size,
        "heads": model.heads,
        "kv_heads": model.kv_heads,
        "vocab_size": model.vocab_size,
    }


@dataclass(frozen=True, slots=True)
class TrainingEstimate:
    """One training plan evaluated by the cost model (floating point)."""

    model: ModelSpec
    plan: TrainingPlan
    workload: TrainingWorkload
    nodes: int
    values: Mapping[str, float] = field(repr=False)
    """Scalar outputs of ``costs.training.evaluate_training`` for this plan."""

    @property
    def fits(self) -> bool:
        return bool(self.values["fits"])

    @property
    def tokens_per_s(self) -> float:
        return float(self.values["tokens_per_s"])

    @property
    def total_bytes(self) -> float:
        return float(self.values["total_bytes"])

    def plan_dict(self) -> dict[str, Any]:
        plan = asdict(self.plan)
        data_parallel = self.plan.gpus // (self.plan.tensor_parallel * self.plan.pipeline_parallel)
        ordered = {
            "gpu": plan["gpu"],
            "gpus": plan["gpus"],
            "nodes": self.nodes,
            "tensor_parallel": plan["tensor_parallel"],
            "pipeline_parallel": plan["pipeline_parallel"],
            "data_parallel": data_parallel,
            "sequence_parallel": plan["sequence_parallel"],
            "virtual_stages": plan["virtual_stages"],
            "zero_stage": plan["zero_stage"],
            "checkpointing": plan["checkpointing"],
            "precision": plan["precision"],
            "grad_comm_precision": plan["grad_comm_precision"],
            "offload": plan["offload"],
            "flash_attention": plan["flash_attention"],
            "seq_len": self.workload.seq_len,
            "micro_batch": plan["micro_batch"],
            "grad_accumulation": int(round(self.values["micro_batches"])),
            "global_batch": self.workload.global_batch,
        }
        return ordered

    def memory_dict(self) -> dict[str, Any]:
        values = self.values
        memory = {name: float(values[name]) for name in MEMORY_TERMS}
        memory["kv_cache_bytes"] = 0.0
        memory.update(
            total_bytes=float(values["total_bytes"]),
            capacity_bytes=float(values["capacity_bytes"]),
            headroom_fraction=float(values["headroom_fraction"]),
            required_headroom_fraction=self.workload.headroom_fraction,
            fits=bool(values["fits_gpu"]),
            host_bytes_per_node=float(values["host_bytes_per_node"]),
            fits_host=bool(values["fits_host"]),
            nvme_bytes_per_node=float(values["nvme_bytes_per_node"]),
            fits_nvme=bool(values["fits_nvme"]),
        )
        # Order the keys as the contract documents them.
        keys = list(MEMORY_TERMS[:5]) + ["kv_cache_bytes", "reserve_bytes"]
        return {**{key: memory.pop(key) for key in keys}, **memory}

    def throughput_dict(self) -> dict[str, Any]:
        values = self.values
        return {
            "tokens_per_s": float(values["tokens_per_s"]),
            "step_time_s": float(values["step_time_s"]),
            "mfu": float(values["mfu"]),
            "achieved_tflops_per_gpu": float(values["achieved_flops_per_s_per_gpu"]) / 1e12,
            "compute_s": float(values["compute_s"]),
            "bubble_fraction": float(values["bubble_fraction"]),
            "tensor_parallel_s": float(values["tensor_parallel_s"]),
            "data_parallel_s": float(values["data_parallel_s"]),
            "offload_s": float(values["offload_s"]),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "workload": "train",
            "model": model_summary(self.model),
            "plan": self.plan_dict(),
            "memory": self.memory_dict(),
            "throughput": self.throughput_dict(),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)
