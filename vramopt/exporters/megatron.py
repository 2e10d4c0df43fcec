"""Megatron-LM command-line arguments (``pretrain_gpt.py``) from a training plan.

``megatron_args(response)`` reads a "vramopt/v1" training response and returns the
arguments of Megatron-LM release core_v0.16.1 (megatron/training/arguments.py; the names,
kinds and choices are recorded in tests/fixtures/exporters/megatron_lm_arguments.json by
benchmarks/megatron_arguments_fixture.py) and the ``torchrun`` launch line. What the
arguments cannot say, or what the user must fill in (tokenizer, data), goes to the notes.

The plan must keep the Megatron rules of vramopt/frameworks/megatron.py (solve with
``--framework megatron``, which ``--export megatron`` implies); a plan that breaks one is an
``InputError`` naming the rule.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from vramopt.constraints.contribution import ExportDraft
from vramopt.errors import InputError, VramoptError
from vramopt.exporters.result import (
    TRAINING_WORKLOADS, ExportResult, checked_plan, fit_notes, no_setting_table, ordered_arguments, positive_integer, required,
    response_parts, technique_export_notes,
)
from vramopt.frameworks import check_runs, plan_columns
from vramopt.stage_checkpointing import megatron_block_arguments

RELEASE = "core_v0.16.1"
TOKENIZER_PLACEHOLDER = "/path/to/tokenizer"
DATA_PLACEHOLDER = "/path/to/data_text_document"

MODEL_ARGUMENTS = "model"
"""Where the model's own arguments (shape, MoE sizes: the catalog's, not a technique's) go in
``ARGUMENT_ORDER``."""

ARGUMENT_ORDER = (
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--num-virtual-stages-per-pipeline-rank", "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
    "--sequence-parallel", MODEL_ARGUMENTS,
    "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--moe-token-dispatcher-type",
    "--micro-batch-size", "--global-batch-size",
    "--fp16", "--bf16", "--fp8-format", "--fp4-format", "--grad-reduce-in-bf16", "--accumulate-allreduce-grads-in-fp32",
    "--optimizer", "--use-distributed-optimizer", "--optimizer-cpu-offload", "--use-precision-aware-optimizer",
    "--optimizer-offload-fraction",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
    "--attention-backend", "--overlap-grad-reduce",
)
"""The order the arguments are written in: each technique's Megatron export
(``Contribution.exports['megatron']``) writes its own, in any order; a flag not listed here
comes after the listed ones, in plan order."""


class MegatronExport(ExportResult):
    """Megatron-LM arguments (``content['arguments']``) and launch line (``content['launch']``)."""

    def text(self) -> str:
        """A shell script that launches the plan."""
        return "#!/usr/bin/env bash\n# vramopt --export megatron (Megatron-LM " + RELEASE + ")\n" + self.content["launch"] + "\n"


def megatron_args(response: Mapping[str, Any]) -> MegatronExport:
    """The ``pretrain_gpt.py`` arguments of a training plan, and the notes on what they cannot say.

    Raises
    ------
    InputError
        A serving response, a missing key, or a plan that breaks a Megatron rule.
    """
    workload, plan, model = response_parts(response, "megatron_args", TRAINING_WORKLOADS)
    checked = checked_plan(plan)  # every technique's value by its declaration; newer keys defaulted
    check_runs("megatron", plan_columns(checked), "the plan")
    gpus = checked["gpus"]
    notes = fit_notes(response)
    model_arguments, experts = _model_arguments(model, checked, notes)
    content: dict[str, Any] = {"arguments": {"--global-batch-size": [str(checked["global_batch"])]}}
    if int(checked.get("data_parallel", 1)) > 1:
        # The step time overlaps the gradient reduction with the backward in buckets
        # (TrainingCase.data_parallel_overlap, costs/overlap.py), which Megatron-Core does only
        # with --overlap-grad-reduce (store_true in megatron/training/arguments.py).
        content["arguments"]["--overlap-grad-reduce"] = []
    # Each technique writes its own arguments and notes (its Contribution's Megatron export), in plan order.
    draft = ExportDraft(plan=checked, model={**model, "experts": experts}, content=content, setting=no_setting_table("Megatron"))
    notes.extend(technique_export_notes("megatron", draft))
    megatron_block_arguments(response, draft)  # a per-stage plan whose stages all take block:N
    arguments = ordered_arguments(content["arguments"], ARGUMENT_ORDER, {MODEL_ARGUMENTS: model_arguments})
    arguments += ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", TOKENIZER_PLACEHOLDER,
                  "--data-path", DATA_PLACEHOLDER]
    notes.append(f"tokenizer and data: replace the placeholders '{TOKENIZER_PLACEHOLDER}' (a Hugging Face tokenizer) and "
                 f"'{DATA_PLACEHOLDER}' (a Megatron indexed dataset prefix), or use --mock-data to try the layout")
    if workload in ("lora", "qlora", "finetune"):
        notes.append(f"{workload}: pretrain_gpt.py trains every parameter from a checkpoint given with --load; "
                     "adapters (LoRA/QLoRA) are set up with Megatron-Bridge/NeMo PEFT, not by these arguments")
    nodes = plan.get("nodes") if isinstance(plan.get("nodes"), int) and plan.get("nodes", 0) >= 1 else 1
    per_node = gpus // nodes if gpus % nodes == 0 else gpus
    launch = shlex.join(["torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(per_node), "pretrain_gpt.py", *arguments])
    if nodes > 1:
        notes.append(f"launch: run the line on each of the {nodes} nodes with --node-rank and --master-addr/--master-port of the first")
    notes.append(f"launch ({gpus} GPUs, {nodes} node{'s' if nodes > 1 else ''} x {per_node}): {launch}")
    return MegatronExport(content={"release": RELEASE, "arguments": arguments, "launch": launch}, notes=tuple(notes))


def _model_arguments(model: Mapping[str, Any], plan: Mapping[str, Any], notes: list[str]) -> tuple[list[str], int]:
    from vramopt.models import load_model

    try:
        spec = load_model(required(model, "name", "model"))
    except VramoptError:
        raise InputError(f"megatron_args: the model '{model.get('name')}' is not in the catalog, so its shape is unknown") from None
    arguments = [
        "--num-layers", str(spec.layers), "--hidden-size", str(spec.hidden_size),
        "--ffn-hidden-size", str(spec.ffn_hidden_size), "--num-attention-heads", str(spec.heads),
        "--kv-channels", str(spec.head_dim),
        "--seq-length", str(positive_integer(plan, "seq_len")), "--max-position-embeddings", str(spec.max_context),
        "--vocab-size", str(spec.vocab_size),
        "--normalization", "RMSNorm" if spec.norm == "rmsnorm" else "LayerNorm",
        "--position-embedding-type", "learned_absolute" if spec.learned_positions else "rope",
    ]
    if spec.kv_heads != spec.heads:
        arguments += ["--group-query-attention", "--num-query-groups", str(spec.kv_heads)]
    if spec.gated_mlp:
        arguments.append("--swiglu")
    if not spec.tied_embeddings:
        arguments.append("--untie-embeddings-and-output-weights")
    if not spec.attention_bias and not spec.mlp_bias:
        arguments.append("--disable-bias-linear")
    if spec.moe is not None:
        arguments += ["--num-experts", str(spec.moe.experts), "--moe-router-topk", str(spec.moe.experts_per_token),
                      "--moe-ffn-hidden-size", str(spec.moe.expert_ffn_hidden_size)]
    if spec.mla is not None:
        notes.append(f"{spec.name} uses multi-head latent attention: add --multi-latent-attention with its ranks "
                     "(q/kv LoRA ranks, rope/nope head dims) from the model card")
    return arguments, spec.moe.experts if spec.moe is not None else 0
