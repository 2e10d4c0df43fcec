"""ZeRO stage (Rajbhandari et al. 2020): 0 (DDP), 1 optimizer, 2 + gradients, 3 + weights.

Its memory term is the sharding of the model states (``ParallelLayout.*_zero_shards``, used
by ``costs/memory.model_state_bytes``); its time term the reduce-scatter/all-gather traffic
of ``costs/communication.data_parallel_seconds_per_step``.
"""

from __future__ import annotations

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft, no_rules
from vramopt.constraints.technique import PlanField, Technique, parse_int
from vramopt.costs.communication import data_parallel_seconds_per_step
from vramopt.costs.memory import model_state_bytes

BUCKET_SETTINGS = ("overlap_comm", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size",
                   "allgather_partitions", "allgather_bucket_size")
STAGE3_SETTINGS = ("stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "stage3_max_live_parameters",
                   "stage3_max_reuse_distance", "sub_group_size", "stage3_gather_16bit_weights_on_model_save")
"""The zero_optimization keys the exporter writes from its table of documented settings."""


def _deepspeed(draft: ExportDraft) -> list[str]:
    stage = draft.plan["zero_stage"]
    section = {"stage": stage}
    if stage > 0:
        section.update({name: draft.setting(name) for name in BUCKET_SETTINGS})
    if stage == 3:
        section.update({name: draft.setting(name) for name in STAGE3_SETTINGS})
    draft.content["zero_optimization"] = section
    return []


def _megatron(draft: ExportDraft) -> list[str]:
    if draft.plan["zero_stage"] == 1:  # ZeRO-1 is Megatron's distributed optimizer
        draft.argument("--use-distributed-optimizer")
    return []


def _torchtitan(draft: ExportDraft) -> list[str]:
    zero, data = draft.plan["zero_stage"], draft.plan["data_parallel"]
    # ZeRO-0: DDP over the replicate dimension; ZeRO-2/3: FSDP2 over the shard dimension.
    replicate, shard = (data, 1) if zero == 0 else (1, data)
    draft.argument("--parallelism.data_parallel_replicate_degree", replicate)
    draft.argument("--parallelism.data_parallel_shard_degree", shard)
    if zero >= 2:
        # ZeRO-3 is FSDP2 under torchtitan's 'default' policy, the one its memory rule counts
        # (frameworks/memory.py: [norm, lm_head] kept from the forward to the backward, and
        # no resharding under pipeline parallelism); ZeRO-2 is 'never'.
        draft.argument("--parallelism.fsdp_reshard_after_forward", "default" if zero == 3 else "never")
    return []


ZERO_STAGE = Technique(
    field="zero_stage",
    runner_up_rank=2,
    group="state",
    description="ZeRO stage: shard optimizer states (1), gradients (2), weights (3) over data parallel",
    parse=parse_int("zero_stage", 0),
    default_values=lambda context: (0, 1, 2, 3),
    columns=lambda value: {"zero_stage": value},
    decode=lambda codes: int(codes["zero_stage"]),
    neutral=0,
    plan_field=PlanField(
        python_type=int, default=0, choices=(0, 1, 2, 3), flags=("--zero",), help="ZeRO stage 0-3.",
    ),
    aliases=("zero",),
    contribution=Contribution(
        validity=no_rules,  # the offload rules that need a ZeRO stage are offload's
        memory=model_state_bytes,
        time=data_parallel_seconds_per_step,
        contract=ContractField(name="zero_stage", json_type="integer", enum=(0, 1, 2, 3),
                               description="ZeRO stage: 1 shards optimizer states, 2 also gradients, 3 also weights"),
        display=lambda plan: f"ZeRO-{plan['zero_stage']}",
        display_line="memory",
        exports={"torchtitan": Export(apply=_torchtitan), "megatron": Export(apply=_megatron), "deepspeed": Export(apply=_deepspeed),
                 "vllm": Export(not_exported="serving keeps no gradients or optimizer states; a training plan has no vLLM export")},
        sources=("Rajbhandari et al. 2020, ZeRO: Memory Optimizations Toward Training Trillion Parameter Models, section 5",
                 "DeepSpeed config-json: zero_optimization"),
    ),
)

TECHNIQUES = (ZERO_STAGE,)
