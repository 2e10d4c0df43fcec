"""Framework configurations from a plan: DeepSpeed, Megatron-LM and torchtitan for training, vLLM and SGLang for serving.

Each exporter reads one "vramopt/v1" response (``to_dict()`` of an estimate, or a solve
result) and returns an ``ExportResult``: the configuration (``content``, ``text()``) and
``notes``, one line per plan choice the framework cannot express or expresses only
approximately. A response of the wrong workload, or one missing a key, is an ``InputError``.

>>> from vramopt.estimate import estimate_training
>>> from vramopt.types import TrainingPlan, TrainingWorkload
>>> response = estimate_training(TrainingWorkload(model="8b", seq_len=2048, global_batch=16),
...                              TrainingPlan(gpu="h100", gpus=8, zero_stage=2)).to_dict()
>>> export("deepspeed", response).content["zero_optimization"]["stage"]
2
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from vramopt.errors import InputError
from vramopt.exporters.deepspeed import deepspeed_config
from vramopt.exporters.megatron import MegatronExport, megatron_args
from vramopt.exporters.result import ExportResult
from vramopt.exporters.sglang import SglangExport, sglang_args
from vramopt.exporters.torchtitan import TorchtitanExport, torchtitan_args
from vramopt.exporters.vllm import VllmExport, vllm_args

EXPORTERS: dict[str, Callable[[Mapping[str, Any]], ExportResult]] = {
    "deepspeed": deepspeed_config,
    "megatron": megatron_args,
    "torchtitan": torchtitan_args,
    "vllm": vllm_args,
    "sglang": sglang_args,
}
"""Target name -> exporter."""


def export(target: str, response: Mapping[str, Any]) -> ExportResult:
    """Export ``response`` for ``target`` (a name of ``EXPORTERS``)."""
    if target not in EXPORTERS:
        raise InputError(f"export target '{target}' is not one of {', '.join(EXPORTERS)}")
    from dataclasses import replace

    from vramopt.stage_checkpointing import exported_response

    # A per-stage block: its plan where the target runs it, else the uniform plan; a note either way.
    response, stage_notes = exported_response(response, target)
    result = EXPORTERS[target](response)
    return replace(result, notes=tuple(result.notes) + tuple(stage_notes)) if stage_notes else result


__all__ = ["EXPORTERS", "ExportResult", "MegatronExport", "SglangExport", "TorchtitanExport", "VllmExport", "deepspeed_config", "export",
           "megatron_args", "sglang_args", "torchtitan_args", "vllm_args"]
