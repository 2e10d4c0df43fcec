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

from vramopt.errors import InputError, VramoptError
from vramopt.exporters.result import TRAINING_WORKLOADS, ExportResult, fit_notes, positive_integer, required, response_parts
from vramopt.frameworks import check_runs, plan_columns
from vramopt.plan import parse_checkpointing
from vramopt.costs.columns import CHECKPOINT_EVERY, CHECKPOINT_SELECTIVE

RELEASE = "core_v0.16.1"
TOKENIZER_PLACEHOLDER = "/path/to/tokenizer"
DATA_PLACEHOLDER = "/path/to/data_text_document"

PRECISION_ARGUMENTS = {
    "fp32": [],
    "fp16": ["--fp16"],
    "bf16": ["--bf16"],
    # Transformer Engine: e4m3 forward / e5m2 backward ('hybrid'), the recipe of Micikevicius et al. 2022.
    "fp8": ["--bf16", "--fp8-format", "hybrid"],
    # NVFP4 (e2m1 elements) through Transformer Engine >= 2.7, bf16 around it.
    "fp4": ["--bf16", "--fp4-format", "e2m1"],
}
"""The precision flags of arguments.py ('--fp8-format' choices e4m3, hybrid; '--fp4-format' e2m1)."""


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
    check_runs("megatron", plan_columns(plan), "the plan")
    gpus = positive_integer(plan, "gpus")
    tensor, pipeline = positive_integer(plan, "tensor_parallel"), positive_integer(plan, "pipeline_parallel")
    context = positive_integer(plan, "context_parallel") if "context_parallel" in plan else 1
    virtual = positive_integer(plan, "virtual_stages")
    notes = fit_notes(response)
    arguments: list[str] = [
        "--tensor-model-parallel-size", str(tensor),
        "--pipeline-model-parallel-size", str(pipeline),
        "--context-parallel-size", str(context),
    ]
    if virtual > 1:
        arguments += ["--num-virtual-stages-per-pipeline-rank", str(virtual)]
    # Uneven stages (costs/pipeline_stages.py): Megatron-Core's own flags, each stage's count > 0.
    if plan.get("first_stage_layers"):
        arguments += ["--decoder-first-pipeline-num-layers", str(positive_integer(plan, "first_stage_layers"))]
    if plan.get("last_stage_layers"):
        arguments += ["--decoder-last-pipeline-num-layers", str(positive_integer(plan, "last_stage_layers"))]
    if plan.get("sequence_parallel"):
        arguments.append("--sequence-parallel")
    arguments += _model_arguments(model, plan, notes)
    arguments += [
        "--micro-batch-size", str(positive_integer(plan, "micro_batch")),
        "--global-batch-size", str(positive_integer(plan, "global_batch")),
    ]
    arguments += PRECISION_ARGUMENTS[plan["precision"]]
    if plan.get("grad_comm_precision") == "bf16" and plan["precision"] != "fp32":
        arguments.append("--grad-reduce-in-bf16")
    if plan.get("grad_comm_precision") == "fp32" and plan["precision"] == "fp16":
        arguments.append("--accumulate-allreduce-grads-in-fp32")  # bf16 sets it by itself (validate_args)
    arguments += _state_arguments(plan, notes)
    arguments += _recompute_arguments(plan)
    arguments += ["--attention-backend", "flash" if plan.get("flash_attention", True) else "unfused"]
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


def _model_arguments(model: Mapping[str, Any], plan: Mapping[str, Any], notes: list[str]) -> list[str]:
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
        tensor = positive_integer(plan, "tensor_parallel")
        expert = positive_integer(plan, "expert_parallel") if "expert_parallel" in plan else 1
        expert_tensor = positive_integer(plan, "expert_tensor_parallel") if "expert_tensor_parallel" in plan else tensor
        arguments += ["--num-experts", str(spec.moe.experts), "--moe-router-topk", str(spec.moe.experts_per_token),
                      "--moe-ffn-hidden-size", str(spec.moe.expert_ffn_hidden_size),
                      "--expert-model-parallel-size", str(expert), "--expert-tensor-parallel-size", str(expert_tensor),
                      # vramopt prices the all-to-all dispatcher (costs/expert_parallel.py), not the allgather default.
                      "--moe-token-dispatcher-type", "alltoall"]
    if spec.mla is not None:
        notes.append(f"{spec.name} uses multi-head latent attention: add --multi-latent-attention with its ranks "
                     "(q/kv LoRA ranks, rope/nope head dims) from the model card")
    return arguments


def _state_arguments(plan: Mapping[str, Any], notes: list[str]) -> list[str]:
    arguments = ["--optimizer", plan.get("optimizer", "adam")]
    if plan["zero_stage"] == 1:
        arguments.append("--use-distributed-optimizer")
    if plan.get("offload") == "cpu":
        # arguments.py validate_args: --optimizer-cpu-offload needs --use-precision-aware-optimizer.
        arguments += ["--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--optimizer-offload-fraction", "1.0"]
        notes.append("offload cpu: Megatron's HybridDeviceOptimizer runs the Adam step on the host for the whole "
                     "(--optimizer-offload-fraction 1.0) distributed-optimizer shard")
    return arguments


def _recompute_arguments(plan: Mapping[str, Any]) -> list[str]:
    kind, every = parse_checkpointing(required(plan, "checkpointing", "plan"))
    if kind == CHECKPOINT_SELECTIVE:
        return ["--recompute-granularity", "selective"]
    if kind == CHECKPOINT_EVERY:
        # 'uniform': each stage's layers in chunks of K, the input of each chunk kept (every:K).
        return ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", str(every)]
    return []
