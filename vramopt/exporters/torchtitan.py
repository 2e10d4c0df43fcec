"""torchtitan launch line from a training plan (torchtitan 0.3.0 on the package index).

torchtitan 0.3.0 reads no job TOML: a run is ``--module M --config F`` (a config_registry
function of torchtitan/models/M/config_registry.py) plus ``--section.field value``
overrides, parsed by ``torchtitan.config.ConfigManager`` (tyro) and validated there
(tests/unit/test_torchtitan_export.py parses every exported line with it where torchtitan
installs). ``torchtitan_args(response)`` returns those arguments and the ``torchrun`` line;
what they cannot say goes to the notes.

The plan must keep the rules of vramopt/frameworks/torchtitan.py (``--export torchtitan``
implies ``--framework torchtitan``); a plan that breaks one is an ``InputError``.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from vramopt.costs.columns import CHECKPOINT_EVERY, CHECKPOINT_SELECTIVE
from vramopt.errors import InputError
from vramopt.exporters.result import TRAINING_WORKLOADS, ExportResult, fit_notes, positive_integer, required, response_parts
from vramopt.frameworks import check_runs, plan_columns
from vramopt.plan import parse_checkpointing

RELEASE = "0.3.0"

CONFIGS = {
    "llama-3.1-8b": ("llama3", "llama3_8b"),
    "llama-3.1-70b": ("llama3", "llama3_70b"),
    "llama-3.1-405b": ("llama3", "llama3_405b"),
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b"),
}
"""vramopt catalog model -> (module, config function) of torchtitan 0.3.0
(models/llama3/config_registry.py, models/deepseek_v3/config_registry.py)."""


class TorchtitanExport(ExportResult):
    """torchtitan overrides (``content['arguments']``) and the launch line (``content['launch']``)."""

    def text(self) -> str:
        return "#!/usr/bin/env bash\n# vramopt --export torchtitan (torchtitan " + RELEASE + ")\n" + self.content["launch"] + "\n"


def _stage_split(layers: int, pipeline: int, virtual: int, plan: Mapping[str, Any]) -> tuple[int, int, int]:
    """(layers_per_stage, first_stage_less_layers, last_stage_less_layers) of the plan's
    stages. torchtitan 0.3.0 (distributed/pipeline_parallel.py _generate_llm_fqn_per_model_part)
    counts ``layers + first_less + last_less`` effective layers, deals them evenly over the
    stages and takes first_less off the first and last_less off the last: with the middle
    stages' count n as layers_per_stage, first_less = n - first and last_less = n - last give
    Megatron's assignment exactly (virtual_stages 1: the torchtitan rule refuses the others)."""
    from vramopt.costs.pipeline_stages import stage_counts

    first, last = int(plan.get("first_stage_layers", 0) or 0), int(plan.get("last_stage_layers", 0) or 0)
    if not first and not last:
        return layers // (pipeline * virtual), 0, 0
    counts = stage_counts(layers, pipeline, first, last)
    middle = max(counts)
    return middle, middle - counts[0], middle - counts[-1]


def torchtitan_args(response: Mapping[str, Any]) -> TorchtitanExport:
    """The ``torchtitan.train`` arguments of a training plan, and the notes on what they cannot say.

    Raises
    ------
    InputError
        A serving response, a model torchtitan has no config for, or a plan that breaks a
        torchtitan rule.
    """
    workload, plan, model = response_parts(response, "torchtitan_args", TRAINING_WORKLOADS)
    check_runs("torchtitan", plan_columns(plan), "the plan")
    name = required(model, "name", "model")
    if name not in CONFIGS:
        raise InputError(f"torchtitan {RELEASE} has no config for {name}; it has configs for {', '.join(sorted(CONFIGS))}")
    module, config = CONFIGS[name]
    notes = fit_notes(response)
    gpus = positive_integer(plan, "gpus")
    tensor, pipeline = positive_integer(plan, "tensor_parallel"), positive_integer(plan, "pipeline_parallel")
    context = positive_integer(plan, "context_parallel") if "context_parallel" in plan else 1
    data = positive_integer(plan, "data_parallel")
    virtual, micro = positive_integer(plan, "virtual_stages"), positive_integer(plan, "micro_batch")
    global_batch = positive_integer(plan, "global_batch")
    zero = plan["zero_stage"]
    arguments = ["--module", module, "--config", config]
    # ZeRO-0: DDP over the replicate dimension; ZeRO-2/3: FSDP2 over the shard dimension.
    replicate, shard = (data, 1) if zero == 0 else (1, data)
    arguments += ["--parallelism.data_parallel_replicate_degree", str(replicate),
                  "--parallelism.data_parallel_shard_degree", str(shard),
                  "--parallelism.tensor_parallel_degree", str(tensor),
                  "--parallelism.context_parallel_degree", str(context),
                  "--parallelism.pipeline_parallel_degree", str(pipeline)]
    expert = positive_integer(plan, "expert_parallel") if "expert_parallel" in plan else 1
    if expert > 1:
        arguments += ["--parallelism.expert_parallel_degree", str(expert)]
    if zero >= 2:
        # ZeRO-3 is FSDP2 under torchtitan's 'default' policy, the one its memory rule counts
        # (frameworks/memory.py: [norm, lm_head] kept from the forward to the backward, and
        # no resharding under pipeline parallelism); ZeRO-2 is 'never'.
        arguments += ["--parallelism.fsdp_reshard_after_forward", "default" if zero == 3 else "never"]
    if tensor > 1:
        arguments.append("--parallelism.enable_sequence_parallel" if plan.get("sequence_parallel") else "--parallelism.no-enable-sequence-parallel")
    if pipeline > 1:
        layers = required(model, "layers", "model")
        per_stage, first_less, last_less = _stage_split(layers, pipeline, virtual, plan)
        arguments += [
            "--parallelism.pipeline_parallel_schedule", "Interleaved1F1B" if virtual > 1 else "1F1B",
            "--parallelism.pipeline_parallel_layers_per_stage", str(per_stage),
            # Even stages: 0 and 0 (torchtitan's default takes one off the first and last).
            "--parallelism.pipeline_parallel_first_stage_less_layers", str(first_less),
            "--parallelism.pipeline_parallel_last_stage_less_layers", str(last_less),
            "--parallelism.pipeline_parallel_microbatch_size", str(micro),
            # ConfigManager refuses pipeline parallelism with CUDA graphs ("CUDA graphs do not
            # support pipeline parallelism yet"), torchtitan 0.3.0 trainer.py.
            "--training.disable_cuda_graphs",
        ]
        local_batch = global_batch // data  # every pipeline micro-batch of the step in one local batch
    else:
        local_batch = micro  # one micro-batch per gradient-accumulation step
    arguments += ["--training.local_batch_size", str(local_batch), "--training.global_batch_size", str(global_batch),
                  "--training.seq_len", str(positive_integer(plan, "seq_len")),
                  "--training.mixed_precision_param", "float32" if plan["precision"] == "fp32" else "bfloat16"]
    kind, _ = parse_checkpointing(required(plan, "checkpointing", "plan"))
    arguments.append({CHECKPOINT_EVERY: "activation-checkpoint:full", CHECKPOINT_SELECTIVE: "activation-checkpoint:selective"}
                     .get(kind, "activation-checkpoint:none"))
    if plan["precision"] in ("fp8", "fp4"):
        notes.append(f"precision {plan['precision']}: torchtitan's float8/NVFP4 linears are model converters set in a "
                     f"config_registry function (as {config}'s _mxfp8/_nvfp4 variants do); {config} itself trains in bf16")
    if kind == CHECKPOINT_SELECTIVE:
        if module != "llama3":  # DeepSeek-V3: experts and latent attention
            notes.append("checkpointing selective: torchtitan's SelectiveAC (per-op, every second matmul recomputed) is counted "
                         "for dense blocks only; this model's memory is vramopt's attention-core recomputation")
        else:
            notes.append("checkpointing selective: torchtitan's per-op SelectiveAC, counted as it keeps the outputs "
                         "(wqkv, w1, w2, attention; wo and w3 recomputed: vramopt/frameworks/torchtitan_activations.py)")
    if workload in ("lora", "qlora"):
        notes.append(f"{workload}: torchtitan's LoRA component is set in the config function, not by these arguments")
    notes.append(f"tokenizer and weights: {config} reads hf_assets_path (set --hf_assets_path to the downloaded Hugging Face assets)")
    nodes = plan.get("nodes") if isinstance(plan.get("nodes"), int) and plan.get("nodes", 0) >= 1 else 1
    per_node = gpus // nodes if gpus % nodes == 0 else gpus
    launch = shlex.join(["torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(per_node), "-m", "torchtitan.train", *arguments])
    notes.append(f"launch ({gpus} GPUs, {nodes} node{'s' if nodes > 1 else ''} x {per_node}): {launch}")
    return TorchtitanExport(content={"release": RELEASE, "arguments": arguments, "launch": launch}, notes=tuple(notes))
