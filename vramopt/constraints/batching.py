"""Micro-batch size; gradient accumulation follows as global_batch / (micro_batch * dp).

Default domain: divisors of the global batch up to 64 sequences (Narayanan et al. 2021
Fig. 7: per-GPU throughput saturates by micro-batch 4-8; larger micro-batches only add
activation memory). ``--allow micro_batch=...`` widens it.
"""

from __future__ import annotations

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft, no_rules
from vramopt.constraints.parallelism import divisors
from vramopt.constraints.technique import PlanField, Technique, parse_int
from vramopt.constraints.key_domain import KeyDomain, KeyRule
from vramopt.costs.memory import activation_bytes
from vramopt.costs.training import micro_batches_per_step


def _deepspeed(draft: ExportDraft) -> list[str]:
    # DeepSpeed's rule, checked by the exporter: train_batch_size = micro x accumulation x dp.
    draft.content["train_micro_batch_size_per_gpu"] = draft.plan["micro_batch"]
    return []

DEFAULT_MAX_MICRO_BATCH = 64

def _megatron(draft: ExportDraft) -> list[str]:
    draft.argument("--micro-batch-size", draft.plan["micro_batch"])
    return []


def _torchtitan(draft: ExportDraft) -> list[str]:
    micro = draft.plan["micro_batch"]
    if draft.plan["pipeline_parallel"] > 1:
        draft.argument("--parallelism.pipeline_parallel_microbatch_size", micro)
        # Every pipeline micro-batch of the step in one local batch.
        draft.argument("--training.local_batch_size", draft.plan["global_batch"] // draft.plan["data_parallel"])
    else:
        draft.argument("--training.local_batch_size", micro)  # one micro-batch per gradient-accumulation step
    return []

KEY = KeyDomain(
    values=lambda request: request.resolve("micro_batch"),
    # the micro-batch divides the sequences each replica takes of the global batch
    rules=(KeyRule(reads=("data_parallel", "micro_batch"),
                   admits=lambda request, rows: (request.workload.global_batch // rows.data_parallel) % rows.micro_batch == 0),),
)

MICRO_BATCH = Technique(
    field="micro_batch",
    runner_up_rank=10,
    group="key",
    description="sequences per micro-batch (gradient accumulation = global_batch / (micro_batch * dp))",
    parse=parse_int("micro_batch", 1),
    default_values=lambda context: tuple(
        value for value in divisors(context.global_batch) if value <= DEFAULT_MAX_MICRO_BATCH
    ),
    columns=lambda value: {"micro_batch": value},
    decode=lambda codes: int(codes["micro_batch"]),
    plan_field=PlanField(
        python_type=int, default=1, minimum=1, flags=("--micro-batch",), help="Sequences per micro-batch per GPU.",
    ),
    aliases=("mb",),
    contribution=Contribution(
        validity=no_rules,  # global_batch a multiple of micro_batch x dp: the layout's rule
        memory=activation_bytes,
        time=micro_batches_per_step,
        contract=ContractField(name="micro_batch", json_type="integer", description="sequences per micro-batch per GPU"),
        display=lambda plan: f"micro-batch {plan['micro_batch']}",  # on the batch line
        exports={"torchtitan": Export(apply=_torchtitan), "megatron": Export(apply=_megatron), "deepspeed": Export(apply=_deepspeed),
                 "vllm": Export(not_exported="a training plan has no vLLM export (serving batches are the slots)")},
        sources=("Narayanan et al. 2021, Fig. 7 (throughput vs micro-batch size)",
                 "DeepSpeed config-json: train_micro_batch_size_per_gpu"),
    ),
    key_domain=KEY,
)

TECHNIQUES = (MICRO_BATCH,)
