"""What an exporter returns, and the checks every exporter makes on the response it reads.

An exporter turns one "vramopt/v1" response (``TrainingEstimate.to_dict()``,
``ServingEstimate.to_dict()`` or ``SolveResult.to_dict()``) into a framework's own
configuration. A plan may choose something the framework's configuration cannot say; each
such choice becomes one line of ``notes`` instead of being dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

from vramopt.errors import InputError

TRAINING_WORKLOADS = ("train", "finetune", "lora", "qlora")
"""The ``workload`` values of a training response (``vramopt.types.TRAINING_KINDS``)."""
SERVING_WORKLOAD = "infer"


@dataclass(frozen=True, slots=True)
class ExportResult:
    """A framework configuration made from one plan, and what it could not express."""

    content: dict[str, Any]
    """The configuration, as the framework reads it (JSON-serializable)."""
    notes: tuple[str, ...]
    """One line per plan choice the framework cannot express, or expresses only
    approximately, and per value the user must fill in (placeholders)."""

    def text(self) -> str:
        """The configuration as the JSON text of its file."""
        return json.dumps(self.content, indent=2) + "\n"

    def file_text(self, path: str) -> str:
        """The text of the file ``path`` (exporters whose format follows the extension override it)."""
        return self.text()

    def notes_text(self) -> str:
        """The companion message: the notes as a bulleted list."""
        return "".join(f"- {note}\n" for note in self.notes)


def required(mapping: Mapping[str, Any], key: str, where: str) -> Any:
    """``mapping[key]``, or an ``InputError`` naming the missing key."""
    if not isinstance(mapping, Mapping):
        raise InputError(f"the response's '{where}' must be an object, got {type(mapping).__name__}")
    if key not in mapping:
        raise InputError(f"the response has no '{where}.{key}'" if where else f"the response has no '{key}'")
    return mapping[key]


def response_parts(response: Mapping[str, Any], exporter: str, accepted: tuple[str, ...]) -> tuple[str, dict, dict]:
    """Check the response's workload and return (workload, plan, model)."""
    if not isinstance(response, Mapping):
        raise InputError(f"{exporter} needs a vramopt/v1 response object, got {type(response).__name__}")
    workload = required(response, "workload", "")
    if workload not in accepted:
        if workload == SERVING_WORKLOAD:
            other = "a serving response (workload 'infer'); use vllm_args for serving plans"
        elif workload in TRAINING_WORKLOADS:
            other = f"a training response (workload '{workload}'); use deepspeed_config for training plans"
        else:
            other = f"workload '{workload}'"
        wanted = ", ".join(accepted[:-1]) + f" or {accepted[-1]}" if len(accepted) > 1 else accepted[0]
        raise InputError(f"{exporter} takes a response of workload {wanted}, got {other}")
    plan = required(response, "plan", "")
    if plan is None:
        raise InputError(f"{exporter}: the response has no plan (no plan fits the request), so there is nothing to export")
    model = required(response, "model", "")
    required(plan, "gpu", "plan")  # also checks that plan is an object
    required(model, "name", "model")
    return workload, dict(plan), dict(model)


def positive_integer(plan: Mapping[str, Any], key: str) -> int:
    value = required(plan, key, "plan")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"plan.{key} must be a positive integer, got {value!r}")
    return value


def one_of(plan: Mapping[str, Any], key: str, allowed: tuple[Any, ...]) -> Any:
    value = required(plan, key, "plan")
    if value not in allowed or type(value) is not type(allowed[0]):  # 1 is not True, 2.0 is not 2
        raise InputError(f"plan.{key} must be one of {', '.join(repr(item) for item in allowed)}, got {value!r}")
    return value


FIRST_RELEASE_PLAN_FIELDS = (
    "gpu", "gpus", "tensor_parallel", "pipeline_parallel", "data_parallel", "sequence_parallel", "virtual_stages",
    "zero_stage", "checkpointing", "precision", "grad_comm_precision", "offload", "flash_attention", "seq_len",
    "micro_batch", "grad_accumulation", "global_batch",
)
"""The training plan's keys in every "vramopt/v1" response since the first release (the
schema's required plan keys less context_parallel, which older responses lack): a response
without one is refused. A key added since (context parallelism, the optimizer format,
expert parallelism, uneven stages) takes its technique's default when absent."""


def checked_plan(plan: Mapping[str, Any]) -> dict[str, Any]:
    """The response's training plan with every technique's value checked by its own
    declaration (``PlanField``: type, range or choices; the message names the key) and the
    keys a newer technique adds filled with their defaults; the workload's values (data
    parallel, batch, sequence length) checked as positive integers."""
    from vramopt.plan_record import plan_techniques

    values = dict(plan)
    for name in FIRST_RELEASE_PLAN_FIELDS:
        required(plan, name, "plan")
    for name in ("data_parallel", "seq_len", "grad_accumulation", "global_batch"):
        positive_integer(plan, name)
    for technique in plan_techniques():
        declaration = technique.plan_field
        if technique.field not in plan:
            values[technique.field] = declaration.default
            continue
        value = plan[technique.field]
        if isinstance(value, bool) is not (declaration.python_type is bool) or not isinstance(value, declaration.python_type):
            raise InputError(f"plan.{technique.field} must be a JSON {_json_kind(declaration.python_type)}, got {value!r}")
        problem = declaration.problem(technique.field, value)
        if problem:
            raise InputError(f"plan.{problem}")
        if declaration.python_type is str and not declaration.choices:
            try:
                technique.parse(value)  # checkpointing's every:K
            except InputError as error:
                raise InputError(f"plan.{technique.field}: {error}") from None
    for technique in plan_techniques():
        if technique.plan_field.resolve is not None:  # etp 0 stands for tp
            values[technique.field] = technique.plan_field.resolve(SimpleNamespace(**values))
    return values


def _json_kind(python_type: type) -> str:
    return {bool: "boolean", int: "integer", str: "string"}[python_type]


def fit_notes(response: Mapping[str, Any]) -> list[str]:
    """A note for each capacity test the response says the plan fails (estimate does not refuse those)."""
    memory = response.get("memory")
    if not isinstance(memory, Mapping):
        return []
    failed = [
        text for key, text in (
            ("fits", "GPU memory with the required headroom"),
            ("fits_host", "host RAM"),
            ("fits_nvme", "NVMe"),
        )
        if memory.get(key) is False
    ]
    if not failed:
        return []
    return [f"this plan does not fit ({', '.join(failed)}): the exported configuration would run out of memory"]


def catalog_name_note(name: str) -> str:
    """The serving exports' note on the model argument, which holds vramopt's catalog name."""
    return f"model '{name}' is vramopt's catalog name: replace it with the Hugging Face repo id or local path of the checkpoint"


def technique_export_notes(exporter: str, draft) -> list[str]:
    """Every training technique's export to ``exporter`` applied to ``draft``, in plan order:
    each edits ``draft.content`` and returns its notes (``Contribution.exports``)."""
    from vramopt.constraints import registry

    notes: list[str] = []
    for technique in registry.training_techniques():
        export = technique.contribution.exports[exporter]
        if export.apply is not None:
            notes.extend(export.apply(draft))
    return notes


def ordered_arguments(written: Mapping[str, list[str]], order: tuple[str, ...],
                      slots: Mapping[str, list[str]] | None = None) -> list[str]:
    """A command-line exporter's arguments: the flags the techniques wrote in ``order`` (a
    ``slots`` name in it stands for the exporter's own block there, the model's arguments),
    then any flag ``order`` does not list, in the order written (plan order), so a new
    technique's flag needs no edit of the exporter."""
    slots = slots or {}
    arguments: list[str] = []
    for flag in order:
        if flag in slots:
            arguments += slots[flag]
        elif flag in written:
            arguments += [flag, *written[flag]]
    for flag, values in written.items():
        if flag not in order:
            arguments += [flag, *values]
    return arguments


def no_setting_table(exporter: str) -> Callable[[str], Any]:
    """``ExportDraft.setting`` of an exporter that keeps no table of documented settings."""
    from vramopt.errors import VramoptError

    def setting(name: str) -> Any:
        raise VramoptError(f"internal error: the {exporter} exporter has no documented setting table ({name})")

    return setting
