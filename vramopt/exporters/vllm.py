"""vLLM engine arguments from a serving plan.

``vllm_args(response)`` reads a "vramopt/v1" serving response (workload ``infer``) and
returns the arguments of one vLLM engine (``EngineArgs`` names, snake_case), and
``cli_text()`` the same as a ``vllm serve`` command line (kebab-case flags). Only arguments
of vLLM's ``EngineArgs`` are used (vllm/engine/arg_utils.py; the names and allowed values
are listed in tests/fixtures/exporters/vllm_documented_args.json).

The numbers the plan does not decide (block size, chunked-prefill budget, draft tokens per
step) are the serving cost model's own assumptions (``ServingCase``), so the exported engine
runs the configuration the plan was priced with. What the arguments cannot say goes to the
notes: the checkpoint to load, how a quantized checkpoint must be made, the draft model,
contiguous KV allocation, and how replicas and MIG instances are launched.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vramopt.constraints import registry
from vramopt.constraints.contribution import ExportDraft
from vramopt.costs.inference import KV_CACHE_DTYPES, QUANTIZATIONS, ServingCase
from vramopt.errors import InputError
from vramopt.exporters.vllm_disaggregated import disaggregated_notes
from vramopt.exporters.result import SERVING_WORKLOAD, ExportResult, catalog_name_note, fit_notes, one_of, positive_integer, required, response_parts

MODEL_DTYPE = "bfloat16"
"""Activations and unquantized weights: the cost model prices serving at 16 bits."""

ARGUMENT_ORDER = (
    "model", "dtype", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel", "max_model_len",
    "max_num_seqs", "gpu_memory_utilization", "kv_cache_dtype", "quantization", "block_size", "enable_chunked_prefill",
    "max_num_batched_tokens", "speculative_config",
)
"""The order the arguments are written in (the YAML and the command line read: model and
parallelism, context and batch, memory, KV cache and weights, scheduling, speculative
decoding); an argument a technique adds that is not listed here follows them, in the order
the techniques wrote it."""


def _assumption(name: str) -> Any:
    """A default of the serving cost model (``ServingCase``), documented there."""
    for field in dataclasses.fields(ServingCase):
        if field.name == name:
            return field.default
    raise KeyError(name)


@dataclass(frozen=True, slots=True)
class VllmExport(ExportResult):
    """vLLM engine arguments (``content``, EngineArgs names) and their notes."""

    def file_text(self, path: str) -> str:
        """The file ``path`` holds: the YAML ``vllm serve --config`` reads for a .yaml/.yml path
        (vLLM refuses any other extension), the JSON of the EngineArgs keywords otherwise."""
        return self.yaml_text() if path.lower().endswith((".yaml", ".yml")) else self.text()

    def yaml_text(self) -> str:
        """The arguments as the flat YAML mapping of ``vllm serve --config FILE``.

        vLLM's reader (vllm/utils/argparse_utils.py ``FlexibleArgumentParser.load_config_file``)
        ``yaml.safe_load``s one flat mapping and turns each ``key: value`` into ``--key value``:
        ``true`` into the bare flag and ``false`` into nothing (so a switched-off boolean is
        written as its ``no_`` flag, ``true``), any other value through ``str()``, so a nested
        setting (``speculative_config``) is written as its JSON text. Keys are the EngineArgs
        names, as in the JSON export: ``parse_args`` turns the underscores of every flag name
        into dashes after reading the file (``--tensor_parallel_size`` is
        ``--tensor-parallel-size``); a string is written plain when YAML reads it back as that
        string, double-quoted (JSON string syntax, which is YAML) otherwise."""
        lines = ["# vllm serve --config FILE (written by vramopt --export vllm)"]
        for name, value in self.content.items():
            key = name
            if isinstance(value, bool):
                lines.append(f"{key if value else 'no_' + key}: true")
            elif isinstance(value, Mapping):
                lines.append(f"{key}: {json.dumps(json.dumps(value, separators=(',', ':')))}")
            elif isinstance(value, float):
                # PyYAML reads '1e-05' as a string: write floats with a decimal point, no exponent.
                text = repr(value)
                lines.append(f"{key}: {text if 'e' not in text else format(value, '.20f').rstrip('0')}")
            elif isinstance(value, int):
                lines.append(f"{key}: {value}")
            else:
                lines.append(f"{key}: {_yaml_string(str(value))}")
        return "\n".join(lines) + "\n"

    def cli_text(self) -> str:
        """The equivalent ``vllm serve MODEL --flag value ...`` command line (one line)."""
        tokens = ["vllm", "serve", str(self.content["model"])]
        for name, value in self.content.items():
            if name == "model":
                continue
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                tokens.append(flag if value else "--no-" + name.replace("_", "-"))
            elif isinstance(value, Mapping):
                tokens += [flag, json.dumps(value, separators=(",", ":"))]
            elif isinstance(value, float):
                tokens += [flag, repr(value)]
            else:
                tokens += [flag, str(value)]
        return shlex.join(tokens)


def vllm_args(response: Mapping[str, Any]) -> VllmExport:
    """The vLLM engine arguments of a serving plan, and the notes on what they cannot say.

    Parameters
    ----------
    response
        A "vramopt/v1" serving response: ``ServingEstimate.to_dict()`` or the output of
        ``solve`` for a ServingWorkload (workload ``infer``).

    Returns
    -------
    VllmExport
        ``content``: one engine's arguments (for MIG, one instance's); ``cli_text()``: the
        ``vllm serve`` command; ``notes``: one line per choice vLLM cannot express.

    Raises
    ------
    InputError
        A training response, a response without a plan, a missing key, or a value outside
        the contract (the message names the key).
    """
    _, plan, model = response_parts(response, "vllm_args", (SERVING_WORKLOAD,))
    memory = required(response, "memory", "")
    gpus = positive_integer(plan, "gpus")
    tensor_parallel = positive_integer(plan, "tensor_parallel")
    pipeline_parallel = positive_integer(plan, "pipeline_parallel")
    context = positive_integer(plan, "context")
    slots = positive_integer(plan, "slots")
    replicas = positive_integer(plan, "replicas")
    instances_per_gpu = positive_integer(plan, "instances_per_gpu")
    quantization = one_of(plan, "quantization", QUANTIZATIONS)
    kv_cache_dtype = one_of(plan, "kv_cache_dtype", KV_CACHE_DTYPES)
    paged_kv = one_of(plan, "paged_kv", (True, False))
    speculative = one_of(plan, "speculative_decoding", (True, False))
    mig_profile = required(plan, "mig_profile", "plan")
    if not isinstance(mig_profile, str) or not mig_profile:
        raise InputError(f"plan.mig_profile must be a MIG profile name or 'none', got {mig_profile!r}")
    on_mig = mig_profile != "none"
    headroom = required(memory, "required_headroom_fraction", "memory")
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0.0 <= headroom < 1.0:
        raise InputError(f"memory.required_headroom_fraction must be a fraction in [0, 1), got {headroom!r}")
    if on_mig and (tensor_parallel > 1 or pipeline_parallel > 1):
        raise InputError("a MIG plan serves one replica per instance: plan.tensor_parallel and plan.pipeline_parallel must be 1")

    notes: list[str] = fit_notes(response)
    name = str(model["name"])
    content: dict[str, Any] = {
        "model": name,
        "dtype": MODEL_DTYPE,
        "max_model_len": context,
        # vLLM may use this share of the GPU's memory; the rest is the plan's headroom.
        "gpu_memory_utilization": 1.0 - float(headroom),
        "enable_chunked_prefill": True,
        "max_num_batched_tokens": _assumption("prefill_chunk_tokens"),
    }
    notes.append(catalog_name_note(name))
    checked = {
        **plan, "gpus": gpus, "tensor_parallel": tensor_parallel, "pipeline_parallel": pipeline_parallel, "context": context,
        "slots": slots, "replicas": replicas, "instances_per_gpu": instances_per_gpu, "quantization": quantization,
        "kv_cache_dtype": kv_cache_dtype, "paged_kv": paged_kv, "speculative_decoding": speculative, "mig_profile": mig_profile,
    }
    # Each technique writes its own arguments and notes (its Contribution's vLLM export), in
    # registry.SERVING_ORDER; the notes on how the engines are launched come last.
    draft = ExportDraft(plan=checked, model=model, content=content, setting=_assumption)
    launch_notes: list[str] = []
    for technique in registry.serving_techniques():
        export = technique.contribution.exports["vllm"]
        if export.apply is not None:
            (launch_notes if export.launch else notes).extend(export.apply(draft))
    capacity = memory.get("capacity_bytes")
    of_what = "the MIG instance's memory" if on_mig else "the GPU's memory"
    counted = ""
    if isinstance(capacity, (int, float)) and not isinstance(capacity, bool):
        counted = f"; the plan counts {capacity / 1e9:.1f} GB"
    notes.append(
        f"gpu_memory_utilization {content['gpu_memory_utilization']:g} = 1 - the required headroom: vLLM may use that "
        f"share of {of_what} (as CUDA reports it{counted}) and gives the KV cache all that the weights and activations "
        "leave, more than the plan's KV cache; max_num_seqs still caps the concurrent sequences"
    )
    requests = response.get("requests")
    cached = requests.get("cached_prefix_tokens") if isinstance(requests, Mapping) else None
    if isinstance(cached, int) and not isinstance(cached, bool) and cached > 0:
        content["enable_prefix_caching"] = True
        notes.append(f"enable_prefix_caching: the plan counts the {cached:,}-token shared prefix of every prompt once per replica "
                     "and does not prefill it; the saving needs every prompt to start with the same tokens")
    notes.extend(launch_notes)
    notes.extend(disaggregated_notes(response))  # an xPyD answer: how to launch it instead
    return VllmExport(content=_in_argument_order(content), notes=tuple(notes))


_YAML_WORDS = {"y", "n", "yes", "no", "true", "false", "on", "off", "null"}
"""Plain scalars YAML 1.1 (PyYAML's safe_load) reads as booleans or null."""


def _yaml_string(text: str) -> str:
    """``text`` as a YAML scalar that loads back as the same string."""
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9_./-]*", text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)


def _in_argument_order(content: dict[str, Any]) -> dict[str, Any]:
    position = {name: index for index, name in enumerate(ARGUMENT_ORDER)}
    return dict(sorted(content.items(), key=lambda item: position.get(item[0], len(ARGUMENT_ORDER))))
