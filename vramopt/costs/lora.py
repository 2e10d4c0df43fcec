"""LoRA and QLoRA: a frozen base model plus trainable low-rank adapters.

LoRA (Hu et al. 2021): each target matrix W (d_in x d_out) gets A (d_in x r) and B (r x d_out),
``r * (d_in + d_out)`` trainable parameters; the base weights are frozen, so they need no
gradients and no optimizer states, and the backward pass computes activation gradients
only (about 4 of the 6 FLOPs per parameter and token). QLoRA (Dettmers et al. 2023) stores
the frozen linear layers in 4-bit NormalFloat with double quantization: 4 bits plus 0.127
bits of quantization constants per parameter (section 3); embeddings and the output head
stay in bf16.
"""

from __future__ import annotations

from vramopt.errors import InputError
from vramopt.types import ModelSpec

LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
NF4_BYTES_PER_PARAM = (4 + 0.127) / 8
"""Dettmers et al. 2023 section 3: NF4 with double quantization, 4.127 bits per parameter."""
BF16_BYTES = 2.0


def _target_shapes(model: ModelSpec, ffn_width: int) -> dict[str, tuple[int, int]]:
    h = model.hidden_size
    q_width = model.heads * model.head_dim
    kv_width = model.kv_heads * model.head_dim
    shapes = {"q": (h, q_width), "k": (h, kv_width), "v": (h, kv_width), "o": (q_width, h), "up": (h, ffn_width), "down": (ffn_width, h)}
    if model.gated_mlp:
        shapes["gate"] = (h, ffn_width)
    return shapes


def adapter_parameters(model: ModelSpec, rank: int, targets: tuple[str, ...] = LORA_TARGETS) -> int:
    """Trainable LoRA parameters over all layers (MoE: every expert's MLP gets adapters)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise InputError(f"lora_rank must be a positive integer, got {rank!r}")
    unknown = sorted(set(targets) - set(LORA_TARGETS))
    if unknown or not targets:
        raise InputError(f"lora targets must be a non-empty subset of {', '.join(LORA_TARGETS)}; got {', '.join(unknown) or 'none'}")
    attention = _target_shapes(model, model.ffn_hidden_size)
    per_layer_attention = sum(rank * (d_in + d_out) for name, (d_in, d_out) in attention.items() if name in ("q", "k", "v", "o") and name in targets)

    def mlp(width: int) -> int:
        shapes = _target_shapes(model, width)
        return sum(rank * (d_in + d_out) for name, (d_in, d_out) in shapes.items() if name in ("gate", "up", "down") and name in targets)

    if model.moe is None:
        per_layer_mlp_total = model.layers * mlp(model.ffn_hidden_size)
    else:
        moe = model.moe
        from vramopt.models.parameters import moe_layer_count

        moe_layers = moe_layer_count(model.layers, moe)
        expert = moe.experts * mlp(moe.expert_ffn_hidden_size) + moe.shared_experts * mlp(moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size)
        per_layer_mlp_total = moe_layers * expert + (model.layers - moe_layers) * mlp(model.ffn_hidden_size)
    return int(model.layers * per_layer_attention + per_layer_mlp_total)


def frozen_bytes_per_parameter(model: ModelSpec, kind: str) -> float:
    """Average bytes per frozen base parameter: bf16 for LoRA; NF4 for QLoRA's transformer
    layers with bf16 embeddings and head."""
    if kind == "lora":
        return BF16_BYTES
    embedding = model.parameters.embedding
    layers = model.parameters.total - embedding
    return (layers * NF4_BYTES_PER_PARAM + embedding * BF16_BYTES) / model.parameters.total
