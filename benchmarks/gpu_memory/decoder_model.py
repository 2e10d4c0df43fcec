"""A Llama-style decoder (and a Mixtral-style MoE variant) in plain PyTorch, random weights.

Written out here rather than taken from ``transformers`` so that the benchmark needs nothing
but PyTorch, downloads nothing, and every tensor it keeps is visible in this file:

- token embedding, ``layers`` pre-norm decoder layers, a final RMSNorm and an untied
  ``lm_head`` (no biases anywhere, as in Llama);
- attention: Q/K/V/O projections, rotary position embeddings, grouped-query attention
  through ``torch.nn.functional.scaled_dot_product_attention``;
- MLP: SwiGLU (gate, up, down); in the MoE shape a linear router (no bias) chooses the
  top ``experts_per_token`` of ``experts`` SwiGLU experts per token (Mixtral's routing:
  softmax over all experts, then the top-k weights renormalized to sum to one);
- activation checkpointing: ``every:k`` wraps each run of k layers in
  ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``; ``selective``
  wraps only the attention core (the SDPA call), which is what Korthikanti et al. 2022
  call selective recomputation;
- inference: a preallocated, contiguous key/value cache per layer.

The closed-form parameter count below follows the same terms as
``vramopt.models.parameters.count_parameters`` (rmsnorm, gated MLP, untied, no biases),
but is written out again because this folder must not import vramopt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

CHECKPOINTING_NONE = "none"
CHECKPOINTING_SELECTIVE = "selective"
CHECKPOINTING_EVERY_PREFIX = "every:"


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelShape:
    """The dimensions of one benchmark model."""

    name: str
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    """Key/value heads; fewer than ``heads`` is grouped-query attention."""
    head_dim: int
    ffn_hidden_size: int
    """Width of the dense SwiGLU MLP, or of each expert in the MoE shape."""
    vocab_size: int
    experts: int = 0
    """Routed experts per layer; 0 for a dense model."""
    experts_per_token: int = 0
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        for field_name in ("layers", "hidden_size", "heads", "kv_heads", "head_dim", "ffn_hidden_size", "vocab_size"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{self.name}: {field_name} must be a positive integer, got {value!r}")
        if self.heads % self.kv_heads != 0:
            raise ValueError(f"{self.name}: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.head_dim % 2 != 0:
            raise ValueError(f"{self.name}: head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.experts < 0 or (self.experts > 0 and not 1 <= self.experts_per_token <= self.experts):
            raise ValueError(f"{self.name}: need 1 <= experts_per_token <= experts for an MoE shape")
        if self.experts == 0 and self.experts_per_token != 0:
            raise ValueError(f"{self.name}: a dense shape has experts_per_token 0")

    @property
    def is_moe(self) -> bool:
        return self.experts > 0


def parse_checkpointing(policy: str) -> tuple[int, bool]:
    """Return (layers per checkpointed segment or 0, selective) for a policy string."""
    if policy == CHECKPOINTING_NONE:
        return 0, False
    if policy == CHECKPOINTING_SELECTIVE:
        return 0, True
    if policy.startswith(CHECKPOINTING_EVERY_PREFIX):
        layers_per_segment = policy[len(CHECKPOINTING_EVERY_PREFIX) :]
        if layers_per_segment.isdigit() and int(layers_per_segment) >= 1:
            return int(layers_per_segment), False
    raise ValueError(f"checkpointing must be 'none', 'selective' or 'every:k' with k >= 1, got {policy!r}")


# ----------------------------------------------------------------------------- counts


def closed_form_parameters(shape: ModelShape) -> dict[str, int]:
    """Total and active parameters from the dimensions alone (no module is built)."""
    hidden = shape.hidden_size
    attention = 2 * hidden * shape.heads * shape.head_dim + 2 * hidden * shape.kv_heads * shape.head_dim
    norms = 2 * hidden
    swiglu = 3 * hidden * shape.ffn_hidden_size
    if shape.is_moe:
        router = hidden * shape.experts
        layer_total = attention + norms + router + shape.experts * swiglu
        layer_active = attention + norms + router + shape.experts_per_token * swiglu
    else:
        layer_total = layer_active = attention + norms + swiglu
    outside_layers = 2 * shape.vocab_size * hidden + hidden  # embedding, untied head, final norm
    return {
        "total": outside_layers + shape.layers * layer_total,
        "active": outside_layers + shape.layers * layer_active,
    }


def module_parameters(model: nn.Module) -> dict[str, int]:
    """Total and active parameters counted from the built module's tensors."""
    total = sum(parameter.numel() for parameter in model.parameters())
    inactive = 0
    for module in model.modules():
        if isinstance(module, MixtureOfExperts):
            per_expert = sum(parameter.numel() for parameter in module.experts[0].parameters())
            inactive += (len(module.experts) - module.experts_per_token) * per_expert
    return {"total": total, "active": total - inactive}


def hf_config(shape: ModelShape) -> dict[str, Any]:
    """A Hugging Face style config.json for the shape (llama, or mixtral when MoE).

    Only the keys a real config of that model_type carries: the MoE keys appear in the
    mixtral config alone, where ``intermediate_size`` is each expert's width.
    """
    config: dict[str, Any] = {
        "_name_or_path": f"vramopt-benchmark/{shape.name}",
        "architectures": ["MixtralForCausalLM" if shape.is_moe else "LlamaForCausalLM"],
        "model_type": "mixtral" if shape.is_moe else "llama",
        "num_hidden_layers": shape.layers,
        "hidden_size": shape.hidden_size,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "intermediate_size": shape.ffn_hidden_size,
        "vocab_size": shape.vocab_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "tie_word_embeddings": False,
        "rms_norm_eps": shape.rms_norm_eps,
        "rope_theta": shape.rope_theta,
        "hidden_act": "silu",
        "attention_bias": False,
        "torch_dtype": "bfloat16",
    }
    if shape.is_moe:
        config["num_local_experts"] = shape.experts
        config["num_experts_per_tok"] = shape.experts_per_token
    else:
        config["mlp_bias"] = False
    return config


def write_hf_config(shape: ModelShape, path: Any) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(hf_config(shape), handle, indent=2, sort_keys=True)
        handle.write("\n")


# ----------------------------------------------------------------------------- layers


def rotary_tables(
    positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (seq, head_dim), built once per forward and shared by all layers."""
    inverse_frequency = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    )
    angles = torch.outer(positions.to(torch.float32), inverse_frequency)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (batch, heads, seq, head_dim) by the position angles (the 'rotate half' layout)."""
    first_half, second_half = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second_half, first_half), dim=-1) * sin


class KeyValueCache:
    """One contiguous key and value buffer per layer, preallocated for ``length`` positions."""

    def __init__(self, shape: ModelShape, *, batch: int, length: int, device: Any, dtype: torch.dtype) -> None:
        buffer_shape = (batch, shape.kv_heads, length, shape.head_dim)
        self.keys = [torch.zeros(buffer_shape, device=device, dtype=dtype) for _ in range(shape.layers)]
        self.values = [torch.zeros(buffer_shape, device=device, dtype=dtype) for _ in range(shape.layers)]
        self.length = length

    @property
    def nbytes(self) -> int:
        return sum(buffer.nbytes for buffer in self.keys + self.values)

    def write(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor, offset: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store new keys/values at ``offset`` and return views of everything written so far."""
        end = offset + keys.shape[2]
        if end > self.length:
            raise ValueError(f"KV cache of {self.length} positions cannot hold position {end - 1}")
        self.keys[layer][:, :, offset:end] = keys
        self.values[layer][:, :, offset:end] = values
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


class SwiGLU(nn.Module):
    def __init__(self, hidden_size: int, ffn_hidden_size: int, **factory: Any) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, ffn_hidden_size, bias=False, **factory)
        self.up_proj = nn.Linear(hidden_size, ffn_hidden_size, bias=False, **factory)
        self.down_proj = nn.Linear(ffn_hidden_size, hidden_size, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MixtureOfExperts(nn.Module):
    """Top-k routed SwiGLU experts, dispatched with a loop over experts (as in HF Mixtral)."""

    def __init__(self, shape: ModelShape, **factory: Any) -> None:
        super().__init__()
        self.router = nn.Linear(shape.hidden_size, shape.experts, bias=False, **factory)
        self.experts = nn.ModuleList(
            SwiGLU(shape.hidden_size, shape.ffn_hidden_size, **factory) for _ in range(shape.experts)
        )
        self.experts_per_token = shape.experts_per_token

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        tokens = x.reshape(-1, hidden)
        probabilities = F.softmax(self.router(tokens), dim=-1, dtype=torch.float32)
        weights, chosen = torch.topk(probabilities, self.experts_per_token, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
        combined = torch.zeros_like(tokens)
        for index, expert in enumerate(self.experts):
            # An expert that receives no token still runs (on zero rows) so that every
            # parameter gets a gradient and the gradient memory does not depend on routing.
            token_rows, slot = torch.where(chosen == index)
            expert_output = expert(tokens[token_rows]) * weights[token_rows, slot].unsqueeze(-1)
            combined.index_add_(0, token_rows, expert_output)
        return combined.view(batch, seq, hidden)


class Attention(nn.Module):
    def __init__(self, shape: ModelShape, **factory: Any) -> None:
        super().__init__()
        self.heads = shape.heads
        self.kv_heads = shape.kv_heads
        self.head_dim = shape.head_dim
        self.q_proj = nn.Linear(shape.hidden_size, shape.heads * shape.head_dim, bias=False, **factory)
        self.k_proj = nn.Linear(shape.hidden_size, shape.kv_heads * shape.head_dim, bias=False, **factory)
        self.v_proj = nn.Linear(shape.hidden_size, shape.kv_heads * shape.head_dim, bias=False, **factory)
        self.o_proj = nn.Linear(shape.heads * shape.head_dim, shape.hidden_size, bias=False, **factory)
        self.checkpoint_core = False
        self.native_gqa = True
        """False: expand K/V to all heads before SDPA (for kernels without enable_gqa)."""

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
        """The attention core: softmax(q k^T / sqrt(d)) v through SDPA."""
        if self.heads == self.kv_heads:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if self.native_gqa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        repeats = self.heads // self.kv_heads
        return F.scaled_dot_product_attention(
            q, k.repeat_interleave(repeats, dim=1), v.repeat_interleave(repeats, dim=1), is_causal=causal
        )

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: KeyValueCache | None = None,
        layer_index: int = 0,
        offset: int = 0,
    ) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.q_proj(x).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if cache is not None:
            if offset != 0 and seq != 1:
                raise ValueError("only a prefill from position 0 or single-token decoding is supported")
            k, v = cache.write(layer_index, k, v, offset)
        # A prefill from position 0 is causal; one decoded token attends to everything cached.
        causal = offset == 0 and seq > 1
        if self.checkpoint_core and torch.is_grad_enabled():
            output = checkpoint(self.core, q, k, v, causal, use_reentrant=False)
        else:
            output = self.core(q, k, v, causal)
        return self.o_proj(output.transpose(1, 2).reshape(batch, seq, self.heads * self.head_dim))


class DecoderLayer(nn.Module):
    def __init__(self, shape: ModelShape, **factory: Any) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(shape.hidden_size, eps=shape.rms_norm_eps, **factory)
        self.attention = Attention(shape, **factory)
        self.mlp_norm = nn.RMSNorm(shape.hidden_size, eps=shape.rms_norm_eps, **factory)
        self.mlp = MixtureOfExperts(shape, **factory) if shape.is_moe else SwiGLU(
            shape.hidden_size, shape.ffn_hidden_size, **factory
        )

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: KeyValueCache | None = None,
        layer_index: int = 0,
        offset: int = 0,
    ) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin, cache, layer_index, offset)
        return x + self.mlp(self.mlp_norm(x))


def _run_segment(layers: nn.ModuleList, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    for layer in layers:
        x = layer(x, cos, sin)
    return x


class Decoder(nn.Module):
    """The whole causal language model: ids (batch, seq) -> logits (batch, seq, vocab)."""

    def __init__(self, shape: ModelShape, *, device: Any = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        # Parameters are created directly on the target device in the target dtype, so a
        # 3B model never passes through host memory or an fp32 copy on the GPU.
        factory = {"device": device, "dtype": dtype}
        self.shape = shape
        self.embed_tokens = nn.Embedding(shape.vocab_size, shape.hidden_size, **factory)
        self.layers = nn.ModuleList(DecoderLayer(shape, **factory) for _ in range(shape.layers))
        self.final_norm = nn.RMSNorm(shape.hidden_size, eps=shape.rms_norm_eps, **factory)
        self.lm_head = nn.Linear(shape.hidden_size, shape.vocab_size, bias=False, **factory)
        self.layers_per_checkpoint = 0

    def set_checkpointing(self, policy: str) -> None:
        self.layers_per_checkpoint, selective = parse_checkpointing(policy)
        for layer in self.layers:
            layer.attention.checkpoint_core = selective

    def set_native_gqa(self, native: bool) -> None:
        for layer in self.layers:
            layer.attention.native_gqa = native

    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        cache: KeyValueCache | None = None,
        offset: int = 0,
        last_token_logits_only: bool = False,
    ) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        positions = torch.arange(offset, offset + input_ids.shape[1], device=input_ids.device)
        cos, sin = rotary_tables(positions, self.shape.head_dim, self.shape.rope_theta, x.dtype)
        segment = self.layers_per_checkpoint
        if cache is None and segment > 0 and torch.is_grad_enabled():
            for start in range(0, len(self.layers), segment):
                x = checkpoint(_run_segment, self.layers[start : start + segment], x, cos, sin, use_reentrant=False)
        else:
            for index, layer in enumerate(self.layers):
                x = layer(x, cos, sin, cache, index, offset)
        x = self.final_norm(x)
        if last_token_logits_only:
            # Serving engines compute logits for the sampled position only.
            x = x[:, -1:, :]
        return self.lm_head(x)
