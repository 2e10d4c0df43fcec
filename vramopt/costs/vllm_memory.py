"""KV cache capacity as vLLM counts it: what is left of ``gpu_memory_utilization`` of the
memory the CUDA runtime reports after the weights, the activation peak of a profiling
step, the CUDA graphs and the non-torch reserve, cut into blocks of ``block_size`` tokens.

vLLM sizes its KV pool once at start-up (vLLM ``Worker.determine_num_available_blocks``;
the paper's prototype CacheFlow, ``cacheflow/worker/worker.py``
``get_num_available_blocks``, vllm-project/vllm commit 03ec645d):

    blocks = (total_gpu_memory * gpu_memory_utilization - peak_memory) // block_bytes

where ``total_gpu_memory`` is ``torch.cuda.get_device_properties().total_memory`` (the
runtime-reported bytes the hardware catalog holds) and ``peak_memory`` is
``torch.cuda.max_memory_allocated()`` after one forward pass of ``max_num_batched_tokens``
tokens split into ``profile_sequences`` sequences: the weights plus the largest
activations of that pass plus the sampler's tensors over every profiled sequence's logits.
Current vLLM also takes off the memory allocated outside torch (CUDA context, NCCL) and
captures CUDA graphs whose memory must fit too.

A sequence's cache is allocated block by block at its actual length: ``ceil(tokens /
block_size)`` blocks (Kwon et al. 2023, section 4.2), so a request of ``input`` prompt
tokens holds ``ceil((input + k) / block) * block`` token slots after its k-th output token.

The forward pass's activation peak is an estimate from the layer shapes: the residual and
normalized hidden states (``2 * hidden``) beside the widest intermediate, the QKV
projection or the MLP's up (and gate) outputs plus the activation's output, split by
tensor parallelism, in the model's 2-byte dtype. The sampler holds, per logit element, the
fp16 logits, the fp32 probabilities and the fp32 log-probabilities (CacheFlow
``cacheflow/model_executor/layers/sampler.py``: ``logits``, ``probs = softmax(logits,
dtype=float)``, ``logprobs = log(probs)``): 10 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vramopt.types import ModelSpec

SAMPLER_BYTES_PER_LOGIT = 2.0 + 4.0 + 4.0
"""fp16 logits + fp32 probabilities + fp32 log-probabilities (module docstring)."""

ACTIVATION_ELEMENT_BYTES = 2.0
"""Serving runs the forward pass in fp16/bf16 (vLLM's default dtype for these models)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineMemorySettings:
    """The engine settings that size the KV pool."""

    gpu_memory_utilization: float = 0.9
    """Fraction of the runtime-reported memory the engine may use (vLLM ``EngineArgs``
    default 0.90, vllm/engine/arg_utils.py)."""
    max_num_batched_tokens: int = 8192
    """Tokens of the profiling forward pass = the chunked-prefill budget per step (vLLM V1's
    default for the OpenAI server with chunked prefill, vllm/engine/arg_utils.py)."""
    profile_sequences: int = 256
    """Sequences whose logits the profiling step samples (vLLM ``max_num_seqs`` default 256)."""
    block_size_tokens: int = 16
    """Tokens per KV block (vLLM ``--block-size`` default 16)."""
    cuda_graph_bytes: float = 0.5 * 2**30
    """assumption: vLLM logs 'Graph capturing finished ... took 0.2-1 GiB' for dense models of
    7B-70B at its default capture sizes; 0.5 GiB, to be replaced by measurement."""
    count_reserve: bool = True
    """Whether memory outside torch (CUDA context, NCCL buffers; the GPU's framework reserve)
    is subtracted, as vLLM does since v0.6; CacheFlow left it inside the 5% slack."""


CACHEFLOW_2023 = EngineMemorySettings(
    gpu_memory_utilization=0.95, max_num_batched_tokens=2560, profile_sequences=2560, cuda_graph_bytes=0.0, count_reserve=False,
)
"""The vLLM paper's prototype (Kwon et al. 2023; CacheFlow ``cacheflow/server/arg_utils.py``,
vllm-project/vllm commit 205c78f0: gpu_memory_utilization 0.95, max_num_batched_tokens
2560, max_num_seqs 256, block 16; the profiling pass runs one length-1 prompt per batched
token, so 2,560 sequences are sampled; no CUDA graphs)."""


def profile_activation_peak_bytes(model: ModelSpec, tokens, sequences, tensor_parallel):
    """Activation bytes one GPU holds at the peak of vLLM's profiling step (module docstring)."""
    t = np.asarray(tensor_parallel, dtype=float)
    matrices = 3.0 if model.gated_mlp else 2.0
    qkv_width = (model.heads + 2.0 * model.kv_heads) * model.head_dim
    widest = np.maximum(qkv_width, matrices * model.ffn_hidden_size) / t
    forward = np.asarray(tokens, dtype=float) * ACTIVATION_ELEMENT_BYTES * (2.0 * model.hidden_size + widest)
    sampler = np.asarray(sequences, dtype=float) * model.vocab_size * SAMPLER_BYTES_PER_LOGIT
    return forward + sampler


def kv_pool_bytes(capacity_bytes, utilization: float, weights_bytes, activation_peak_bytes, cuda_graph_bytes, reserve_bytes):
    """Bytes vLLM gives the KV cache on one GPU (never below zero)."""
    pool = np.asarray(capacity_bytes, dtype=float) * utilization - weights_bytes - activation_peak_bytes - cuda_graph_bytes - reserve_bytes
    return np.maximum(pool, 0.0)


def kv_capacity_tokens(pool_bytes, kv_bytes_per_token_per_gpu, block_size_tokens: int):
    """Token slots of the pool: whole blocks of ``block_size_tokens`` tokens."""
    with np.errstate(divide="ignore", invalid="ignore"):
        blocks = np.floor(np.asarray(pool_bytes, dtype=float) / (np.asarray(kv_bytes_per_token_per_gpu, dtype=float) * block_size_tokens))
    return np.where(np.isfinite(blocks), blocks, 0.0) * block_size_tokens


def mean_tokens_held(input_tokens: int, output_tokens: int, block_size_tokens: int) -> float:
    """Token slots one request holds on average over its decode, at its actual length in
    whole blocks: the mean over k = 1..output of ceil((input + k) / block) * block."""
    lengths = input_tokens + np.arange(1, output_tokens + 1, dtype=np.int64)
    return float(np.mean(-(-lengths // block_size_tokens) * block_size_tokens))


def tokens_held_at_end(input_tokens: int, output_tokens: int, block_size_tokens: int) -> int:
    """Token slots a request holds when its last output token is written."""
    return -(-(input_tokens + output_tokens) // block_size_tokens) * block_size_tokens
