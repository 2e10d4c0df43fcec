"""Results and their JSON form: the versioned contract "vramopt/v1" (docs/json-contract.md).

Every response is a plain dict built here and nowhere else, so the CLI's JSON, the API's
``to_dict()`` and the solver's output share one shape.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from vramopt.costs.inference import requirements_met
from vramopt.request_results import request_requirements, requests_dict
from vramopt.costs.training import MEMORY_TERMS
from vramopt.parallel_layout import ParallelLayout
from vramopt.types import ModelSpec, TrainingPlan, TrainingWorkload

SCHEMA = "vramopt/v1"


def model_summary(model: ModelSpec) -> dict[str, Any]:
    summary = {
        "name": model.name,
        "params_total": int(model.params_total),
        "params_active": int(model.params_active),
        "layers": model.layers,
        "hidden_size": model.hidden_size,
        "heads": model.heads,
        "kv_heads": model.kv_heads,
        "vocab_size": model.vocab_size,
    }
    if model.checkpoint_quantization is not None:
        summary["checkpoint_quantization"] = asdict(model.checkpoint_quantization)
    return summary


class EvaluatedPlan:
    """What training and serving estimates share: the verdict and the headline numbers."""

    __slots__ = ()

    @property
    def fits(self) -> bool:
        return bool(self.values["fits"])

    @property
    def tokens_per_s(self) -> float:
        return float(self.values["tokens_per_s"])

    @property
    def total_bytes(self) -> float:
        return float(self.values["total_bytes"])

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


@dataclass(frozen=True, slots=True)
class TrainingEstimate(EvaluatedPlan):
    """One training plan evaluated by the cost model (floating point)."""

    case: Any = field(repr=False, compare=False)
    """The ``costs.training.TrainingCase`` it was evaluated with."""
    model: ModelSpec
    plan: TrainingPlan
    workload: TrainingWorkload
    nodes: int
    values: Mapping[str, float] = field(repr=False)
    """Scalar outputs of ``costs.training.evaluate_training`` for this plan."""


    def plan_dict(self) -> dict[str, Any]:
        """The contract's ``plan`` object, in ``registry.PLAN_ORDER``: each technique's value
        and the workload's values the plan implies."""
        from vramopt.constraints import registry

        plan = asdict(self.plan)
        implied = {
            "nodes": self.nodes,
            "data_parallel": ParallelLayout.from_plan(self.plan).data_parallel,
            "seq_len": self.workload.seq_len,
            "grad_accumulation": int(round(self.values["micro_batches"])),
            "global_batch": self.workload.global_batch,
        }
        return {name: implied[name] if name in implied else plan[name] for name in registry.PLAN_ORDER}

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
            "context_parallel_s": float(values["context_parallel_s"]),
            "expert_parallel_s": float(values["expert_parallel_s"]),
            "pipeline_parallel_s": float(values["pipeline_parallel_s"]),
            # DeepSpeed ZeRO-3's re-gather for the recomputed forward is data-parallel traffic too
            # (costs/recompute_regather.py); the solver holds it as the interaction term.
            "data_parallel_s": float(values["data_parallel_s"]) + float(values.get("recompute_regather_s", 0.0)),
            "offload_s": float(values["offload_s"]),
            "optimizer_step_s": float(values["optimizer_step_s"]),
        }

    def lora_dict(self) -> dict[str, Any] | None:
        if self.workload.kind not in ("lora", "qlora"):
            return None
        return {
            "rank": self.workload.lora_rank,
            "targets": list(self.workload.lora_targets),
            "adapter_params": int(round(self.case.trainable_fraction * self.model.params_total)),
            "frozen_bytes_per_param": self.case.frozen_bytes_per_param,
        }

    def to_dict(self) -> dict[str, Any]:
        framework = getattr(self.case, "framework", "generic")
        return {
            "schema": SCHEMA,
            "workload": self.workload.kind,
            # Only under a target framework (its rules and memory accounting applied).
            **({"framework": framework} if framework != "generic" else {}),
            "model": model_summary(self.model),
            "plan": self.plan_dict(),
            "lora": self.lora_dict(),
            "memory": self.memory_dict(),
            "throughput": self.throughput_dict(),
        }



@dataclass(frozen=True, slots=True)
class ServingEstimate(EvaluatedPlan):
    """One serving plan evaluated by the cost model (floating point)."""

    case: Any = field(repr=False, compare=False)
    model: ModelSpec
    plan: Any
    workload: Any
    nodes: int
    values: Mapping[str, float] = field(repr=False)


    def plan_dict(self) -> dict[str, Any]:
        """The contract's serving ``plan`` object, in ``registry.SERVING_PLAN_ORDER``: each
        technique's value and the values the workload and the layout imply."""
        from vramopt.constraints import registry

        implied = {
            "nodes": self.nodes,
            "context": self.workload.context,
            "instances_per_gpu": int(round(self.values["instances_per_gpu"])),
            "replicas": int(round(self.values["replicas"])),
        }
        return {name: implied[name] if name in implied else getattr(self.plan, name) for name in registry.SERVING_PLAN_ORDER}

    def memory_dict(self) -> dict[str, Any]:
        values = self.values
        return {
            "weights_bytes": float(values["weights_bytes"]),
            "gradients_bytes": 0.0,
            "optimizer_bytes": 0.0,
            "activations_bytes": float(values["activations_bytes"]),
            "logits_bytes": 0.0,
            "kv_cache_bytes": float(values["kv_cache_bytes"]),
            "cuda_graphs_bytes": float(values["cuda_graphs_bytes"]),
            "draft_model_bytes": float(values["draft_bytes"]),
            "reserve_bytes": float(values["reserve_bytes"]),
            "total_bytes": float(values["total_bytes"]),
            "capacity_bytes": float(values["capacity_bytes"]),
            "headroom_fraction": float(values["headroom_fraction"]),
            "required_headroom_fraction": self.workload.headroom_fraction,
            "fits": bool(values["fits"]),
        }

    def throughput_dict(self) -> dict[str, Any]:
        values = self.values
        return {
            "tokens_per_s": float(values["tokens_per_s"]),
            "latency_per_token_ms": float(values["latency_per_token_s"]) * 1e3,
            "step_time_s": float(values["step_time_s"]),
            "concurrent_slots": int(round(values["concurrent_slots"])),
            "kv_capacity_tokens": int(values["kv_capacity_tokens"]),
            "prefill_time_s": float(values["prefill_time_s"]),
            "tensor_parallel_s": float(values["tensor_parallel_s"]),
            "expert_parallel_s": float(values["expert_parallel_s"]),
            "memory_bound": bool(values["memory_bound"]),
        }

    def requirements_dict(self) -> dict[str, Any]:
        """The workload's service requirements and whether this plan meets them, by the same
        test that makes a candidate invalid in solve (``costs.inference.requirements_met``)."""
        slots_met, latency_met = (bool(met) for met in requirements_met(self.values, self.workload.min_slots, self.workload.max_latency_ms))
        body = {
            "min_slots": self.workload.min_slots,
            "min_slots_met": slots_met,
            "max_latency_ms": self.workload.max_latency_ms,
            "max_latency_met": latency_met,
            "met": slots_met and latency_met,
        }
        if self.case.requests is not None:
            body.update(request_requirements(self.values, self.case.requests, self.workload))
            body["met"] = body["met"] and body["load_served"] and body["ttft_p99_met"] and body["tpot_met"]
        return body

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "workload": "infer",
            "model": model_summary(self.model),
            "plan": self.plan_dict(),
            "memory": self.memory_dict(),
            "throughput": self.throughput_dict(),
            **({"requests": requests_dict(self.values, self.case.requests)} if self.case.requests is not None else {}),
            "requirements": self.requirements_dict(),
        }



@dataclass(frozen=True, slots=True)
class RunnerUp:
    """The best plan that decides ``changed_field`` differently from the chosen plan."""

    changed_field: str
    estimate: Any
    """A TrainingEstimate or a ServingEstimate."""
    tokens_per_s_loss_fraction: float
    """1 - its tokens/s over the chosen plan's."""
    differences: Mapping[str, tuple[Any, Any]]
    """Plan field -> (chosen value, runner-up value), for the fields that differ."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "changed_field": self.changed_field,
            "plan": self.estimate.plan_dict(),
            "memory_total_bytes": self.estimate.total_bytes,
            "tokens_per_s": self.estimate.tokens_per_s,
            "tokens_per_s_loss_fraction": self.tokens_per_s_loss_fraction,
            "differences": {field: {"chosen": pair[0], "runner_up": pair[1]} for field, pair in self.differences.items()},
        }


@dataclass(frozen=True, slots=True)
class Relaxation:
    """One change to the request that makes it feasible, found by re-solving."""

    change: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.change, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a request has no plan: the binding constraint with numbers, and what fixes it."""

    reason: str
    binding_constraint: str
    needed_bytes_per_gpu: float | None
    allowed_bytes_per_gpu: float | None
    relaxations: tuple[Relaxation, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "binding_constraint": self.binding_constraint,
            "needed_bytes_per_gpu": self.needed_bytes_per_gpu,
            "allowed_bytes_per_gpu": self.allowed_bytes_per_gpu,
            "relaxations": [relaxation.to_dict() for relaxation in self.relaxations],
        }

    def one_line(self) -> str:
        fix = f"; smallest fix: {self.relaxations[0].change} ({self.relaxations[0].detail})" if self.relaxations else "; no relaxation tried makes it feasible"
        return f"{self.reason}{fix}"


@dataclass(frozen=True, slots=True)
class SolverReport:
    engine: str
    status: str
    """optimal | feasible | infeasible | timed_out"""
    wall_time_s: float
    gap: float
    objective: str
    objective_value: tuple[int, ...] | None
    """The lexicographic integer objective (primary first; see docs/solver.md)."""
    tick_s: float
    candidates: int
    """Candidate rows (keys) left after exact pruning; the exhaustive engine: all keys."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "status": self.status,
            "wall_time_s": self.wall_time_s,
            "gap": self.gap,
            "objective": self.objective,
            "objective_value": list(self.objective_value) if self.objective_value is not None else None,
            "tick_s": self.tick_s,
            "candidates": self.candidates,
        }


@dataclass(frozen=True, slots=True)
class SolveResult:
    """The answer of ``solve``: the plan (or why there is none), the solver report, runners-up."""

    solver: SolverReport
    estimate: Any
    """TrainingEstimate or ServingEstimate; None when there is no plan."""
    runners_up: tuple[RunnerUp, ...] = ()
    explanation: Explanation | None = None
    offload_cost: Mapping[str, float] | None = None
    workload_kind: str = "train"
    """For an offloaded plan: what the same plan would need without offload, and the
    expected slowdown (its tokens/s over the offloaded plan's)."""
    gains: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """What a technique's chosen value buys, by response key (``Contribution.gain``): for a
    plan whose optimizer is not Adam, ``optimizer_gain`` (the same plan with Adam: memory,
    fit, largest micro-batch, speed-up); for a plan that splits experts otherwise than the
    dense layers, ``expert_gain`` (the same plan with ep 1 and etp = tp). A key appears in
    the response only when its technique has something to say."""
    disaggregation: Mapping[str, Any] | None = None
    """Serving at a request rate: the best disaggregated prefill/decode plan and whether it
    beats the colocated plan (optimizer/disaggregated_answer.py); the key appears only then."""

    @property
    def feasible(self) -> bool:
        return self.estimate is not None

    def to_dict(self) -> dict[str, Any]:
        if self.estimate is not None:
            body = self.estimate.to_dict()
        else:
            body = {"schema": SCHEMA, "workload": self.workload_kind, "plan": None, "memory": None, "throughput": None}
        body["solver"] = self.solver.to_dict()
        body["runners_up"] = [runner.to_dict() for runner in self.runners_up]
        body["explanation"] = self.explanation.to_dict() if self.explanation is not None else None
        body["offload_cost"] = dict(self.offload_cost) if self.offload_cost else None
        body.update({key: dict(gain) for key, gain in self.gains.items()})
        if self.disaggregation is not None:
            body["disaggregation"] = dict(self.disaggregation)
        return body

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)
