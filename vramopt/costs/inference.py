"""Serving (decode) memory and throughput, vectorized like the training model.

Memory per GPU, or per MIG instance (DESIGN.md section 3): quantized weights / (t*p); KV
cache ``slots * tokens * kv_bytes_per_token / (t*p)`` where tokens is the full context
per slot for contiguous allocation and the average tokens in use, rounded up to blocks,
plus vLLM's < 4% waste, for PagedAttention (Kwon et al. 2023) -- both from the helpers of
``costs/kv_cache.py``, the one implementation of those bytes; the activation peak of
vLLM's profiling step (a forward pass of the chunked-prefill budget and the sampler over
every slot) and its CUDA graphs (``costs/vllm_memory.py``); a draft model and its KV cache
under speculative decoding; the framework reserve. ``kv_capacity_tokens`` is the KV pool
vLLM would allocate with the same terms (``gpu_memory_utilization`` = 1 - headroom).

Decode step time (a roofline, Williams et al. 2009): the larger of the bytes read (weights
and the KV cache in use) over the achievable HBM bandwidth and the FLOPs over the
achievable peak, plus the tensor-parallel all-reduces of each layer. Speculative decoding
(Leviathan et al. 2023): the target verifies gamma+1 tokens per step after gamma draft
steps, and emits (1 - alpha^(gamma+1)) / (1 - alpha) tokens per step on average.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vramopt.costs.coefficients import coefficient
from vramopt.costs.communication import group_bandwidth
from vramopt.costs.kv_cache import kv_cache_bytes, kv_cache_bytes_per_token, kv_tokens_in_use, quantized_weight_bytes
from vramopt.costs.serving_operators import serving_gemm_flops_per_s, serving_operator_terms
from vramopt.costs.serving_experts import expert_coverage, serving_expert_terms, serving_replica_layout
from vramopt.costs.expert_parallel import routed_expert_parameters
from vramopt.costs.request_serving import RequestLoad, evaluate_requests, mix_contexts, request_kv_tokens_per_slot
from vramopt.costs.vllm_memory import EngineMemorySettings, kv_capacity_tokens, kv_pool_bytes, profile_activation_peak_bytes
from vramopt.types import GpuSpec, ModelSpec

QUANTIZATIONS = ("bf16", "fp8", "int8", "int4", "fp4")
"""Weight formats for serving, widest first."""
QUANTIZATION_COMPUTE = ("bf16", "fp8", "bf16", "bf16", "fp4")
"""Tensor-core precision each format computes in: weight-only int8/int4 dequantize to bf16."""
QUANTIZATION_NEEDS = ("bf16", "fp8", "bf16", "bf16", "fp4")
"""What the GPU must support to run the format (fp8 and fp4 need their tensor cores)."""

KV_CACHE_DTYPES = ("bf16", "fp8")


@dataclass(frozen=True, slots=True)
class ServingCase:
    """What is fixed while serving plans vary."""

    model: ModelSpec
    gpu: GpuSpec
    context: int
    """Maximum tokens per sequence (prompt + output), vLLM's max-model-len."""
    headroom_fraction: float = 0.10
    average_context_fraction: float = 0.5
    """Tokens a sequence holds on average, as a fraction of the context (assumption:
    requests use half of max-model-len on average; PagedAttention stores only those)."""
    kv_block_tokens: int = 16
    """vLLM's default block size."""
    prefill_chunk_tokens: int = 8192
    """Chunked-prefill budget per step (vLLM max_num_batched_tokens: V1's default 8,192 for
    the OpenAI server, vllm/engine/arg_utils.py); also the profiling step's tokens."""
    requests: RequestLoad | None = None
    """Requests of known lengths, a rate or concurrency and targets (costs/request_serving.py);
    None: the decode-only model at ``average_context_fraction`` of the context."""
    engine: EngineMemorySettings = EngineMemorySettings()
    """How vLLM sizes its KV pool (costs/vllm_memory.py); its utilization is 1 - headroom."""
    draft_params_fraction: float = 0.02
    """Speculative decoding draft model size relative to the target (assumption: a 1B-class
    draft for a 70B target, as Llama-3.2-1B for Llama-3.1-70B)."""
    draft_kv_fraction: float = 0.1
    """Draft KV cache per token relative to the target's (assumption)."""
    acceptance_rate: float = 0.6
    """Probability a draft token is accepted (Leviathan et al. 2023 report 0.5-0.8)."""
    speculative_tokens: int = 4
    """Draft tokens per verification step (gamma)."""


@dataclass(frozen=True, slots=True)
class ServingColumns:
    gpus: np.ndarray
    tensor_parallel: np.ndarray
    pipeline_parallel: np.ndarray
    quantization: np.ndarray
    """Index into QUANTIZATIONS."""
    kv_cache_dtype: np.ndarray
    paged_kv: np.ndarray
    speculative: np.ndarray
    slots: np.ndarray
    """Concurrent sequences per replica."""
    mig_profile: np.ndarray
    """Index into the GPU's mig_profiles, or -1 for whole GPUs."""
    expert_parallel: Any = 1
    """GPUs the routed experts are spread over (costs/serving_experts.py); 1: split by tp."""

    def __len__(self) -> int:
        return int(np.broadcast_shapes(*(np.shape(getattr(self, name)) for name in self.__dataclass_fields__))[0])


def _mig_table(gpu: GpuSpec, column, attribute, whole):
    values = np.array([getattr(profile, attribute) for profile in gpu.mig_profiles] + [whole], dtype=float)
    return values[np.where(column >= 0, column, len(gpu.mig_profiles))]


def evaluate_serving(case: ServingCase, columns: ServingColumns) -> dict[str, np.ndarray]:
    model, gpu = case.model, case.gpu
    t = columns.tensor_parallel.astype(float)
    p = columns.pipeline_parallel.astype(float)
    ep = np.broadcast_to(np.asarray(columns.expert_parallel, dtype=np.int64), np.shape(columns.tensor_parallel))
    # A replica: tp x pp GPUs, or the ep group of ep / tp attention groups (costs/serving_experts.py).
    shards = serving_replica_layout(columns.tensor_parallel, columns.pipeline_parallel, ep).world_size.astype(float)
    slots = columns.slots.astype(float)
    on_mig = columns.mig_profile >= 0

    capacity = _mig_table(gpu, columns.mig_profile, "memory_bytes", gpu.memory_bytes)
    compute_share = _mig_table(gpu, columns.mig_profile, "compute_slices", 7) / 7.0
    bandwidth_share = _mig_table(gpu, columns.mig_profile, "memory_slices", 8) / 8.0
    instances = np.where(on_mig, _mig_table(gpu, columns.mig_profile, "max_instances", 1), 1.0)
    replicas = np.where(on_mig, columns.gpus * instances, columns.gpus / shards)

    # Bytes of all the model's weights in each row's format (costs/kv_cache.py: the layouts).
    model_weights = np.array([quantized_weight_bytes(model.params_total, name) for name in QUANTIZATIONS])[columns.quantization]
    routed = np.array([quantized_weight_bytes(routed_expert_parameters(model), name) for name in QUANTIZATIONS])[columns.quantization]
    experts = serving_expert_terms(model, gpu, t, p, ep, routed, coefficient("all_reduce_latency_s"), columns.quantization)
    groups = experts["attention_groups"]
    # Dense weights over tp x pp; the routed experts over ep (over tp x pp at ep 1).
    dense_weights_read = (model_weights - routed) / t
    weights = dense_weights_read / p + experts["local_expert_bytes"]
    kv_per_token = np.array([kv_cache_bytes_per_token(model, name) for name in KV_CACHE_DTYPES])[columns.kv_cache_dtype]
    if case.requests is None:
        average_tokens = kv_tokens_in_use(case.context, case.average_context_fraction, case.kv_block_tokens)
        replica_kv_cache = np.zeros(len(columns))
        for code, name in enumerate(KV_CACHE_DTYPES):
            in_dtype = columns.kv_cache_dtype == code
            if in_dtype.any():
                every_row = kv_cache_bytes(model, slots, case.context, name, columns.paged_kv == 1, case.average_context_fraction, case.kv_block_tokens)
                replica_kv_cache = np.where(in_dtype, every_row, replica_kv_cache)
    else:
        # Requests of known lengths: a paged slot holds its actual length in whole blocks,
        # a contiguous one the full max-model-len; attention reads the mean context.
        average_tokens = mix_contexts(case.requests)[0]
        held = np.where(columns.paged_kv == 1, request_kv_tokens_per_slot(case.requests, case.kv_block_tokens), float(case.context))
        # A cached shared prefix: its blocks once per replica, shared by every paged slot.
        shared = np.where(columns.paged_kv == 1, float(case.requests.cached_prefix_tokens), 0.0)
        replica_kv_cache = (slots * held + shared) * kv_per_token
    # Tensor parallelism splits the KV heads; beyond their count they are replicated
    # (Megatron/vLLM GQA with tp > kv_heads), so the cache stops shrinking.
    # MLA's compressed latent is one vector per token, not per head: every tensor-parallel
    # GPU keeps all of it (vLLM replicates the MLA cache), so only pp divides it.
    kv_split = np.minimum(t, model.kv_heads) if model.mla is None else np.ones_like(t)
    kv_shards = p * kv_split
    # Each attention group holds its own sequences' cache: 1/d of the replica's.
    kv_cache = replica_kv_cache / kv_shards / groups
    # The activation peak of vLLM's profiling step (costs/vllm_memory.py): a forward pass of
    # the chunked-prefill budget and the sampler over every slot's logits.
    activations = profile_activation_peak_bytes(model, case.prefill_chunk_tokens, slots / groups, t)
    cuda_graphs = np.full(len(columns), case.engine.cuda_graph_bytes)
    draft_weights = model_weights * case.draft_params_fraction / t
    draft_kv = kv_cache * case.draft_kv_fraction
    draft = np.where(columns.speculative == 1, draft_weights + draft_kv, 0.0)
    reserve = np.full(len(columns), float(gpu.node.framework_reserve_bytes))
    total = weights + kv_cache + activations + cuda_graphs + draft + reserve
    # The KV pool vLLM would allocate on this GPU, in whole blocks of tokens of one replica.
    kv_token_bytes = kv_per_token / kv_shards * np.where(columns.speculative == 1, 1.0 + case.draft_kv_fraction, 1.0)
    # The draft's weights are outside the pool and its KV cache inside it (kv_token_bytes);
    # a plan without a draft has neither.
    pool = kv_pool_bytes(capacity, 1.0 - case.headroom_fraction, weights + np.where(columns.speculative == 1, draft - draft_kv, 0.0),
                         activations, cuda_graphs, reserve)
    kv_capacity = kv_capacity_tokens(pool, kv_token_bytes, case.kv_block_tokens) * groups

    # Decode roofline for one replica: stages run one after another, each tensor-parallel.
    bandwidth = gpu.hbm_bandwidth_bytes_per_s * bandwidth_share * coefficient("hbm_bandwidth_efficiency")
    # GEMMs timed from their shapes at the step's batch (costs/serving_operators.py): thin decode steps run slower per FLOP.
    operators = serving_operator_terms(model, gpu, columns.quantization, compute_share, t)
    step_tokens = slots * np.where(columns.speculative == 1, case.speculative_tokens + 1.0, 1.0)
    flops_rate = serving_gemm_flops_per_s(operators, step_tokens / groups)
    kv_read = slots * average_tokens * kv_per_token / groups
    # Decode reads the experts its tokens are routed to (costs/serving_experts.py).
    coverage = expert_coverage(step_tokens, model.moe.experts, model.moe.experts_per_token) if model.moe is not None else 1.0
    bytes_per_step = dense_weights_read + experts["expert_read_bytes"] * coverage + kv_read / kv_split
    attention_flops = 4.0 * model.layers * model.heads * model.head_dim * average_tokens
    flops_per_token = 2.0 * model.params_active + attention_flops
    speculative = columns.speculative == 1
    verified = np.where(speculative, case.speculative_tokens + 1.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        memory_time = bytes_per_step / bandwidth
        compute_time = verified * slots * flops_per_token / t / groups / flops_rate
        message = verified * slots / groups * model.hidden_size * 2.0
        link = group_bandwidth(gpu, t, t)
        all_reduce = coefficient("all_reduce_latency_s") + 2.0 * (t - 1.0) / t * message / link
        tensor_parallel_time = experts["all_reduces_per_step"] * all_reduce
        expert_parallel_time = experts["all_to_all_latency_s"] + verified * slots * experts["all_to_all_s_per_token"]
        target_step = np.maximum(memory_time, compute_time) + tensor_parallel_time + expert_parallel_time
        draft_bytes = model_weights * case.draft_params_fraction / t + kv_read * case.draft_kv_fraction / kv_split
        draft_step = np.maximum(draft_bytes / bandwidth, slots / groups * 2.0 * model.params_active * case.draft_params_fraction / t / flops_rate)
        step = target_step + np.where(speculative, case.speculative_tokens * draft_step, 0.0)
        alpha = case.acceptance_rate
        tokens_per_step = np.where(speculative, (1.0 - alpha ** (case.speculative_tokens + 1)) / (1.0 - alpha), 1.0)
        tokens_per_s = replicas * slots * tokens_per_step / step
        latency = step / tokens_per_step
        # Prefill of a full-context prompt: the linear layers plus causal attention
        # (QK^T and AV over on average half the context), compute-bound.
        prefill_flops = 2.0 * model.params_active * case.context + 2.0 * model.layers * model.heads * model.head_dim * case.context**2
        prefill = prefill_flops / t / serving_gemm_flops_per_s(operators, case.context)
    values = {
        "weights_bytes": weights,
        "kv_cache_bytes": kv_cache,
        "activations_bytes": activations,
        "cuda_graphs_bytes": cuda_graphs,
        "draft_bytes": draft,
        "reserve_bytes": reserve,
        "total_bytes": total,
        "capacity_bytes": capacity,
        "headroom_fraction": 1.0 - total / capacity,
        "fits": total <= capacity * (1.0 - case.headroom_fraction),
        "replicas": replicas,
        "instances_per_gpu": instances,
        "concurrent_slots": replicas * slots,
        "kv_capacity_tokens": kv_capacity,
        "step_time_s": step,
        "tensor_parallel_s": tensor_parallel_time,
        "expert_parallel_s": expert_parallel_time,
        "tokens_per_s": tokens_per_s,
        "latency_per_token_s": latency,
        "prefill_time_s": prefill,
        "memory_bound": memory_time >= compute_time,
        # The building blocks of a step, for the request-level model (costs/request_serving.py).
        "hbm_bytes_per_s": bandwidth,
        "gemm_flops_per_s": flops_rate,
        "weights_read_bytes": dense_weights_read,
        "draft_weights_read_bytes": model_weights * case.draft_params_fraction / t,
        "kv_read_bytes_per_token": kv_per_token / kv_split,
        "link_bytes_per_s": link,
        "all_reduce_latency_s": np.full(len(columns), coefficient("all_reduce_latency_s")),
        **operators,
        **experts,
    }
    if case.requests is not None:
        requests = evaluate_requests(case, columns, values)
        values.update(requests)
        # The headline figures become the request-level ones: capacity (saturation) output
        # tokens/s, and the time per output token at the offered load.
        values["tokens_per_s"] = requests["capacity_tokens_per_s"]
        values["latency_per_token_s"] = requests["tpot_s"]
        values["step_time_s"] = requests["load_step_s"]
        values["prefill_time_s"] = requests["prefill_alone_s"]
    return values


def requirements_met(values, min_slots: int, max_latency_ms: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(at least ``min_slots`` concurrent sequences, time per output token within
    ``max_latency_ms``), elementwise over ``evaluate_serving``'s values: the one test that
    makes a candidate invalid in solve and that estimate reports as met or not met."""
    slots_met = np.asarray(values["concurrent_slots"]) >= min_slots
    bound_s = max_latency_ms / 1e3 if max_latency_ms is not None else np.inf
    return slots_met, np.asarray(values["latency_per_token_s"]) <= bound_s
