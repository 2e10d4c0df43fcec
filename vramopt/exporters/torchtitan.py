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

from vramopt.constraints.contribution import ExportDraft
from vramopt.errors import InputError
from vramopt.exporters.result import (
    TRAINING_WORKLOADS, ExportResult, checked_plan, fit_notes, no_setting_table, ordered_arguments, required, response_parts,
    technique_export_notes,
)
from vramopt.frameworks import check_runs, plan_columns

RELEASE = "0.3.0"

CONFIGS = {
    "llama-3.1-8b": ("llama3", "llama3_8b"),
    "llama-3.1-70b": ("llama3", "llama3_70b"),
    "llama-3.1-405b": ("llama3", "llama3_405b"),
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b"),
}
"""vramopt catalog model -> (module, config function) of torchtitan 0.3.0
(models/llama3/config_registry.py, models/deepseek_v3/config_registry.py)."""

FLOAT8_CONFIGS = frozenset({"llama3_405b"})
"""Config functions whose model spec converts the linears (all but ``lm_head``) to float8
(``Float8LinearConverter``, models/llama3/config_registry.py ``llama3_405b``); a model
converter is not a command-line override."""

COMPILE_ARGUMENTS = {"--compile.enable": [], "--compile.no-enable-async-tensor-parallel": []}
"""torch.compile of the model and the loss (``CompileConfig.components`` defaults to both), as
vramopt's time model (fused kernels) and ``--framework torchtitan``'s compiled loss assume; async
TP off, since the plan's step time counts the tensor-parallel collectives exposed
(``llama3_405b`` turns it on)."""


class TorchtitanExport(ExportResult):
    """torchtitan overrides (``content['arguments']``) and the launch line (``content['launch']``)."""

    def text(self) -> str:
        return "#!/usr/bin/env bash\n# vramopt --export torchtitan (torchtitan " + RELEASE + ")\n" + self.content["launch"] + "\n"


ARGUMENT_ORDER = (
    "--parallelism.data_parallel_replicate_degree", "--parallelism.data_parallel_shard_degree",
    "--parallelism.tensor_parallel_degree", "--parallelism.context_parallel_degree",
    "--parallelism.pipeline_parallel_degree", "--parallelism.expert_parallel_degree",
    "--parallelism.fsdp_reshard_after_forward",
    "--parallelism.enable_sequence_parallel", "--parallelism.no-enable-sequence-parallel",
    "--parallelism.pipeline_parallel_schedule", "--parallelism.pipeline_parallel_layers_per_stage",
    "--parallelism.pipeline_parallel_first_stage_less_layers", "--parallelism.pipeline_parallel_last_stage_less_layers",
    "--parallelism.pipeline_parallel_microbatch_size", "--training.disable_cuda_graphs",
    "--training.local_batch_size", "--training.global_batch_size", "--training.seq_len",
    "--training.mixed_precision_param", "--compile.enable", "--compile.no-enable-async-tensor-parallel",
    "activation-checkpoint:none", "activation-checkpoint:full", "activation-checkpoint:selective",
)
"""The order the overrides are written in: each technique's torchtitan export
(``Contribution.exports['torchtitan']``) writes its own; a flag not listed here comes after
the listed ones, in plan order."""


def torchtitan_args(response: Mapping[str, Any]) -> TorchtitanExport:
    """The ``torchtitan.train`` arguments of a training plan, and the notes on what they cannot say.

    Raises
    ------
    InputError
        A serving response, a model torchtitan has no config for, or a plan that breaks a
        torchtitan rule.
    """
    workload, plan, model = response_parts(response, "torchtitan_args", TRAINING_WORKLOADS)
    plan = checked_plan(plan)  # every technique's value by its declaration; newer keys defaulted
    check_runs("torchtitan", plan_columns(plan), "the plan")
    name = required(model, "name", "model")
    if name not in CONFIGS:
        raise InputError(f"torchtitan {RELEASE} has no config for {name}; it has configs for {', '.join(sorted(CONFIGS))}")
    module, config = CONFIGS[name]
    notes = fit_notes(response)
    gpus = plan["gpus"]
    content: dict[str, Any] = {"arguments": {"--training.global_batch_size": [str(plan["global_batch"])],
                                             "--training.seq_len": [str(plan["seq_len"])], **COMPILE_ARGUMENTS}}
    # Each technique writes its own overrides and notes (its Contribution's torchtitan export), in plan order.
    draft = ExportDraft(plan=plan, model={**model, "layers": required(model, "layers", "model"), "config": config, "module": module,
                                          "float8_config": config in FLOAT8_CONFIGS},
                        content=content, setting=no_setting_table("torchtitan"))
    notes.extend(technique_export_notes("torchtitan", draft))
    arguments = ["--module", module, "--config", config] + ordered_arguments(content["arguments"], ARGUMENT_ORDER)
    if workload in ("lora", "qlora"):
        notes.append(f"{workload}: torchtitan's LoRA component is set in the config function, not by these arguments")
    notes.append(f"tokenizer and weights: {config} reads hf_assets_path (set --hf_assets_path to the downloaded Hugging Face assets)")
    nodes = plan.get("nodes") if isinstance(plan.get("nodes"), int) and plan.get("nodes", 0) >= 1 else 1
    per_node = gpus // nodes if gpus % nodes == 0 else gpus
    launch = shlex.join(["torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(per_node), "-m", "torchtitan.train", *arguments])
    notes.append(f"launch ({gpus} GPUs, {nodes} node{'s' if nodes > 1 else ''} x {per_node}): {launch}")
    return TorchtitanExport(content={"release": RELEASE, "arguments": arguments, "launch": launch}, notes=tuple(notes))
