"""The parallel layout: the one place that knows the parallel degrees of a plan.

A ``ParallelLayout`` holds the degrees (tensor, context, pipeline, data, and expert and
expert-tensor parallel for mixture-of-experts models), their product, the rank order, which
process groups leave a node, the divisibility rules, and how each class of tensor is
sharded. Every other module asks it instead of multiplying degrees, so adding a degree
(context parallelism, expert parallelism) changes this file and the technique that uses it.

The degrees may be Python integers (one plan) or numpy arrays (many plans at once, as the
cost model evaluates them through ``costs/columns.PlanColumns``); every property is plain
arithmetic or ``np.where`` and works on both.

Rank order. Ranks are laid out with tensor parallel innermost, then context, data and
pipeline parallel outermost: torchtitan builds its mesh as ``["pp", "dp_replicate",
"dp_shard", "cp", "tp"]`` (row-major, the last axis varies fastest;
``torchtitan/distributed/parallel_dims.py``, ``ParallelDims.build_mesh``), and Megatron-Core's
default ``order="tp-cp-ep-dp-pp"`` (``megatron/core/parallel_state.py``,
``initialize_model_parallel``). A group of ``size`` ranks placed ``stride`` apart occupies a
block of ``size * stride`` consecutive ranks; with whole nodes of ``gpus_per_node`` GPUs it
stays inside one node exactly when that block is no larger than a node.

Gradient reduction and ZeRO/FSDP sharding run over the data-parallel ranks together with the
context-parallel ranks, which hold the same weights (Megatron-Core's
``data_parallel_group_with_context_parallel``; torchtitan's ``dp_shard_cp`` mesh).
Expert parallelism is carved out of the non-pipeline ranks: ``ep * etp`` must divide
``tp * cp * dp`` (Megatron-Core ``initialize_model_parallel`` builds its expert groups from the
same ``world_size / pp`` ranks with ``order="tp-ep-dp-pp"`` for experts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

def resolved_expert_tensor_parallel(expert_tensor_parallel, tensor_parallel):
    """The experts' tensor-parallel degree, 0 standing for tp (Megatron-Core's default when
    ``--expert-tensor-parallel-size`` is not given)."""
    if np.ndim(expert_tensor_parallel) == 0 and np.ndim(tensor_parallel) == 0:
        return tensor_parallel if expert_tensor_parallel == 0 else expert_tensor_parallel
    return np.where(np.asarray(expert_tensor_parallel) == 0, tensor_parallel, expert_tensor_parallel)


GROUPS = ("tensor_parallel", "context_parallel", "data_parallel", "sharding", "replicate", "pipeline_parallel", "expert_parallel")
"""Process groups whose node placement ``spans_nodes`` answers ('sharding' = the data-parallel
shard ranks x context; 'replicate' = the shard groups' replicas under hybrid sharding)."""

STATE_DEGREES = ("data_parallel_shard",)
"""Layout fields chosen with the model states (state items), not with the key rows: the GPU
count, computed from the key's degrees, does not read them."""

RANK_ORDER = ("tensor_parallel", "context_parallel", "data_parallel", "pipeline_parallel")

LAYOUT_COLUMNS = ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel", "expert_tensor_parallel")
"""The plan columns ``ParallelLayout.from_columns`` reads besides data parallel: what a
cost term that asks the layout depends on (``costs/compute.OPERATOR_COLUMNS``)."""

STAGE_GROUP_COLUMNS = ("tensor_parallel", "context_parallel", "data_parallel", "expert_parallel", "expert_tensor_parallel")
"""The columns of the expert-group rule (ep x etp divides a stage's tp x cp x dp ranks)."""
"""Innermost (fastest-varying rank index) first."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelLayout:
    """Parallel degrees of one plan (integers) or of many plans (numpy arrays)."""

    tensor_parallel: Any
    """Ranks that split every weight matrix and the attention heads (Megatron-LM)."""
    pipeline_parallel: Any
    """Stages the layers are split into (equal stages, or uneven first/last stages:
    costs/pipeline_stages.py)."""
    data_parallel: Any
    """Model replicas that each take a share of the global batch."""
    context_parallel: Any = 1
    """Ranks that split every sequence (ring attention); 1 = none."""
    expert_parallel: Any = 1
    """Ranks that split the routed experts of a MoE layer; 1 = none."""
    expert_tensor_parallel: Any = 1
    """Ranks that split each routed expert's matrices (Megatron-Core ETP); the expert layers
    refold a stage's tp x cp x dp ranks as etp x ep x edp. ``from_columns``/``from_plan``
    resolve the plan's 0 to tp."""
    data_parallel_shard: Any = 0
    """Data-parallel ranks one model state is sharded over under hybrid sharding (torchtitan's
    ``data_parallel_shard_degree``, costs/hybrid_shard.py), the innermost ones of dp; the
    dp / data_parallel_shard shard groups replicate each other. 0 = all of dp."""

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_columns(cls, columns) -> "ParallelLayout":
        """The layout of every row of a ``PlanColumns`` (context parallel 1 where it has none)."""
        return cls(
            tensor_parallel=columns.tensor_parallel,
            pipeline_parallel=columns.pipeline_parallel,
            data_parallel=columns.data_parallel,
            context_parallel=getattr(columns, "context_parallel", 1),
            expert_parallel=getattr(columns, "expert_parallel", 1),
            expert_tensor_parallel=resolved_expert_tensor_parallel(
                getattr(columns, "expert_tensor_parallel", 0), columns.tensor_parallel),
            data_parallel_shard=getattr(columns, "data_parallel_shard", 0),
        )

    @classmethod
    def of_stage(cls, rows) -> "ParallelLayout":
        """The layout of one pipeline stage's ranks (pp 1) from rows holding
        ``STAGE_GROUP_COLUMNS`` (etp 0 resolved to tp): what the expert-group rule asks."""
        return cls(
            tensor_parallel=rows.tensor_parallel, context_parallel=rows.context_parallel,
            data_parallel=rows.data_parallel, pipeline_parallel=1, expert_parallel=rows.expert_parallel,
            expert_tensor_parallel=resolved_expert_tensor_parallel(rows.expert_tensor_parallel, rows.tensor_parallel),
        )

    @classmethod
    def from_gpus(cls, gpus, *, tensor_parallel, pipeline_parallel, context_parallel=1) -> "ParallelLayout":
        """Derive the data-parallel degree from a GPU count: ``gpus // (tp * cp * pp)``
        (check ``divides(gpus)`` first where the count may not be a multiple)."""
        replica = tensor_parallel * context_parallel * pipeline_parallel
        return cls(
            tensor_parallel=tensor_parallel,
            pipeline_parallel=pipeline_parallel,
            context_parallel=context_parallel,
            data_parallel=gpus // replica,
        )

    @classmethod
    def from_plan(cls, plan) -> "ParallelLayout":
        """The layout of a ``TrainingPlan`` (or a serving plan: context parallel 1)."""
        replica = plan.tensor_parallel * getattr(plan, "context_parallel", 1) * plan.pipeline_parallel
        return cls(
            tensor_parallel=plan.tensor_parallel,
            pipeline_parallel=plan.pipeline_parallel,
            context_parallel=getattr(plan, "context_parallel", 1),
            data_parallel=plan.gpus // replica,
            expert_parallel=getattr(plan, "expert_parallel", 1),
            expert_tensor_parallel=resolved_expert_tensor_parallel(getattr(plan, "expert_tensor_parallel", 0), plan.tensor_parallel),
            data_parallel_shard=getattr(plan, "data_parallel_shard", 0),
        )

    @classmethod
    def from_mapping(cls, values) -> "ParallelLayout":
        """The layout of a response's plan object, with its own data-parallel degree (an
        exporter checks that the degrees multiply to its GPU count)."""
        tensor = values["tensor_parallel"]
        return cls(
            tensor_parallel=tensor, pipeline_parallel=values["pipeline_parallel"],
            context_parallel=values.get("context_parallel", 1), data_parallel=values["data_parallel"],
            expert_parallel=values.get("expert_parallel", 1),
            expert_tensor_parallel=resolved_expert_tensor_parallel(values.get("expert_tensor_parallel", 0), tensor),
            data_parallel_shard=values.get("data_parallel_shard", 0),
        )

    # -- sizes ----------------------------------------------------------------------------

    @property
    def replica_gpus(self):
        """GPUs of one model replica: ``tp * cp * pp``."""
        return self.tensor_parallel * self.context_parallel * self.pipeline_parallel

    @property
    def model_parallel(self):
        """Ranks that split the dense weights before any ZeRO sharding: ``tp * pp``."""
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def world_size(self):
        """All GPUs of the job: ``tp * cp * pp * dp``."""
        return self.replica_gpus * self.data_parallel

    @property
    def stage_gpus(self):
        """GPUs of one pipeline stage across all replicas: ``tp * cp * dp``."""
        return self.tensor_parallel * self.context_parallel * self.data_parallel

    @property
    def shard_degree(self):
        """Data-parallel ranks of one shard group: ``data_parallel_shard``, or dp without hybrid sharding."""
        shard = self.data_parallel_shard
        if np.ndim(shard) == 0 and shard == 0:
            return self.data_parallel
        return np.where(np.asarray(shard) == 0, self.data_parallel, shard)

    @property
    def sharding_group(self):
        """Ranks that reduce gradients together and, under ZeRO/FSDP, shard model states:
        ``dp * cp``, or ``data_parallel_shard * cp`` under hybrid sharding."""
        return self.shard_degree * self.context_parallel

    @property
    def replicate_group(self):
        """Shard groups holding the same states under hybrid sharding: ``dp / data_parallel_shard`` (1 without)."""
        return self.data_parallel // self.shard_degree

    def divides(self, gpus):
        """Whether the replica size divides ``gpus`` (so ``from_gpus`` loses nothing)."""
        return gpus % self.replica_gpus == 0

    def matches(self, gpus):
        """Whether the degrees multiply to ``gpus``."""
        return self.world_size == gpus

    # -- groups and placement -------------------------------------------------------------

    def group_size(self, group: str):
        sizes = {
            "tensor_parallel": self.tensor_parallel,
            "context_parallel": self.context_parallel,
            "data_parallel": self.data_parallel,
            "sharding": self.sharding_group,
            "replicate": self.replicate_group,
            "pipeline_parallel": self.pipeline_parallel,
            "expert_parallel": self.expert_parallel,
        }
        if group not in sizes:
            raise ValueError(f"group '{group}' is not one of {', '.join(GROUPS)}")
        return sizes[group]

    def group_stride(self, group: str):
        """Rank distance between consecutive members of ``group`` (rank order above)."""
        strides = {
            "tensor_parallel": 1,
            "context_parallel": self.tensor_parallel,
            "data_parallel": self.tensor_parallel * self.context_parallel,
            # dp x cp members: cp ranks tp apart, then the next dp block; consecutive ranks
            # of the flattened group are tp apart.
            "sharding": self.tensor_parallel,
            # The shard groups are blocks of tp x cp x shard consecutive ranks (torchtitan's
            # mesh puts dp_replicate outside dp_shard; Megatron-Core's instance groups are
            # consecutive slices of the dp-cp ranks).
            "replicate": self.tensor_parallel * self.context_parallel * self.shard_degree,
            "pipeline_parallel": self.stage_gpus,
            "expert_parallel": self.expert_tensor_parallel,
        }
        if group not in strides:
            raise ValueError(f"group '{group}' is not one of {', '.join(GROUPS)}")
        return strides[group]

    def group_span(self, group: str):
        """Consecutive GPUs one ``group`` occupies: size x stride."""
        return self.group_size(group) * self.group_stride(group)

    def spans_nodes(self, group: str, gpus_per_node: int):
        """Whether one ``group`` reaches beyond a node of ``gpus_per_node`` GPUs."""
        return self.group_span(group) > gpus_per_node

    def nodes(self, gpus_per_node: int):
        """Nodes the whole job occupies (ceiling of world size over node size)."""
        return -(-self.world_size // gpus_per_node)

    # -- batches --------------------------------------------------------------------------

    def sequences_per_micro_step(self, micro_batch):
        """Sequences the job consumes per micro-batch step: ``micro_batch * dp``."""
        return micro_batch * self.data_parallel

    def micro_batches(self, global_batch, micro_batch):
        """Micro-batches per optimizer step on each replica: ``global_batch / (micro_batch * dp)``."""
        return global_batch / self.sequences_per_micro_step(micro_batch)

    @property
    def token_shards(self):
        """Ranks a sequence's tokens are split over inside a stage under sequence
        parallelism: cp x tp (what one rank dispatches to the experts)."""
        return self.context_parallel * self.tensor_parallel

    def pipeline_slots(self, micro_batches, virtual_stages=1):
        """Micro-batch slots one step takes on each stage: the m micro-batches plus the
        pipeline bubble (p - 1) / v (1F1B and the interleaved schedule, Narayanan et al. 2021
        section 2.2)."""
        return micro_batches + (self.pipeline_parallel - 1.0) / virtual_stages

    # -- how each tensor class is sharded (divisors of the per-GPU share) ------------------

    @property
    def dense_weight_shards(self):
        """Dense weights, their gradients and optimizer states split over ``tp * pp`` before
        ZeRO; ``memory.parameters_per_gpu`` applies the per-stage embedding detail."""
        return self.model_parallel

    def weight_zero_shards(self, zero_stage):
        """Extra division of the weights: the sharding group under ZeRO-3 / FSDP."""
        return np.where(np.asarray(zero_stage) >= 3, self.sharding_group, 1)

    def gradient_zero_shards(self, zero_stage):
        """Extra division of the gradients: the sharding group from ZeRO-2."""
        return np.where(np.asarray(zero_stage) >= 2, self.sharding_group, 1)

    def optimizer_zero_shards(self, zero_stage):
        """Extra division of the optimizer states (and fp32 master copy): from ZeRO-1."""
        return np.where(np.asarray(zero_stage) >= 1, self.sharding_group, 1)

    @property
    def expert_weight_shards(self):
        """Routed-expert weights split over ``ep * etp`` (Megatron-Core MoE)."""
        return self.expert_parallel * self.expert_tensor_parallel

    def activation_token_shards(self):
        """Tokens of each sequence per rank are ``s / cp``; the tensor-parallel split of the
        activations (all of them with sequence parallelism, the matmul inputs only without)
        is ``activations.layer_bytes``' coupled term."""
        return self.context_parallel

    def tokens_per_rank(self, seq_len):
        """Tokens of one sequence a rank holds: ``s / cp``."""
        return np.asarray(seq_len, dtype=float) / self.context_parallel

    def tokens_per_gpu(self, seq_len, micro_batch):
        """Tokens of one micro-batch whose GEMMs one GPU runs: ``s * b / (tp * cp * pp)``
        (each GPU holds ``1 / (tp * pp)`` of the weights and ``1 / cp`` of the tokens)."""
        return seq_len * micro_batch / self.replica_gpus

    @property
    def kv_cache_shards(self):
        """KV cache split over heads (tp) and tokens (cp)."""
        return self.tensor_parallel * self.context_parallel

    # -- validity -------------------------------------------------------------------------

    def invalid_reasons(self, *, gpus, heads: int, kv_heads: int, layers: int,
                        global_batch=None, micro_batch=None, experts: int | None = None,
                        uneven_stages=False) -> dict[str, Any]:
        """Masks (or booleans) of layouts that break a divisibility rule, keyed by message;
        ``uneven_stages`` marks plans whose first/last stage layer counts replace the even
        split (their rules: costs/pipeline_stages.py)."""
        t = self.tensor_parallel
        kv_ok = (kv_heads % t == 0) | (t % kv_heads == 0)
        reasons = {
            "tensor_parallel must divide the attention heads": (heads % t != 0) | ~np.asarray(kv_ok),
            "pipeline_parallel must divide the layers": (layers % self.pipeline_parallel != 0) & ~np.asarray(uneven_stages),
            "tensor_parallel x context_parallel x pipeline_parallel x data_parallel must equal the GPU count": ~np.asarray(
                self.matches(gpus)
            ),
        }
        if global_batch is not None and micro_batch is not None:
            micro_batches = self.micro_batches(global_batch, micro_batch)
            reasons["global_batch must be a multiple of micro_batch x data_parallel"] = (
                np.abs(micro_batches - np.round(micro_batches)) > 1e-9
            )
        # Layouts whose expert groups are the attention's (ep 1, etp = tp) cannot break the
        # rule: skip the array arithmetic the solver's tables would otherwise pay on every row.
        no_experts = bool(np.all(np.asarray(self.expert_parallel) == 1)
                          and np.all(np.asarray(self.expert_tensor_parallel) == np.asarray(self.tensor_parallel)))
        reasons["expert_parallel x expert_tensor_parallel must divide tensor_parallel x context_parallel x data_parallel"] = (
            np.False_ if no_experts else self.stage_gpus % self.expert_weight_shards != 0
        )
        if experts is not None:
            reasons["expert_parallel must divide the routed experts"] = experts % self.expert_parallel != 0
        return reasons

    def product_text(self) -> str:
        """'tensor_parallel x pipeline_parallel x data_parallel = 2 x 4 x 8' (with
        context_parallel when it is above 1), for the messages that check the product."""
        if self.context_parallel > 1:
            return (f"tensor_parallel x context_parallel x pipeline_parallel x data_parallel = {self.tensor_parallel} x "
                    f"{self.context_parallel} x {self.pipeline_parallel} x {self.data_parallel}")
        return (f"tensor_parallel x pipeline_parallel x data_parallel = {self.tensor_parallel} x {self.pipeline_parallel} x "
                f"{self.data_parallel}")

    def replica_mismatch_text(self, gpus) -> str:
        """Why a replica of this layout does not tile ``gpus`` (one plan), for the plan checks."""
        if self.context_parallel > 1:
            return (f"tensor_parallel x context_parallel x pipeline_parallel = {self.tensor_parallel} x {self.context_parallel} x "
                    f"{self.pipeline_parallel} = {self.replica_gpus} does not divide the {gpus} GPUs (gpus = tp x cp x pp x dp)")
        return f"tensor_parallel x pipeline_parallel = {self.replica_gpus} does not divide the {gpus} GPUs"

    def describe(self) -> str:
        """'tp=2 cp=1 pp=4 dp=8' for one plan."""
        return (f"tp={self.tensor_parallel} cp={self.context_parallel} pp={self.pipeline_parallel} "
                f"dp={self.data_parallel}")
