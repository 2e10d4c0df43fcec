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
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vramopt.costs.inference import KV_CACHE_DTYPES, QUANTIZATIONS, ServingCase
from vramopt.errors import InputError
from vramopt.exporters.result import SERVING_WORKLOAD, ExportResult, fit_notes, one_of, positive_integer, required, response_parts
from vramopt.parallel_layout import ParallelLayout

QUANTIZATION_METHODS: dict[str, str | None] = {
    "bf16": None,
    "fp8": "fp8",
    "int8": "gptq",
    "int4": "awq",
    "fp4": "modelopt_fp4",
}
"""vLLM's --quantization for each weight format of the plan (None: unquantized). int8 and
int4 are weight-only with group scales in the cost model (GPTQ/AWQ layout); fp4 is NVFP4."""

KV_CACHE_DTYPE_NAMES = {"bf16": "auto", "fp8": "fp8"}
"""vLLM's --kv-cache-dtype: 'auto' stores the KV cache in the model dtype (bfloat16)."""

MODEL_DTYPE = "bfloat16"
"""Activations and unquantized weights: the cost model prices serving at 16 bits."""

DRAFT_MODEL_PLACEHOLDER = "<draft-model>"


def _assumption(name: str) -> Any:
    """A default of the serving cost model (``ServingCase``), documented there."""
    for field in dataclasses.fields(ServingCase):
        if field.name == name:
            return field.default
    raise KeyError(name)


@dataclass(frozen=True, slots=True)
class VllmExport(ExportResult):
    """vLLM engine arguments (``content``, EngineArgs names) and their notes."""

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
        "tensor_parallel_size": tensor_parallel,
        "pipeline_parallel_size": pipeline_parallel,
    }
    notes.append(
        f"model '{name}' is vramopt's catalog name: replace it with the Hugging Face repo id or local path of the checkpoint"
    )
    if replicas > 1 and not on_mig:
        content["data_parallel_size"] = replicas
    content.update(
        max_model_len=context,
        max_num_seqs=slots,
        # vLLM may use this share of the GPU's memory; the rest is the plan's headroom.
        gpu_memory_utilization=1.0 - float(headroom),
        kv_cache_dtype=KV_CACHE_DTYPE_NAMES[kv_cache_dtype],
    )
    method = QUANTIZATION_METHODS[quantization]
    stored = model.get("checkpoint_quantization")
    if isinstance(stored, dict) and stored.get("weight_format") == quantization:
        # A quantized checkpoint (its config.json's quantization_config) names its own method.
        method = str(stored["vllm_quantization"])
        notes.append(f"quantization '{method}': the checkpoint's quantization_config ({stored['method']}, "
                     f"{stored['weight_bits']}-bit weights)")
    elif method is not None:
        notes.append(_quantization_note(quantization))
    if method is not None:
        content["quantization"] = method
    if paged_kv:
        content["block_size"] = _assumption("kv_block_tokens")
    else:
        notes.append(
            "paged_kv false (a contiguous KV reservation of the full context per slot) is not expressible: "
            "vLLM always pages the KV cache (PagedAttention), which never needs more than that reservation"
        )
    content["enable_chunked_prefill"] = True
    content["max_num_batched_tokens"] = _assumption("prefill_chunk_tokens")
    if speculative:
        content["speculative_config"] = {
            "model": DRAFT_MODEL_PLACEHOLDER,
            "num_speculative_tokens": _assumption("speculative_tokens"),
        }
        notes.append(
            f"speculative decoding: replace '{DRAFT_MODEL_PLACEHOLDER}' in speculative_config with a draft model that "
            f"shares the target's tokenizer; the plan budgets a draft of about {_assumption('draft_params_fraction'):.0%} "
            "of the target's parameters (a 1B-class draft for a 70B target)"
        )
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
    notes.extend(_deployment_notes(plan, gpus, tensor_parallel, pipeline_parallel, replicas, instances_per_gpu, mig_profile))
    return VllmExport(content=content, notes=tuple(notes))


def _quantization_note(quantization: str) -> str:
    if quantization == "fp8":
        return (
            "quantization fp8: vLLM quantizes a bf16 checkpoint to FP8 when loading it (dynamic scales) or loads an FP8 "
            "checkpoint, whose own quantization_config then decides the method"
        )
    if quantization == "int4":
        return (
            "quantization int4 -> 'awq': the checkpoint must be AWQ-quantized (4-bit weights, group scales); for a GPTQ "
            "checkpoint use 'gptq' (vLLM picks its Marlin kernels where the GPU has them)"
        )
    if quantization == "int8":
        return (
            "quantization int8 (weight-only, group scales) -> 'gptq': the checkpoint must be GPTQ-quantized to 8 bits; "
            "a W8A8 int8 checkpoint loads with 'compressed-tensors' and computes in int8, which the plan does not assume, "
            "and 'bitsandbytes' quantizes a bf16 checkpoint at load time but runs slower"
        )
    return (
        "quantization fp4 (NVFP4) -> 'modelopt_fp4': the checkpoint must be quantized to NVFP4 with NVIDIA TensorRT "
        "Model Optimizer, and the GPU needs FP4 tensor cores"
    )


def _deployment_notes(
    plan: Mapping[str, Any], gpus: int, tensor_parallel: int, pipeline_parallel: int, replicas: int,
    instances_per_gpu: int, mig_profile: str,
) -> list[str]:
    notes: list[str] = []
    nodes = plan.get("nodes")
    multi_node = isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 1
    if mig_profile != "none":
        notes.append(
            f"MIG {mig_profile}: {replicas} instances ({instances_per_gpu} per GPU on {gpus} x {plan['gpu']}), each its own "
            "`vllm serve` with these arguments pinned with CUDA_VISIBLE_DEVICES=MIG-<uuid> (nvidia-smi -L lists the UUIDs), "
            "behind a load balancer"
        )
        return notes
    shards = ParallelLayout(tensor_parallel=tensor_parallel, pipeline_parallel=pipeline_parallel, data_parallel=1).replica_gpus
    if replicas > 1:
        notes.append(
            f"replicas {replicas}: data_parallel_size {replicas} runs {replicas} engines of {shards} GPU{'s' if shards > 1 else ''} "
            "each (vLLM releases with data parallelism; across nodes add --data-parallel-size-local and "
            "--data-parallel-address); otherwise run one `vllm serve` per replica on disjoint CUDA_VISIBLE_DEVICES behind a load balancer"
        )
    if multi_node and shards > gpus // nodes:
        notes.append(
            f"one replica spans nodes ({shards} GPUs, {gpus // nodes} per node): vLLM runs multi-node tensor/pipeline "
            "parallelism on a Ray cluster (--distributed-executor-backend ray)"
        )
    placement = f" on {nodes} node{'s' if nodes > 1 else ''}" if isinstance(nodes, int) and not isinstance(nodes, bool) else ""
    notes.append(f"hardware: {gpus} x {plan['gpu']}{placement}; the GPU type and count are not vLLM arguments")
    return notes
