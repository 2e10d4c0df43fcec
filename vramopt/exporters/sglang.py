"""SGLang server arguments from a serving plan: the second serving export (issue 15 item 2).

``sglang_args(response)`` reads a "vramopt/v1" serving response and returns the arguments of
one SGLang server (``ServerArgs`` names, snake_case; sglang 0.5.23,
python/sglang/srt/server_args.py and srt/arg_groups/fields/), ``yaml_text()`` the file
``python -m sglang.launch_server --config FILE`` reads (srt/utils/server_args_config_parser.py:
a flat mapping whose keys are the flags' names with underscores) and ``cli_text()`` the
command line. The names, kinds and choices are recorded in
tests/fixtures/exporters/sglang_server_args.json (benchmarks/sglang_arguments_fixture.py).

The engine decisions are the vLLM export's: each serving technique writes its vLLM
``EngineArgs`` (``Contribution.exports["vllm"]``), and this module renames them into
SGLang's arguments (``TRANSLATIONS``), converting where the two engines count differently:

- ``gpu_memory_utilization`` (vLLM: all the engine's memory) becomes ``mem_fraction_static``
  (SGLang: the weights and the KV pool only; "the fraction of the memory used for static
  allocation (model weights and KV cache memory pool)", fields/schedule.py), so the plan's
  activation peak and CUDA graphs are taken off it and the headroom stays the plan's;
- vLLM's fp8 KV cache is e4m3 (``fp8_e4m3`` in SGLang's choices);
- ``block_size`` is SGLang's ``page_size`` (tokens per page; SGLang's default is 1 token);
- chunked prefill: ``chunked_prefill_size`` is the token budget (-1 would disable it);
- the draft model of speculative decoding is SGLang's ``STANDALONE`` algorithm
  (srt/speculative/spec_info.py), the draft depth ``speculative_num_steps`` with one token
  per step (``speculative_eagle_topk`` 1) and ``speculative_num_draft_tokens`` = depth + 1.

A vLLM argument without a translation is not dropped: its note says to set the SGLang
equivalent by hand (tests/unit/test_sglang_export.py fails for any argument the vLLM
exporter can write that has none).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from vramopt.exporters.result import SERVING_WORKLOAD, ExportResult, catalog_name_note, fit_notes, response_parts
from vramopt.exporters.vllm import VllmExport, vllm_args

RELEASE = "0.5.23"
"""The sglang release whose ServerArgs the export targets."""

SGLANG_QUANTIZATIONS = ("fp8", "awq", "gptq", "modelopt_fp4", "compressed-tensors", "bitsandbytes", "gptq_marlin", "awq_marlin")
"""vLLM quantization methods SGLang 0.5.23 takes under the same name (its --quantization
choices, recorded in the fixture); another method the checkpoint names is left to the
checkpoint's own quantization_config."""

KV_CACHE_DTYPES = {"auto": "auto", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
"""vLLM --kv-cache-dtype -> SGLang's ('fp8' is e4m3 in vLLM: vllm/config/cache.py CacheDType)."""


@dataclass(frozen=True, slots=True)
class SglangExport(ExportResult):
    """SGLang server arguments (``content``, ServerArgs names) and their notes."""

    def file_text(self, path: str) -> str:
        """The YAML of ``--config FILE`` for a .yaml/.yml path (SGLang refuses any other
        extension), the JSON of the arguments otherwise."""
        return self.yaml_text() if path.lower().endswith((".yaml", ".yml")) else self.text()

    def yaml_text(self) -> str:
        """One flat mapping: SGLang's merger turns each ``key: value`` into ``--key value``
        (``true`` into the bare store_true flag); every value here is a number or a plain
        string, written as JSON scalars (which YAML reads back unchanged)."""
        lines = ["# python -m sglang.launch_server --config FILE (written by vramopt --export sglang)"]
        for name, value in self.content.items():
            lines.append(f"{name}: {'true' if value is True else json.dumps(value)}")
        return "\n".join(lines) + "\n"

    def cli_text(self) -> str:
        """The equivalent ``python -m sglang.launch_server --model-path MODEL ...`` line."""
        tokens = ["python", "-m", "sglang.launch_server"]
        for name, value in self.content.items():
            flag = "--" + name.replace("_", "-")
            tokens += [flag] if value is True else [flag, str(value)]
        return shlex.join(tokens)


def _mem_fraction_static(value: float, response: Mapping[str, Any]) -> dict[str, Any]:
    memory = response["memory"]
    capacity = float(memory["capacity_bytes"])
    dynamic = float(memory.get("activations_bytes", 0.0)) + float(memory.get("cuda_graphs_bytes", 0.0))
    return {"mem_fraction_static": round(value - dynamic / capacity, 4)}


def _speculative(value: Mapping[str, Any], response: Mapping[str, Any]) -> dict[str, Any]:
    depth = int(value["num_speculative_tokens"])
    return {"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": str(value["model"]),
            "speculative_num_steps": depth, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": depth + 1}


def _renamed(name: str) -> Callable[[Any, Mapping[str, Any]], dict[str, Any]]:
    return lambda value, response: {name: value}


def _expert_parallel(response: Mapping[str, Any]) -> int:
    return int(response["plan"].get("expert_parallel", 1))


def _tensor_parallel(value: int, response: Mapping[str, Any]) -> dict[str, Any]:
    """SGLang's tp_size counts every GPU of the engine: with dp attention the ep group's
    (vLLM's tp x dp); attention then runs tp_size / dp_size ways (sglang 0.5.23 server_args:
    ``--enable-dp-attention``)."""
    expert_parallel = _expert_parallel(response)
    return {"tp_size": expert_parallel if expert_parallel > 1 else value}


def _data_parallel(value: int, response: Mapping[str, Any]) -> dict[str, Any]:
    """Plain replicas are SGLang's dp_size; an expert-parallel replica's attention groups are
    dp_size with --enable-dp-attention."""
    if _expert_parallel(response) > 1:
        return {"dp_size": value, "enable_dp_attention": True}
    return {"dp_size": value}


def _enable_expert_parallel(value: bool, response: Mapping[str, Any]) -> dict[str, Any]:
    """ep_size = the ep group, and DeepEP's all-to-all (the kernels the plan prices)."""
    return {"ep_size": _expert_parallel(response), "moe_a2a_backend": "deepep"} if value else {}


TRANSLATIONS: dict[str, Callable[[Any, Mapping[str, Any]], dict[str, Any]]] = {
    "model": _renamed("model_path"),
    "dtype": _renamed("dtype"),
    "tensor_parallel_size": _tensor_parallel,
    "pipeline_parallel_size": _renamed("pp_size"),
    "data_parallel_size": _data_parallel,
    "enable_expert_parallel": _enable_expert_parallel,
    "max_model_len": _renamed("context_length"),
    # SGLang's is the engine's total: its model runner divides it over the dp-attention ranks
    # (srt/model_executor/model_runner.py: max_running_requests // dp_size).
    "max_num_seqs": lambda value, response: {"max_running_requests": int(response["plan"]["slots"])},
    "gpu_memory_utilization": _mem_fraction_static,
    "kv_cache_dtype": lambda value, response: {"kv_cache_dtype": KV_CACHE_DTYPES[value]},
    "quantization": lambda value, response: {"quantization": value} if value in SGLANG_QUANTIZATIONS else {},
    "block_size": _renamed("page_size"),
    # SGLang chunks prefills whenever chunked_prefill_size is positive: the budget says both.
    "enable_chunked_prefill": lambda value, response: {},
    "max_num_batched_tokens": _renamed("chunked_prefill_size"),
    "speculative_config": _speculative,
    # SGLang's radix cache reuses shared prefixes unless --disable-radix-cache is given.
    "enable_prefix_caching": lambda value, response: {} if value else {"disable_radix_cache": True},
}
"""vLLM EngineArgs name -> its SGLang ServerArgs (name: value) for the plan's value."""


def _notes(vllm: VllmExport, content: Mapping[str, Any], response: Mapping[str, Any]) -> list[str]:
    """What the SGLang arguments cannot say, in SGLang's terms."""
    plan = response["plan"]
    notes = fit_notes(response) + [catalog_name_note(str(response["model"]["name"]))]
    quantization = vllm.content.get("quantization")
    if quantization is not None and "quantization" not in content:
        notes.append(f"quantization '{quantization}' is vLLM's name for the checkpoint's method; SGLang reads the method "
                     "from the checkpoint's quantization_config, so --quantization is left out")
    elif quantization == "fp8":
        notes.append("quantization fp8: SGLang quantizes a bf16 checkpoint to FP8 when loading it, or loads an FP8 "
                     "checkpoint, whose own quantization_config then decides the method")
    elif quantization is not None:
        notes.append(f"quantization {quantization}: the checkpoint must already be quantized this way (its quantization_config)")
    if "mem_fraction_static" in content:
        notes.append(
            f"mem_fraction_static {content['mem_fraction_static']:g} = vLLM's gpu_memory_utilization "
            f"{vllm.content['gpu_memory_utilization']:g} less the plan's activation peak and CUDA graphs: SGLang's static "
            "share holds the weights and the KV pool only, so the plan's headroom stays free")
    if vllm.content.get("enable_prefix_caching"):
        notes.append("prefix caching: SGLang's radix cache (on unless --disable-radix-cache) holds the shared prefix the plan "
                     "counts once per replica")
    if "page_size" in content:
        notes.append(f"page_size {content['page_size']}: the KV block the plan was priced with (SGLang's default is 1 token per page)")
    if "speculative_draft_model_path" in content:
        notes.append(f"speculative decoding: replace '{content['speculative_draft_model_path']}' with a draft model sharing "
                     "the target's tokenizer (STANDALONE: a separate small model, as the plan budgets)")
    if plan.get("paged_kv") is False:
        notes.append("paged_kv false (a contiguous KV reservation of the full context per slot) is not expressible: "
                     "SGLang always allocates the KV cache from its token pool")
    if plan.get("mig_profile", "none") != "none":
        notes.append(f"MIG {plan['mig_profile']}: run one server per MIG instance, each with CUDA_VISIBLE_DEVICES set to "
                     "that instance's MIG UUID (nvidia-smi -L), on its own --port, behind a load balancer")
    replicas = plan.get("replicas", 1)
    if "ep_size" in content:
        groups = content.get("dp_size", 1)
        notes.append(f"expert parallel {content['ep_size']}: tp_size {content['tp_size']} GPUs hold the routed experts "
                     f"{content['ep_size']} ways (ep_size, DeepEP all-to-all)"
                     + (f", attention data parallel in {groups} groups of {content['tp_size'] // groups} (enable_dp_attention)"
                        if groups > 1 else ", attention tensor parallel over all of them"))
        if replicas > 1:
            notes.append(f"replicas {replicas}: run one server per expert-parallel replica of {content['tp_size']} GPUs "
                         "behind a router")
    elif "dp_size" in content:
        notes.append(f"replicas {replicas}: dp_size {content['dp_size']} runs {content['dp_size']} data-parallel copies of the "
                     "model behind SGLang's own scheduler; or run one server per replica behind a router")
    nodes = plan.get("nodes", 1)
    notes.append(f"hardware: {plan['gpus']} x {plan['gpu']}" + (f" on {nodes} node{'s' if nodes != 1 else ''}" if isinstance(nodes, int) else "")
                 + "; the GPU type and count are not SGLang arguments")
    if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 1:
        notes.append(f"{nodes} nodes: start the same command on each node with --nnodes {nodes}, --node-rank 0..{nodes - 1} "
                     "and --dist-init-addr HOST:PORT of node 0")
    found = response.get("disaggregation")
    if isinstance(found, Mapping) and found.get("chosen") and isinstance(found.get("plan"), Mapping):
        chosen = found["plan"]
        notes.append(
            f"disaggregated prefill/decode is the answer ({chosen['prefill_replicas']} prefill x tp{chosen['prefill_tensor_parallel']} "
            f"+ {chosen['decode_replicas']} decode x tp{chosen['decode_tensor_parallel']}): the arguments above are the colocated "
            "plan's; launch the prefill servers with --disaggregation-mode prefill and the decode servers with "
            "--disaggregation-mode decode (--disaggregation-transfer-backend nixl or mooncake), each with its own --tp-size, "
            "and SGLang's router in PD mode in front (python -m sglang_router.launch_router --pd-disaggregation)")
    for name in vllm.content:
        if name not in TRANSLATIONS:
            notes.append(f"vLLM argument {name}={vllm.content[name]!r} has no SGLang translation in vramopt: set its SGLang "
                         "equivalent by hand")
    return notes


def sglang_args(response: Mapping[str, Any]) -> SglangExport:
    """The SGLang server arguments of a serving plan, and the notes on what they cannot say.

    Raises ``InputError`` as ``vllm_args`` does (a training response, no plan, a missing key
    or a value outside the contract), since the same checks read the response."""
    response_parts(response, "sglang_args", (SERVING_WORKLOAD,))  # its own name in the message
    vllm = vllm_args(response)
    content: dict[str, Any] = {}
    for name, value in vllm.content.items():
        if name in TRANSLATIONS:
            content.update(TRANSLATIONS[name](value, response))
    return SglangExport(content=content, notes=tuple(_notes(vllm, content, response)))
