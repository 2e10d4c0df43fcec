"""What a model is, as the cost model sees it: its dimensions, mixture-of-experts and
multi-head latent attention layout, parameter counts and a checkpoint's quantization
(the catalog's TOML entries and the Hugging Face importer both build a ``ModelSpec``).
``vramopt.types`` re-exports these classes, where callers import them from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeSpec:
    """Mixture-of-experts feed-forward layers."""

    experts: int
    """Routed experts per MoE layer."""
    experts_per_token: int
    """Routed experts each token activates (top-k)."""
    expert_ffn_hidden_size: int
    shared_experts: int = 0
    """Experts every token passes through (Llama 4, DeepSeek-V3)."""
    shared_expert_ffn_hidden_size: int = 0
    moe_layer_interval: int = 1
    """Every n-th layer is MoE (Llama 4 Maverick: 2); the others are dense."""
    first_dense_layers: int = 0
    """The first k layers use a dense FFN (DeepSeek-V3: 3)."""
    moe_layer_offset: int = 0
    """Which layer of each interval is MoE: layer i is MoE when i % interval == offset
    (DeepSeek ``moe_layer_freq``: 0; Qwen2-MoE ``decoder_sparse_step`` and Llama 4
    ``interleave_moe_layer_step``: interval - 1). See ``parameters.moe_layer_indices``."""
    dense_layer_indices: tuple[int, ...] = ()
    """Layers forced dense although the interval rule makes them MoE (Qwen2-MoE
    ``mlp_only_layers``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank compressed K/V."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ParameterCount:
    """Parameters of a model, computed from its architecture."""

    total: int
    active: int
    """Parameters one token passes through (MoE: routed top-k + shared + dense)."""
    embedding: int
    """Input embedding plus the output head when untied (plus learned positions)."""
    largest_layer: int
    """Parameters of the largest transformer layer (ZeRO-3 prefetch buffer)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointQuantization:
    """How a checkpoint's weights are stored (its config.json ``quantization_config``)."""

    method: str
    """``quant_method`` as the checkpoint names it: 'awq', 'gptq', 'fp8', 'mxfp4', ..."""
    weight_bits: int
    weight_format: str
    """The serving weight format it corresponds to (``costs.inference.QUANTIZATIONS``)."""
    group_size: int | None
    """Weights sharing one scale (None: per channel or per tensor)."""
    vllm_quantization: str
    """vLLM's ``--quantization`` value for this checkpoint."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """One neural network of the model catalog or imported from a config.json."""

    name: str
    display_name: str
    aliases: tuple[str, ...]
    family: str
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden_size: int
    vocab_size: int
    max_context: int
    gated_mlp: bool
    """SwiGLU-style MLP with three matrices (gate, up, down) instead of two."""
    tied_embeddings: bool
    attention_bias: bool
    mlp_bias: bool
    norm: str
    """'rmsnorm' (one weight vector) or 'layernorm' (weight and bias)."""
    learned_positions: int
    """Rows of a learned position-embedding table; 0 for rotary/ALiBi."""
    moe: MoeSpec | None
    mla: MlaSpec | None
    parameters: ParameterCount
    published_params_total: float | None
    published_params_active: float | None
    sources: Mapping[str, str]
    """'architecture' (where the dimensions come from), 'params_total', and any
    assumption, keyed by what it covers."""
    notes: str = ""
    checkpoint_quantization: CheckpointQuantization | None = None
    """A quantized checkpoint's weight format (imported config.json); None: 16-bit weights."""

    @property
    def params_total(self) -> int:
        return self.parameters.total

    @property
    def params_active(self) -> int:
        return self.parameters.active

    @property
    def is_moe(self) -> bool:
        return self.moe is not None
