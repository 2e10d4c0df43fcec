"""Uneven pipeline stages: the ``first_stage_layers`` and ``last_stage_layers`` plan fields
(issue 14 item 3; the assignment, its rules and its costs are in costs/pipeline_stages.py).

Key fields like pipeline_parallel: they decide which layers each stage holds. 0 (the
default) means "as a middle stage"; both 0 is the even split. The values are Megatron-Core's
``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``.

Default domain: per pipeline degree, the most balanced assignments Megatron can express
(``costs/pipeline_stages.stage_splits``): none beyond the even split for a degree that
divides the layers, a few for the others (126 layers on 16 stages: 7 + 14 x 8 + 7, 8 + 14 x
8 + 6 written (0, 6), 6 + ... + 8 written (6, 0)). A user's --pin/--allow adds every valid
combination of the values named.
"""

from __future__ import annotations

from typing import Any, Mapping

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft, no_rules
from vramopt.constraints.technique import DomainContext, PlanField, Technique, parse_int
from vramopt.constraints.key_domain import KeyDomain
from vramopt.costs.compute import slowest_stage_operator_seconds
from vramopt.costs.pipeline_stages import (
    divides_every_stage,
    embedding_loss_slots,
    heaviest_weight_stage,
    is_valid_split,
    pipeline_degrees,
    stage_activation_loads,
    stage_counts,
    stage_splits,
    uneven_invalid_reasons,
)

STAGE_FIELDS = ("first_stage_layers", "last_stage_layers")

MEGATRON_SOURCE = ("Megatron-LM core_v0.16.1: megatron/training/arguments.py (--decoder-first-pipeline-num-layers, "
                   "--decoder-last-pipeline-num-layers), megatron/core/transformer/transformer_config.py "
                   "TransformerConfig.__post_init__ (each > 0, the rest divisible by the middle stages, each stage's "
                   "layers divisible by the virtual pipeline size), transformer_block.get_num_layers_to_build")
LLAMA3_SOURCE = "Dubey et al. 2024, The Llama 3 Herd of Models, section 3.3.2 (one layer fewer on the first and last stage)"
DEEPSPEED_SOURCE = ("DeepSpeed deepspeed/runtime/pipe/module.py PipelineModule._partition_layers (partition_method "
                    "'parameters', 'uniform' or 'type:<regex>': no per-stage layer counts)")


def _default_values(index: int):
    """0 and the counts of the default splits of every default pipeline degree (a few values,
    whatever the layer count); which pair a degree's keys take is ``key_splits``' choice."""
    def values(context: DomainContext) -> tuple[int, ...]:
        found = {0}
        if context.kind != "infer":
            for degree in pipeline_degrees(context.layers, context.max_gpus):
                found.update(split[index] for split in stage_splits(context.layers, degree))
        return tuple(sorted(found))

    return values


def key_splits(layers: int, pipeline_parallel: int, first_values, last_values, forbidden=((), ())) -> tuple[tuple[int, int], ...]:
    """The (first, last) stage layer pairs one pipeline degree's keys take: its default
    candidates (``stage_splits``) when the user named no values (``first_values`` and
    ``last_values`` None), else every valid pair of the values named (the default domain of
    a field the user left alone); ``forbidden`` values are left out either way."""
    if first_values is None and last_values is None:
        splits = list(stage_splits(layers, pipeline_parallel))
    else:
        splits = [split for split in stage_splits(layers, pipeline_parallel)
                  if (first_values is None or split[0] in first_values) and (last_values is None or split[1] in last_values)]
        for first in first_values if first_values is not None else sorted({split[0] for split in stage_splits(layers, pipeline_parallel)}):
            for last in last_values if last_values is not None else sorted({split[1] for split in stage_splits(layers, pipeline_parallel)}):
                if (first, last) not in splits and is_valid_split(layers, pipeline_parallel, first, last):
                    splits.append((first, last))
    return tuple(split for split in splits if split[0] not in forbidden[0] and split[1] not in forbidden[1])


def _key_splits_of(request, pipeline_parallel: int) -> tuple[tuple[int, int], ...]:
    """The key enumeration's (first, last) pairs of one pipeline degree (``key_splits``)."""
    named = [request.resolve(field) if request.named(field) else None for field in STAGE_FIELDS]
    forbidden = tuple(request.forbidden(field) for field in STAGE_FIELDS)
    return key_splits(request.model.layers, pipeline_parallel, named[0], named[1], forbidden)


SPLITS_KEY = KeyDomain(values=_key_splits_of, after=("pipeline_parallel",), fields=STAGE_FIELDS)
"""Both stage fields are one key choice, a pair per pipeline degree (a degree without one
is no layout)."""


def _phrase(field: str, label: str):
    def display(plan: Mapping[str, Any]) -> str:
        value = plan.get(field, 0)
        return f"{field}={value}" if value else ""

    return display


def _deepspeed(draft: ExportDraft) -> list[str]:
    first, last = draft.plan.get("first_stage_layers", 0), draft.plan.get("last_stage_layers", 0)
    if not first and not last:
        return []
    slot_flags = megatron_slot_flags(draft.model["layers"], draft.plan)
    megatron = (" ".join(slot_flags) if slot_flags is not None else
                f"--decoder-first-pipeline-num-layers {first or '-'} --decoder-last-pipeline-num-layers {last or '-'}")
    return [f"uneven pipeline stages (first stage {first or 'as the middle'}, last stage {last or 'as the middle'} layers): "
            "DeepSpeed's PipelineModule takes no per-stage layer counts (partition_method 'parameters', 'uniform' or "
            f"'type:<regex>'); build the stages yourself or run the plan with Megatron-LM ({megatron})"]


def torchtitan_stage_split(layers: int, plan: Mapping[str, Any]) -> tuple[int, int, int]:
    """(layers_per_stage, first_stage_less_layers, last_stage_less_layers) of the plan's
    stages. torchtitan 0.3.0 (distributed/pipeline_parallel.py _generate_llm_fqn_per_model_part)
    counts ``layers + first_less + last_less`` effective layers, deals them evenly over the
    stages and takes first_less off the first and last_less off the last: with the middle
    stages' count n as layers_per_stage, first_less = n - first and last_less = n - last give
    Megatron's assignment exactly (virtual_stages 1: the torchtitan rule refuses the others)."""
    pipeline, virtual = plan["pipeline_parallel"], plan["virtual_stages"]
    first, last = int(plan.get("first_stage_layers", 0) or 0), int(plan.get("last_stage_layers", 0) or 0)
    if not first and not last:
        return layers // (pipeline * virtual), 0, 0
    counts = stage_counts(layers, pipeline, first, last)
    middle = max(counts)
    return middle, middle - counts[0], middle - counts[-1]


def _torchtitan(index: int, flag: str):
    def export(draft: ExportDraft) -> list[str]:
        if draft.plan["pipeline_parallel"] > 1:  # even stages: 0 (torchtitan's default takes one off the first and last)
            draft.argument(flag, torchtitan_stage_split(draft.model["layers"], draft.plan)[index])
        return []

    return export


def megatron_slot_flags(layers: int, plan: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The account-for flags that express an interleaved plan whose ends hold one layer fewer
    than v divides (``embedding_loss_slots``), or None when the decoder-first/last counts do
    (every stage divisible by v, or no interleaving). Megatron-Core refuses the two forms
    together (transformer_config.py ``__post_init__``), so one end's form is the plan's."""
    pipeline, virtual = plan["pipeline_parallel"], plan.get("virtual_stages", 1)
    first, last = int(plan.get("first_stage_layers", 0) or 0), int(plan.get("last_stage_layers", 0) or 0)
    if virtual <= 1 or (not first and not last) or bool(divides_every_stage(layers, pipeline, first, last, virtual)):
        return None
    interleaves, embedding, loss = (bool(value) for value in embedding_loss_slots(layers, pipeline, first, last, virtual))
    if not interleaves:
        return None  # an invalid plan: its validity rule has refused it already
    return tuple(flag for flag, counted in ((EMBEDDING_FLAG, embedding), (LOSS_FLAG, loss)) if counted)


EMBEDDING_FLAG, LOSS_FLAG = "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"


def _megatron(field: str, megatron_flag: str):
    def export(draft: ExportDraft) -> list[str]:
        slot_flags = megatron_slot_flags(draft.model["layers"], draft.plan)
        if slot_flags is not None:
            if field == STAGE_FIELDS[0]:  # both flags written once, by the first stage's field
                for flag in slot_flags:
                    draft.argument(flag)
        elif draft.plan.get(field):  # 0: as a middle stage, Megatron's default
            draft.argument(megatron_flag, draft.plan[field])
        return []

    return export


def _stages_brief(plan: Mapping[str, Any]) -> str:
    first, last = plan.get("first_stage_layers", 0), plan.get("last_stage_layers", 0)
    return f"(first stage {first or '='}, last stage {last or '='} layers)" if first or last else ""


def _technique(field: str, index: int, label: str, validity, memory, megatron_flag: str) -> Technique:
    key_domain = SPLITS_KEY if index == 0 else KeyDomain(with_field=STAGE_FIELDS[0])
    return Technique(
        field=field,
        group="key",
        description=f"layers of the {label} pipeline stage (0 = as a middle stage; Megatron {megatron_flag})",
        parse=parse_int(field, 0),
        default_values=_default_values(index),
        columns=lambda value: {field: value},
        decode=lambda codes: int(codes[field]),
        plan_field=PlanField(
            python_type=int, default=0, minimum=0, flags=(f"--{field.replace('_', '-')}",),
            doc=f"Layers of the {label} pipeline stage, 0 = as a middle stage (costs/pipeline_stages.py).",
            help=f"Layers on the {label} pipeline stage (0 = as a middle stage; Megatron {megatron_flag}).",
        ),
        contribution=Contribution(
            # Both stages in one phrase, written by the first stage's field.
            brief=_stages_brief if index == 0 else (lambda plan: ""),
            validity=validity,
            memory=memory,
            time=slowest_stage_operator_seconds,
            contract=ContractField(
                name=field, json_type="integer",
                description=f"transformer layers on the {label} pipeline stage, 0 = as many as a middle stage "
                            f"(Megatron-Core {megatron_flag}); the remaining layers split evenly over the other stages",
            ),
            display=_phrase(field, label),
            display_line="parallel",
            display_separator=" ",
            exports={
                "megatron": Export(apply=_megatron(field, megatron_flag)),
                "torchtitan": Export(apply=_torchtitan(index + 1, f"--parallelism.pipeline_parallel_{label}_stage_less_layers")),
                "deepspeed": Export(apply=_deepspeed) if index == 0 else Export(
                    not_exported="the first stage's field writes the note on both ends (DeepSpeed has no per-stage counts)"),
                "vllm": Export(not_exported="a training plan has no vLLM export"),
            },
            sources=(MEGATRON_SOURCE, LLAMA3_SOURCE, DEEPSPEED_SOURCE),
        ),
        key_domain=key_domain,
    )


FIRST_STAGE_LAYERS = _technique(
    "first_stage_layers", 0, "first",
    validity=lambda case, columns: uneven_invalid_reasons(case.model.layers, columns),
    memory=stage_activation_loads,  # the first stage holds p micro-batches of activations and the embedding
    megatron_flag="--decoder-first-pipeline-num-layers",
)
LAST_STAGE_LAYERS = _technique(
    "last_stage_layers", 1, "last",
    validity=no_rules,  # the assignment's rules read both fields: the first stage's field owns them
    memory=heaviest_weight_stage,  # the last stage holds the output head (and the logits)
    megatron_flag="--decoder-last-pipeline-num-layers",
)

TECHNIQUES = (FIRST_STAGE_LAYERS, LAST_STAGE_LAYERS)
