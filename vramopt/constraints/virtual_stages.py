"""Interleaved pipeline schedule: the ``virtual_stages`` plan field (model chunks per GPU).

Every count that divides each stage's layers is a schedule Megatron-Core runs (below), and a
key may take any of them; the default domain is 1, 2 and 4 (where they divide the layers) and
``--allow virtual_stages=...`` opens the others. Searching every divisor by default made solve
2-4x slower (benchmarks/solve_latency.py: 2t on 64 GPUs 2.8 -> 10.0 s in CP-SAT, the default
time limit; 16,384 GPUs 4.5 -> 18.6 s) for gains of about 1% (GPT-3 175B on 64 A100: 6 virtual
stages, +1.03%) to 5% (2t on 16,384 GPUs: 12 stages, +4.9%). It is a key field: which counts a
layout allows depends on its pipeline degree, stage split and micro-batch count.

Interleaving's domain: Megatron-Core core_v0.16.1 builds ``layers per stage / v`` layers per
model chunk and asserts that v divides the layers of the stage
(megatron/core/transformer/transformer_block.py ``get_num_layers_to_build``; with uneven first
and last stages ``TransformerConfig.__post_init__`` in transformer_config.py checks the first,
the last and each middle stage's count), so every divisor of the stage's layers is a schedule it
runs. With ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``
the first (last) stage may hold one layer fewer than the others and v need divide only the others'
count (costs/pipeline_stages.embedding_loss_slots: Llama 3 405B's 7 + 14 x 8 + 7 with 2 chunks). The micro-batch count is held to a multiple of pp (Narayanan et al. 2021 section 2.2.2;
Megatron-Core 0.16.1's schedules.py accepts a remainder of 0 or >= pp with its default group of
pp micro-batches, a superset vramopt does not search).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vramopt.constraints.contribution import Contribution, ContractField, Export
from vramopt.constraints.key_domain import KeyDomain, KeyRequest, KeyRule
from vramopt.constraints.parallelism import KORTHIKANTI, NARAYANAN, TRAINING_ONLY_VLLM, divisors
from vramopt.constraints.parallelism_exports import _megatron_virtual_stages, _torchtitan_virtual_stages, _virtual_stages_notes
from vramopt.constraints.technique import PlanField, Technique, parse_int
from vramopt.costs.memory import in_flight_micro_batches
from vramopt.costs.pipeline_stages import counts_interleave, interleaves_every_stage, pipeline_degrees, stage_count_sets
from vramopt.parallel_layout import LAYOUT_COLUMNS, ParallelLayout


def _virtual_stage_candidates(request: KeyRequest, pipeline_parallel: int, first_stage_layers: int, last_stage_layers: int) -> tuple[int, ...]:
    """The virtual-stage counts of one stage split: each value of the field's domain that
    splits every stage's layers into whole chunks (1 only without a pipeline). When only fit is
    asked, 1 and the largest: activation memory does not grow with the count (the in-flight
    factor 1 + (p - 1) / (p v), the overlap's one chunk) and no rule admits one count above 1
    and refuses another, so a layout fits with some count exactly when with one of these
    (tests/regression/test_interleaving_domain.py)."""
    counts = tuple(
        chunks for chunks in request.resolve("virtual_stages")
        if chunks == 1 or (pipeline_parallel > 1 and bool(interleaves_every_stage(
            request.model.layers, pipeline_parallel, first_stage_layers, last_stage_layers, chunks)))
    )
    if request.fit_only and len(counts) > 2:
        interleaved = [chunks for chunks in counts if chunks > 1]
        return tuple(chunks for chunks in counts if chunks == 1 or chunks == max(interleaved))
    return counts


def _interleaving_splits_micro_batches(request: KeyRequest, rows) -> np.ndarray:
    """An interleaved schedule needs a micro-batch count divisible by pp."""
    micro_batches = ParallelLayout.from_columns(rows).micro_batches(request.workload.global_batch, rows.micro_batch)
    return (rows.virtual_stages == 1) | (np.round(micro_batches) % rows.pipeline_parallel == 0)


VIRTUAL_STAGES_KEY = KeyDomain(
    values=_virtual_stage_candidates, after=("pipeline_parallel", "first_stage_layers", "last_stage_layers"),
    rules=(KeyRule(reads=LAYOUT_COLUMNS + ("data_parallel", "micro_batch", "virtual_stages"),
                   admits=_interleaving_splits_micro_batches),),
)
"""Interleaving is part of the layout: the counts a key may take depend on its stage split
(every divisor of each stage's layers) and micro-batch count, so it is a key field (as an
activation item every divisor would multiply every key's activation table: 2t on 16,384 GPUs
would hold 31,678 keys x 768 items = 24M rows; as a key, 79,824 keys x 64 items = 5.1M)."""


def virtual_stages_invalid_reasons(case, columns) -> dict[str, Any]:
    """Megatron-LM's interleaved schedule: a pipeline, whole chunks per stage, and a
    micro-batch count the schedule can split (Narayanan et al. 2021 section 2.2.2)."""
    p, v = columns.pipeline_parallel, columns.virtual_stages
    micro_batches = ParallelLayout.from_columns(columns).micro_batches(case.global_batch, columns.micro_batch)
    return {
        "virtual_stages > 1 needs pipeline_parallel > 1, layers per stage divisible by it (the first and last stage may hold one layer fewer, for the embedding and the loss), and micro-batches divisible by pipeline_parallel": (v > 1)
        & ((p == 1) | ~interleaves_every_stage(case.model.layers, p, columns.first_stage_layers, columns.last_stage_layers, v)
           | (np.round(micro_batches) % p != 0)),
    }


def _default_counts(layers: int, max_gpus: int) -> tuple[int, ...]:
    """1, 2 and 4 where they split the stages of some default pipeline degree's split
    (``counts_interleave``: the layers, or the stages of an uneven split, whose ends may hold
    one layer fewer). Llama 3 405B's 126 layers take 4 on 16 stages of 7 + 14 x 8 + 7, though 4
    does not divide 126; it and Qwen3-235B-A22B's 94 layers (4 on 8 stages of 11 + 6 x 12 + 11)
    are the only catalog models that gain a count over 'divides the layers'."""
    sets = [counts for degree, counts in stage_count_sets(layers, pipeline_degrees(layers, max_gpus)) if degree > 1]
    return tuple(count for count in (1, 2, 4)
                 if count == 1 or count in divisors(layers) or any(counts_interleave(counts, count) for counts in sets))


VIRTUAL_STAGES = Technique(
    field="virtual_stages",
    group="key",
    description="interleaved pipeline: model chunks per GPU",
    parse=parse_int("virtual_stages", 1),
    default_values=lambda context: _default_counts(context.layers, context.max_gpus),
    columns=lambda value: {"virtual_stages": value},
    decode=lambda codes: int(codes["virtual_stages"]),
    key_domain=VIRTUAL_STAGES_KEY,
    plan_field=PlanField(
        python_type=int, default=1, minimum=1, flags=("--virtual-stages",),
        doc="Interleaved pipeline: model chunks per GPU (1 = plain 1F1B).",
        help="Interleaved pipeline: model chunks per GPU (1 = plain 1F1B).",
    ),
    aliases=("vv",),
    contribution=Contribution(
        validity=virtual_stages_invalid_reasons,
        memory=in_flight_micro_batches,
        time=ParallelLayout.pipeline_slots,
        contract=ContractField(name="virtual_stages", json_type="integer",
                               description="interleaved pipeline: model chunks per GPU (1 = plain 1F1B)"),
        display=lambda plan: f"virtual stages {plan['virtual_stages']}",
        display_line="parallel",
        exports={"torchtitan": Export(apply=_torchtitan_virtual_stages), "megatron": Export(apply=_megatron_virtual_stages), "deepspeed": Export(apply=_virtual_stages_notes), "vllm": Export(not_exported=TRAINING_ONLY_VLLM)},
        sources=(f"{NARAYANAN}, section 2.2.2 (bubble (p - 1) / (v m))", f"{KORTHIKANTI}, section 4.2.3 (1 + (p - 1) / (p v) in flight)"),
    ),
)

TECHNIQUES = (VIRTUAL_STAGES,)
