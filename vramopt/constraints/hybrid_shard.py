"""Hybrid sharding (HSDP, issue 14 item 4): the ``data_parallel_shard`` plan field; its terms
are in costs/hybrid_shard.py.

A state technique, a variant of the ZeRO stage it needs: the model states of the chosen ZeRO
stage shard over groups of ``data_parallel_shard`` data-parallel ranks (times cp) instead of
all of them, and the ``dp / data_parallel_shard`` groups replicate each other. Memory goes up
(states divided by the shard degree, not dp); the per-micro-batch ZeRO-3 collectives stay on
the shard group's links (a node's NVLink when ``tp x cp x shard`` GPUs fit in one), and only the
gradient shards cross the network, all-reduced over the replicas.

Default domain: 0 (shard over all of dp) on one node, where a shard group could only add an
all-reduce on the same fabric; beyond a node 0, half a node's GPUs and a node's GPUs (4 and 8 on
8-GPU nodes), below the GPU limit: the shard groups that fill one node at tp = 2 and tp = 1, the
placement HSDP is for (the gathers on NVLink, only gradient shards on the network). Left to
--allow: groups of 2 (a node at tp = 4, where the states shrink only by 2) and groups spanning
nodes, whose every gather crosses the network as full sharding's does (Llama 3.1 8B on 256
H100: a 16-rank group gains 1% over full sharding, an 8-rank one 54%), each a further state
item on every key (solve latency). A value that does not divide a layout's dp, or equals it,
is refused on that layout (its validity rules), so the tables hold only real hybrids.
"""

from __future__ import annotations

from typing import Any, Mapping

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft
from vramopt.constraints.technique import DomainContext, PlanField, Technique, parse_int
from vramopt.costs.hybrid_shard import hybrid_invalid_reasons, replica_all_reduce_seconds, shard_column
from vramopt.frameworks.deepspeed import VERSION as DEEPSPEED_VERSION
from vramopt.frameworks.rule import Rule
from vramopt.frameworks.torchtitan import VERSION as TORCHTITAN_VERSION
from vramopt.parallel_layout import ParallelLayout

MEGATRON_CORE = "Megatron-Core core_v0.16.1"


def default_values(context: DomainContext) -> tuple[int, ...]:
    if context.max_gpus <= context.gpus_per_node:
        return (0,)
    node = context.gpus_per_node
    return (0, *(shard for shard in dict.fromkeys((node // 2, node)) if 2 <= shard < context.max_gpus))


def replicas(plan: Mapping[str, Any]) -> int:
    return plan["data_parallel"] // plan["data_parallel_shard"]


def display(plan: Mapping[str, Any]) -> str:
    """Shown only under hybrid sharding: the ZeRO phrase before it says what is sharded."""
    if not plan.get("data_parallel_shard"):
        return ""
    return f"hybrid: sharded over {plan['data_parallel_shard']} dp ranks x {replicas(plan)} replicas"


def _torchtitan(draft: ExportDraft) -> list[str]:
    shard = draft.plan.get("data_parallel_shard", 0)
    if shard:  # written after zero_stage's degrees, in plan order, so these replace them
        draft.argument("--parallelism.data_parallel_replicate_degree", replicas(draft.plan))
        draft.argument("--parallelism.data_parallel_shard_degree", shard)
    return []


def _megatron(draft: ExportDraft) -> list[str]:
    if draft.plan.get("data_parallel_shard", 0):
        draft.argument("--num-distributed-optimizer-instances", replicas(draft.plan))
    return []


def _deepspeed(draft: ExportDraft) -> list[str]:
    shard = draft.plan.get("data_parallel_shard", 0)
    if not shard:
        return []
    if draft.plan["zero_stage"] != 3:
        return [f"data_parallel_shard: DeepSpeed has no hybrid sharding at ZeRO-{draft.plan['zero_stage']} (ZeRO++ hpZ, "
                "zero_hpz_partition_size, needs stage 3); the config shards the states over all data-parallel ranks, "
                "so it needs less memory and more cross-node traffic than the plan"]
    draft.content.setdefault("zero_optimization", {})["zero_hpz_partition_size"] = shard
    return [f"data_parallel_shard: written as ZeRO++ hpZ, zero_hpz_partition_size {shard}, which is not the plan's HSDP: "
            f"hpZ keeps a secondary copy of the weights sharded over {shard} consecutive ranks (the backward's all-gather "
            "stays inside the group) while gradients and optimizer states stay sharded over all data-parallel ranks and "
            "the forward's all-gather crosses nodes; DeepSpeed then holds the primary weight shard, the secondary "
            f"one (1/{shard} of the weights) and smaller gradient and optimizer shards than the plan counts"]


def _refuses_deepspeed(columns) -> Any:
    return shard_column(columns) > 0


FRAMEWORK_RULES = {
    "deepspeed": (Rule(
        message="DeepSpeed: no hybrid sharding of the model states (ZeRO++ hpZ, zero_hpz_partition_size, shards only a "
                "secondary copy of the ZeRO-3 weights within the group; vramopt does not model its bytes), so "
                "data_parallel_shard must be 0",
        group="state", refuses=_refuses_deepspeed,
        source=f"deepspeed {DEEPSPEED_VERSION} utils/groups.py _create_zero_param_parallel_group, "
               "runtime/zero/partition_parameters.py (ds_secondary_tensor)",
    ),),
}
"""Megatron-LM runs hybrid sharding as its distributed optimizer's instances, at ZeRO-1 (its own
rule refuses ZeRO-2/3, and hybrid sharding needs a stage); torchtitan runs it at its FSDP stages
(2 and 3; its own rule refuses ZeRO-1)."""

DATA_PARALLEL_SHARD = Technique(
    field="data_parallel_shard",
    group="state",
    description="hybrid sharding: shard the ZeRO states over this many data-parallel ranks and replicate across the groups",
    parse=parse_int("data_parallel_shard", 0),
    default_values=default_values,
    columns=lambda value: {"data_parallel_shard": value},
    decode=lambda codes: int(codes["data_parallel_shard"]),
    neutral=0,
    plan_field=PlanField(
        python_type=int, default=0, minimum=0, minimum_note="(0 shards over all data-parallel ranks)",
        flags=("--dp-shard", "--data-parallel-shard"),
        help="Hybrid sharding (HSDP): data-parallel ranks each ZeRO shard group spans; the groups replicate "
             "(0 = all of dp; needs ZeRO >= 1 and must divide dp).",
    ),
    excludes=lambda item: ("hybrid sharding needs zero_stage >= 1 (a shard to keep within the group)"
                           if item.get("data_parallel_shard") and item.get("zero_stage", 0) == 0 else ""),
    aliases=("dp_shard", "hsdp"),
    contribution=Contribution(
        validity=lambda case, columns: hybrid_invalid_reasons(columns),
        memory=lambda columns, zero_stage: ParallelLayout.from_columns(columns).optimizer_zero_shards(zero_stage),
        time=replica_all_reduce_seconds,
        contract=ContractField(
            name="data_parallel_shard", json_type="integer",
            description="hybrid sharding (HSDP): data-parallel ranks the ZeRO states are sharded over, the groups "
                        "replicated data_parallel / data_parallel_shard times; 0 = all data-parallel ranks",
        ),
        display=display,
        display_line="memory",
        brief=lambda plan: f"dp_shard={plan['data_parallel_shard']}" if plan.get("data_parallel_shard") else "",
        exports={
            "torchtitan": Export(apply=_torchtitan),
            "megatron": Export(apply=_megatron),
            "deepspeed": Export(apply=_deepspeed),
            "vllm": Export(not_exported="serving keeps no gradients or optimizer states; a training plan has no vLLM export"),
        },
        framework_rules=FRAMEWORK_RULES,
        sources=(
            f"torchtitan {TORCHTITAN_VERSION} config/configs.py ParallelismConfig data_parallel_shard_degree / "
            "data_parallel_replicate_degree; distributed/parallel_dims.py (fsdp = dp_shard x cp, efsdp = fsdp x tp / ep)",
            "PyTorch torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce (reduce-scatter, then the "
            "HSDP all-reduce over the replicate group)",
            f"{MEGATRON_CORE} parallel_state.py (intra-partial data-parallel groups), distributed/param_and_grad_buffer.py "
            "(all-reduce across distributed optimizer instances)",
            f"deepspeed {DEEPSPEED_VERSION} runtime/zero/config.py zero_hpz_partition_size; Wang et al. 2023, ZeRO++, "
            "section 3.2 (hpZ)",
        ),
    ),
)

TECHNIQUES = (DATA_PARALLEL_SHARD,)
