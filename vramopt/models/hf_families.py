"""One reader per Hugging Face ``model_type``: the config.json keys of that family, mapped to
vramopt's model fields.

Key names and defaults are those of the transformers configuration classes, and the modules
each reader counts are those of ``transformers/models/<family>/modeling_<family>.py``
(transformers 5.24.0); ``tests/unit/test_huggingface_transformers_counts.py`` checks every
family's count against ``AutoModelForCausalLM.from_config`` on the meta device. Every reader
returns the keyword arguments of ``parameters.count_parameters`` plus ``max_context``
(and ``moe`` / ``mla`` where the family has them).
"""

from __future__ import annotations

from typing import Any, Callable

from vramopt.models.hf_config_reader import ConfigReader, decoder_fields, head_dim, kv_heads, moe
from vramopt.models.parameters import LayerExtras
from vramopt.types import MlaSpec

OPT_POSITION_OFFSET = 2
"""OPTLearnedPositionalEmbedding allocates max_position_embeddings + 2 rows (transformers)."""

GPT2_FFN_MULTIPLIER = 4
"""GPT-2's MLP width when n_inner is null: 4 * n_embd (transformers GPT2MLP)."""

FALCON_FFN_MULTIPLIER = 4
"""FalconConfig: ffn_hidden_size defaults to 4 * hidden_size."""

FALCON_DEFAULT_POSITIONS = 2048
"""FalconConfig.max_position_embeddings default (Falcon-7B's config.json omits the key)."""

GEMMA_DEFAULT_HEAD_DIM = 256
"""GemmaConfig / Gemma2Config / Gemma3TextConfig head_dim default (not hidden / heads)."""

GEMMA_NORMS_PER_LAYER = 4
"""Gemma 2/3 decoder layer: input, post-attention, pre- and post-feed-forward RMSNorm."""

PARALLEL_BLOCK_NORMS = 1
"""Attention and MLP in parallel behind one norm (Falcon-7B, Phi-2)."""


def _llama(config: ConfigReader) -> dict[str, Any]:
    # LlamaAttention gives o_proj the same bias as q/k/v.
    bias = config.flag("attention_bias", False)
    return decoder_fields(config, qkv_bias=bias, output_bias=bias, mlp_bias=config.flag("mlp_bias", False))


def _mistral(config: ConfigReader) -> dict[str, Any]:
    return decoder_fields(config, qkv_bias=False, output_bias=False)


def _qwen2(config: ConfigReader) -> dict[str, Any]:
    # Qwen2Attention: q/k/v biases always, o_proj none.
    return decoder_fields(config, qkv_bias=True, output_bias=False)


def _local_experts(config: ConfigReader, fields: dict[str, Any]):
    """Mixtral-style MoE keys (num_local_experts, num_experts_per_tok), every layer MoE, each
    expert as wide as the config's intermediate_size (Mixtral, gpt-oss)."""
    return moe(
        config,
        experts_key="num_local_experts",
        experts=config.size("num_local_experts"),
        experts_per_token=config.size("num_experts_per_tok"),
        expert_ffn_hidden_size=fields["ffn_hidden_size"],
    )


def _mixtral(config: ConfigReader) -> dict[str, Any]:
    fields = decoder_fields(config, qkv_bias=False, output_bias=False)
    fields["moe"] = _local_experts(config, fields)
    return fields


def _qwen_moe(config: ConfigReader, fields: dict[str, Any], shared_width: int) -> dict[str, Any]:
    """Qwen2-MoE / Qwen3-MoE: layer i is MoE when (i + 1) % decoder_sparse_step == 0 and i is
    not in mlp_only_layers (``Qwen2MoeDecoderLayer``, ``Qwen3MoeDecoderLayer``)."""
    sparse_step = config.size("decoder_sparse_step", default=1)
    fields["moe"] = moe(
        config,
        experts_key="num_experts",
        experts=config.size("num_experts"),
        experts_per_token=config.size("num_experts_per_tok"),
        expert_ffn_hidden_size=config.size("moe_intermediate_size"),
        shared_experts=1 if shared_width else 0,
        shared_expert_ffn_hidden_size=shared_width,
        moe_layer_interval=sparse_step,
        moe_layer_offset=sparse_step - 1,
        dense_layer_indices=config.layer_indices("mlp_only_layers", fields["layers"]),
    )
    return fields


def _qwen2_moe(config: ConfigReader) -> dict[str, Any]:
    qkv_bias = config.flag("qkv_bias", True)
    # Qwen2MoeSparseMoeBlock always has shared_expert_gate = Linear(hidden, 1, bias=False).
    fields = decoder_fields(config, qkv_bias=qkv_bias, output_bias=False, extras=LayerExtras(shared_expert_gate=True))
    return _qwen_moe(config, fields, config.count("shared_expert_intermediate_size", 0))


def _qwen3(config: ConfigReader) -> dict[str, Any]:
    # Qwen3Attention: q/k/v/o biases from attention_bias; q_norm and k_norm over one head.
    bias = config.flag("attention_bias", False)
    fields = decoder_fields(config, qkv_bias=bias, output_bias=bias)
    fields["extras"] = LayerExtras(query_key_norm_width=2 * fields["head_dim"])
    return fields


def _qwen3_moe(config: ConfigReader) -> dict[str, Any]:
    return _qwen_moe(config, _qwen3(config), shared_width=0)


def _gemma(config: ConfigReader, norms_per_layer: int = 2, query_key_norm: bool = False) -> dict[str, Any]:
    bias = config.flag("attention_bias", False)
    fields = decoder_fields(
        config,
        qkv_bias=bias,
        output_bias=bias,
        tied_default=True,
        head_dim_default=GEMMA_DEFAULT_HEAD_DIM,
    )
    fields["extras"] = LayerExtras(
        norms_per_layer=norms_per_layer,
        query_key_norm_width=2 * fields["head_dim"] if query_key_norm else 0,
    )
    return fields


def _gemma2(config: ConfigReader) -> dict[str, Any]:
    return _gemma(config, norms_per_layer=GEMMA_NORMS_PER_LAYER)


def _gemma3_text(config: ConfigReader) -> dict[str, Any]:
    return _gemma(config, norms_per_layer=GEMMA_NORMS_PER_LAYER, query_key_norm=True)


def _phi3(config: ConfigReader) -> dict[str, Any]:
    # Phi3: fused qkv_proj and gate_up_proj, no biases; the same weights as Llama's.
    return decoder_fields(config, qkv_bias=False, output_bias=False)


def _phi(config: ConfigReader) -> dict[str, Any]:
    # PhiDecoderLayer: attention and MLP in parallel behind one LayerNorm; every linear layer
    # has a bias, the output head too; optional q/k LayerNorms over one head.
    fields = decoder_fields(
        config, qkv_bias=True, output_bias=True, mlp_bias=True, gated=False, norm="layernorm"
    )
    query_key_norm = config.flag("qk_layernorm", False)
    fields["extras"] = LayerExtras(
        norms_per_layer=PARALLEL_BLOCK_NORMS,
        output_head_bias=True,
        query_key_norm_width=2 * fields["head_dim"] if query_key_norm else 0,
    )
    return fields


def _olmo2(config: ConfigReader) -> dict[str, Any]:
    # Olmo2Attention: q_norm over all query heads, k_norm over all key heads; the layer keeps
    # post-attention and post-feed-forward norms (no input norm), so two.
    bias = config.flag("attention_bias", False)
    fields = decoder_fields(config, qkv_bias=bias, output_bias=bias)
    fields["extras"] = LayerExtras(query_key_norm_width=(fields["heads"] + fields["kv_heads"]) * fields["head_dim"])
    return fields


def _granite(config: ConfigReader) -> dict[str, Any]:
    # The multipliers (embedding, attention, residual, logits) scale activations, not weights.
    bias = config.flag("attention_bias", False)
    return decoder_fields(config, qkv_bias=bias, output_bias=bias, mlp_bias=config.flag("mlp_bias", False))


def _starcoder2(config: ConfigReader) -> dict[str, Any]:
    bias = config.flag("use_bias", True)
    return decoder_fields(
        config, qkv_bias=bias, output_bias=bias, mlp_bias=bias, gated=False, norm="layernorm", tied_default=True
    )


def _gpt_oss(config: ConfigReader) -> dict[str, Any]:
    # GptOssAttention: q/k/v/o biases (attention_bias, default true) and one sink logit per
    # head; every layer is MoE; the router and the experts have biases.
    bias = config.flag("attention_bias", True)
    fields = decoder_fields(
        config,
        qkv_bias=bias,
        output_bias=bias,
        mlp_bias=True,
        extras=LayerExtras(attention_sinks=True, router_bias=True),
    )
    fields["moe"] = _local_experts(config, fields)
    return fields


def _llama4_text(config: ConfigReader) -> dict[str, Any]:
    # Llama4TextDecoderLayer: MoE layers (moe_layers, else every interleave_moe_layer_step-th)
    # hold num_local_experts routed experts and one shared expert, both intermediate_size wide;
    # dense layers an MLP of intermediate_size_mlp. The q/k L2 norm has no weights.
    bias = config.flag("attention_bias", False)
    fields = decoder_fields(config, qkv_bias=bias, output_bias=bias, ffn_key="intermediate_size_mlp")
    layers = fields["layers"]
    expert_width = config.size("intermediate_size")
    if config.present("moe_layers"):
        moe_layers = set(config.layer_indices("moe_layers", layers))
        layout = dict(dense_layer_indices=tuple(index for index in range(layers) if index not in moe_layers))
    else:
        step = config.size("interleave_moe_layer_step", default=1)
        layout = dict(moe_layer_interval=step, moe_layer_offset=step - 1)
    fields["moe"] = moe(
        config,
        experts_key="num_local_experts",
        experts=config.size("num_local_experts"),
        experts_per_token=config.size("num_experts_per_tok"),
        expert_ffn_hidden_size=expert_width,
        shared_experts=1,
        shared_expert_ffn_hidden_size=expert_width,
        **layout,
    )
    return fields


def _deepseek(config: ConfigReader) -> dict[str, Any]:
    """DeepSeek-V2 and V3: multi-head latent attention and DeepSeekMoE.

    Layer i is MoE when i >= first_k_dense_replace and i % moe_layer_freq == 0 (DeepSeek's
    modeling_deepseek.py; transformers reads first_k_dense_replace only, and every published
    config has moe_layer_freq 1). The multi-token-prediction module (num_nextn_predict_layers)
    is not counted: transformers does not build it either.
    """
    config.refuse_if("attention_bias", True, "biases on the latent-attention projections")
    config.refuse_if("mlp_bias", True, "biases on the dense and shared-expert MLPs")
    fields = decoder_fields(config, qkv_bias=False, output_bias=False)
    mla = MlaSpec(
        q_lora_rank=config.count("q_lora_rank", 0),
        kv_lora_rank=config.size("kv_lora_rank"),
        qk_nope_head_dim=config.size("qk_nope_head_dim"),
        qk_rope_head_dim=config.size("qk_rope_head_dim"),
        v_head_dim=config.size("v_head_dim"),
    )
    shared_experts = config.count("n_shared_experts", 0)
    expert_width = config.size("moe_intermediate_size")
    fields["mla"] = mla
    # For FLOP estimates the attention is described by its query/key head width.
    fields["kv_heads"] = fields["heads"]
    fields["head_dim"] = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    fields["moe"] = moe(
        config,
        experts_key="n_routed_experts",
        experts=config.size("n_routed_experts"),
        experts_per_token=config.size("num_experts_per_tok"),
        expert_ffn_hidden_size=expert_width,
        shared_experts=shared_experts,
        shared_expert_ffn_hidden_size=expert_width if shared_experts else 0,
        first_dense_layers=config.count("first_k_dense_replace", 0),
        moe_layer_interval=config.size("moe_layer_freq", default=1),
        moe_layer_offset=0,
    )
    if fields["moe"].first_dense_layers >= fields["layers"]:
        raise config.error("first_k_dense_replace", f"must be less than num_hidden_layers ({fields['layers']})")
    return fields


def _falcon(config: ConfigReader) -> dict[str, Any]:
    """FalconAttention's fused query_key_value and the layer's norms (``FalconDecoderLayer``).

    new_decoder_architecture (Falcon-40B/180B): num_kv_heads key/value heads and, with
    parallel attention, two norms (ln_attn, ln_mlp) unless num_ln_in_parallel_attn is 1;
    otherwise multi_query (Falcon-7B) one key/value head, else as many as query heads;
    parallel attention without the new architecture: one input norm; sequential: two.
    """
    hidden_size = config.size("hidden_size")
    heads = config.size("num_attention_heads")
    new_architecture = config.flag("new_decoder_architecture", False)
    parallel = config.flag("parallel_attn", True)
    if new_architecture:
        key_value_heads = kv_heads(config, heads, "num_kv_heads")
    else:
        key_value_heads = 1 if config.flag("multi_query", True) else heads
    norms_in_parallel = config.size("num_ln_in_parallel_attn", default=2 if new_architecture else 1)
    if norms_in_parallel not in (1, 2):
        raise config.error("num_ln_in_parallel_attn", f"must be 1 or 2, got {norms_in_parallel}")
    norms_per_layer = (2 if norms_in_parallel == 2 and new_architecture else 1) if parallel else 2
    bias = config.flag("bias", False)
    return dict(
        layers=config.size("num_hidden_layers"),
        hidden_size=hidden_size,
        heads=heads,
        kv_heads=key_value_heads,
        head_dim=head_dim(config, hidden_size, heads, "num_attention_heads", allow_key=False),
        ffn_hidden_size=config.size("ffn_hidden_size", default=FALCON_FFN_MULTIPLIER * hidden_size),
        vocab_size=config.size("vocab_size"),
        max_context=config.size("max_position_embeddings", default=FALCON_DEFAULT_POSITIONS),
        gated_mlp=False,
        tied_embeddings=config.flag("tie_word_embeddings", True),
        attention_bias=bias,
        attention_output_bias=bias,
        mlp_bias=bias,
        norm="layernorm",
        learned_positions=0,
        extras=LayerExtras(norms_per_layer=norms_per_layer),
    )


def _opt(config: ConfigReader) -> dict[str, Any]:
    """OPTDecoder: learned positions (+2 rows), project_in/out when word_embed_proj_dim differs
    from hidden_size (OPT-350m), no final norm when do_layer_norm_before is false."""
    config.refuse_if("layer_norm_elementwise_affine", False, "layer norms without weights")
    hidden_size = config.size("hidden_size")
    heads = config.size("num_attention_heads")
    projection = config.size("word_embed_proj_dim", default=hidden_size)
    positions = config.size("max_position_embeddings")
    bias = config.flag("enable_bias", True)
    final_norm = config.flag("do_layer_norm_before", True) and not config.flag("_remove_final_layer_norm", False)
    return dict(
        layers=config.size("num_hidden_layers"),
        hidden_size=hidden_size,
        heads=heads,
        kv_heads=heads,
        head_dim=head_dim(config, hidden_size, heads, "num_attention_heads", allow_key=False),
        ffn_hidden_size=config.size("ffn_dim"),
        vocab_size=config.size("vocab_size"),
        max_context=positions,
        gated_mlp=False,
        tied_embeddings=config.flag("tie_word_embeddings", True),
        attention_bias=bias,
        attention_output_bias=bias,
        mlp_bias=bias,
        norm="layernorm",
        learned_positions=positions + OPT_POSITION_OFFSET,
        extras=LayerExtras(final_norm=final_norm, embedding_width=projection if projection != hidden_size else 0),
    )


def _gpt2(config: ConfigReader) -> dict[str, Any]:
    hidden_size = config.size("n_embd")
    heads = config.size("n_head")
    positions = config.size("n_positions")
    return dict(
        layers=config.size("n_layer"),
        hidden_size=hidden_size,
        heads=heads,
        kv_heads=heads,
        head_dim=head_dim(config, hidden_size, heads, "n_head", allow_key=False),
        ffn_hidden_size=config.size("n_inner", default=GPT2_FFN_MULTIPLIER * hidden_size),
        vocab_size=config.size("vocab_size"),
        max_context=positions,
        gated_mlp=False,
        tied_embeddings=config.flag("tie_word_embeddings", True),
        attention_bias=True,
        attention_output_bias=True,
        mlp_bias=True,
        norm="layernorm",
        learned_positions=positions,
        extras=LayerExtras(),
    )


def _gpt_neox(config: ConfigReader) -> dict[str, Any]:
    bias = config.flag("attention_bias", True)
    return decoder_fields(
        config, qkv_bias=bias, output_bias=bias, mlp_bias=True, gated=False, norm="layernorm", head_dim_key=False
    )


READERS: dict[str, Callable[[ConfigReader], dict[str, Any]]] = {
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "falcon": _falcon,
    "gemma": _gemma,
    "gemma2": _gemma2,
    "gemma3_text": _gemma3_text,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "gpt_oss": _gpt_oss,
    "granite": _granite,
    "llama": _llama,
    "llama4_text": _llama4_text,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "olmo2": _olmo2,
    "opt": _opt,
    "phi": _phi,
    "phi3": _phi3,
    "qwen2": _qwen2,
    "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "starcoder2": _starcoder2,
}
"""model_type -> function reading the architecture fields of that family."""
