"""Parameter counts computed from a model's architecture.

A pure function of the dimensions: no I/O, no catalog. Every weight matrix and vector of a
decoder-only transformer is counted once:

- embeddings: ``vocab * hidden`` for the input table, the same again for the output head
  unless it is tied to the input table, and ``positions * hidden`` for a learned
  position table (GPT-2, GPT-3, OPT; zero for rotary models);
- attention per layer: Q and O ``heads * head_dim * hidden`` each, K and V
  ``kv_heads * head_dim * hidden`` each; with ``attention_bias`` the Q/K/V biases, and the
  output-projection bias where the model has one (see ``count_parameters``);
- multi-head latent attention (DeepSeek-V2/V3) instead, from its low ranks (see
  ``mla_attention_parameters``);
- MLP per layer: gated (SwiGLU: gate, up, down) ``3 * hidden * ffn`` or plain
  ``2 * hidden * ffn``, plus biases with ``mlp_bias``;
- norms: RMSNorm has one weight vector, LayerNorm a weight and a bias; two norms per layer
  and one final norm;
- mixture of experts: a router ``hidden * experts`` (no bias), every routed expert an MLP of
  the expert width, the shared experts an MLP of the shared width. Which layers are MoE is
  given by ``moe_layer_indices``.

The pieces only some families have are keyword arguments of ``count_parameters`` (see
``LayerExtras``): extra norms per layer (Gemma 2/3: four), no final norm (post-norm OPT),
query/key norms (Qwen3, Gemma 3, OLMo 2), attention sinks and a router bias (gpt-oss), a
shared-expert gate (Qwen2-MoE), an output-head bias (Phi-2), and an embedding narrower than
the model with project-in/out matrices (OPT-350m). The Hugging Face importer sets them; the
catalog's TOML files use the defaults.

Not counted: DeepSeek-V3's router score-correction bias (a buffer, not a parameter, in
transformers ``DeepseekV3TopkRouter``), rotary frequency buffers (not parameters).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramopt.errors import InputError
from vramopt.types import MlaSpec, MoeSpec, ParameterCount

NORM_KINDS = ("rmsnorm", "layernorm")
NORMS_PER_LAYER = 2
"""Pre-attention and pre-MLP norm (GPT-NeoX's parallel residual also keeps two)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerExtras:
    """Parameters some families add to the common decoder layer (defaults: none).

    Each name is the transformers module it counts (``modeling_<family>.py``, transformers 5.24.0).
    """

    norms_per_layer: int = NORMS_PER_LAYER
    """Gemma 2/3: input, post-attention, pre- and post-feed-forward norms (4); Falcon-7B and
    Phi-2 (parallel attention and MLP behind one norm): 1."""
    final_norm: bool = True
    """OPT with ``do_layer_norm_before`` false (OPT-350m) has no final layer norm."""
    query_key_norm_width: int = 0
    """Features the per-layer query and key norms cover together, counted with the model's
    norm kind: Qwen3 / Gemma 3 ``q_norm`` and ``k_norm`` over one head (2 * head_dim), OLMo 2
    over all query and key heads ((heads + kv_heads) * head_dim)."""
    attention_sinks: bool = False
    """gpt-oss ``GptOssAttention.sinks``: one learned logit per query head and layer."""
    router_bias: bool = False
    """gpt-oss ``GptOssTopKRouter.bias``: one bias per expert and MoE layer."""
    shared_expert_gate: bool = False
    """Qwen2-MoE ``shared_expert_gate``: Linear(hidden, 1) per MoE layer."""
    output_head_bias: bool = False
    """Phi-2 ``PhiForCausalLM.lm_head`` has a bias (vocab)."""
    embedding_width: int = 0
    """OPT ``word_embed_proj_dim`` when it differs from the hidden size: the token table and
    the tied head are this wide, and ``project_in`` / ``project_out`` (no bias) map it to and
    from the hidden size. 0: the hidden size."""


NO_EXTRAS = LayerExtras()


def norm_parameters(width: int, norm: str) -> int:
    """Parameters of one norm over ``width`` features: RMSNorm a weight, LayerNorm weight+bias."""
    if norm == "rmsnorm":
        return width
    if norm == "layernorm":
        return 2 * width
    raise InputError(f"norm must be one of {', '.join(NORM_KINDS)}, got '{norm}'")


def mlp_parameters(hidden_size: int, ffn_hidden_size: int, *, gated: bool, bias: bool) -> int:
    """One feed-forward block: gated (gate, up, down) or plain (up, down), with biases if any."""
    if gated:
        weights = 3 * hidden_size * ffn_hidden_size
        biases = 2 * ffn_hidden_size + hidden_size
    else:
        weights = 2 * hidden_size * ffn_hidden_size
        biases = ffn_hidden_size + hidden_size
    return weights + (biases if bias else 0)


def attention_parameters(
    hidden_size: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    *,
    qkv_bias: bool,
    output_bias: bool,
) -> int:
    """Multi-head / grouped-query attention: Q, K, V and output projections."""
    query_width = heads * head_dim
    key_value_width = kv_heads * head_dim
    weights = 2 * query_width * hidden_size + 2 * key_value_width * hidden_size
    biases = (query_width + 2 * key_value_width if qkv_bias else 0) + (hidden_size if output_bias else 0)
    return weights + biases


def mla_attention_parameters(hidden_size: int, heads: int, mla: MlaSpec, norm: str) -> int:
    """Multi-head latent attention (DeepSeek-V2 section 2.1, DeepSeek-V3 config names).

    q_a (hidden -> q_lora_rank) and its norm, q_b (q_lora_rank -> heads * (nope + rope));
    without a query rank (``q_lora_rank == 0``) one q projection hidden -> heads*(nope+rope).
    kv_a (hidden -> kv_lora_rank + rope) and its norm over kv_lora_rank,
    kv_b (kv_lora_rank -> heads * (nope + v)), o (heads * v -> hidden). No biases.
    """
    query_head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    if mla.q_lora_rank > 0:
        query = (
            hidden_size * mla.q_lora_rank
            + norm_parameters(mla.q_lora_rank, norm)
            + mla.q_lora_rank * heads * query_head_dim
        )
    else:
        query = hidden_size * heads * query_head_dim
    key_value = (
        hidden_size * (mla.kv_lora_rank + mla.qk_rope_head_dim)
        + norm_parameters(mla.kv_lora_rank, norm)
        + mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    )
    output = heads * mla.v_head_dim * hidden_size
    return query + key_value + output


def moe_layer_indices(layers: int, moe: MoeSpec | None) -> tuple[int, ...]:
    """0-based indices of the MoE layers: the one rule every caller uses.

    Layer i is MoE when ``i >= first_dense_layers``, ``i % moe_layer_interval ==
    moe_layer_offset`` and i is not in ``dense_layer_indices``. This covers each framework's
    own rule by choosing the offset:

    - DeepSeek-V2/V3 (vLLM ``deepseek_v2.py`` ``DeepseekV2DecoderLayer``, DeepSeek's
      ``modeling_deepseek.py``): ``i >= first_k_dense_replace and i % moe_layer_freq == 0``,
      so offset 0;
    - Qwen2-MoE / Qwen3-MoE (transformers ``modeling_qwen2_moe.py``
      ``Qwen2MoeDecoderLayer``): ``i not in mlp_only_layers and (i + 1) %
      decoder_sparse_step == 0``, so offset ``step - 1`` and ``dense_layer_indices =
      mlp_only_layers``;
    - Llama 4 (transformers ``configuration_llama4.py``): ``moe_layers = range(step - 1,
      layers, step)`` with ``step = interleave_moe_layer_step``, so offset ``step - 1``;
    - Mixtral: every layer (interval 1, offset 0).
    """
    if moe is None:
        return ()
    dense = set(moe.dense_layer_indices)
    return tuple(
        index
        for index in range(moe.first_dense_layers, layers)
        if index % moe.moe_layer_interval == moe.moe_layer_offset and index not in dense
    )


def moe_layer_count(layers: int, moe: MoeSpec | None) -> int:
    """Number of MoE layers (``len(moe_layer_indices(...))``)."""
    return len(moe_layer_indices(layers, moe))


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value!r}")


def _check_moe(moe: MoeSpec, layers: int) -> None:
    _check_positive(
        experts=moe.experts,
        experts_per_token=moe.experts_per_token,
        expert_ffn_hidden_size=moe.expert_ffn_hidden_size,
        moe_layer_interval=moe.moe_layer_interval,
    )
    if moe.experts_per_token > moe.experts:
        raise InputError(f"experts_per_token ({moe.experts_per_token}) exceeds experts ({moe.experts})")
    if moe.shared_experts < 0 or moe.shared_expert_ffn_hidden_size < 0:
        raise InputError("shared_experts and shared_expert_ffn_hidden_size must not be negative")
    if moe.shared_experts > 0 and moe.shared_expert_ffn_hidden_size == 0:
        raise InputError("shared_expert_ffn_hidden_size must be positive when shared_experts > 0")
    if not 0 <= moe.first_dense_layers < layers:
        raise InputError(f"first_dense_layers must be in [0, {layers}), got {moe.first_dense_layers}")
    offset = moe.moe_layer_offset
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < moe.moe_layer_interval:
        raise InputError(f"moe_layer_offset must be in [0, {moe.moe_layer_interval}), got {offset!r}")
    for index in moe.dense_layer_indices:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < layers:
            raise InputError(f"dense_layer_indices must hold layer indices in [0, {layers}), got {index!r}")
    if not moe_layer_indices(layers, moe):
        raise InputError("the MoE layout leaves no MoE layer (check first_dense_layers, moe_layer_interval, "
                         "moe_layer_offset and dense_layer_indices)")


def _check_mla(mla: MlaSpec) -> None:
    _check_positive(
        kv_lora_rank=mla.kv_lora_rank,
        qk_nope_head_dim=mla.qk_nope_head_dim,
        qk_rope_head_dim=mla.qk_rope_head_dim,
        v_head_dim=mla.v_head_dim,
    )
    if mla.q_lora_rank < 0:
        raise InputError(f"q_lora_rank must not be negative, got {mla.q_lora_rank}")


def count_parameters(
    *,
    layers: int,
    hidden_size: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    ffn_hidden_size: int,
    vocab_size: int,
    gated_mlp: bool,
    tied_embeddings: bool,
    attention_bias: bool,
    mlp_bias: bool,
    norm: str,
    learned_positions: int = 0,
    moe: MoeSpec | None = None,
    mla: MlaSpec | None = None,
    attention_output_bias: bool | None = None,
    extras: LayerExtras = NO_EXTRAS,
) -> ParameterCount:
    """Count total, active, embedding and largest-layer parameters of a decoder-only model.

    Parameters
    ----------
    attention_bias
        Q, K and V projections carry biases.
    attention_output_bias
        The output projection carries a bias. ``None`` (the default) follows the
        convention of the catalog's models: models whose every linear layer has a bias
        (``attention_bias and mlp_bias``: GPT-2, GPT-3, OPT, GPT-NeoX) have one; Qwen2,
        with Q/K/V biases only, has none. The Hugging Face importer passes it explicitly.
    moe
        Mixture-of-experts FFN; the dense layers (``first_dense_layers`` and the layers
        between MoE layers) use ``ffn_hidden_size``. Experts use ``gated_mlp`` and
        ``mlp_bias`` like the dense MLP.
    mla
        Multi-head latent attention replaces the Q/K/V/O projections (``kv_heads`` and
        ``head_dim`` are then not used for the count).
    extras
        What some families add (``LayerExtras``); none by default.

    Returns
    -------
    ParameterCount
        ``total`` counts every parameter (all experts); ``active`` the ones one token
        passes through (embeddings, attention, norms, dense MLPs, and in MoE layers the
        router, the shared experts and ``experts_per_token`` routed experts);
        ``embedding`` the input table, the untied output head and learned positions;
        ``largest_layer`` the largest transformer layer with all its experts.
    """
    _check_positive(
        layers=layers,
        hidden_size=hidden_size,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn_hidden_size=ffn_hidden_size,
        vocab_size=vocab_size,
    )
    if isinstance(learned_positions, bool) or not isinstance(learned_positions, int) or learned_positions < 0:
        raise InputError(f"learned_positions must be a non-negative integer, got {learned_positions!r}")
    if heads % kv_heads != 0:
        raise InputError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    if moe is not None:
        _check_moe(moe, layers)
    if mla is not None:
        _check_mla(mla)
    if attention_output_bias is None:
        attention_output_bias = attention_bias and mlp_bias

    _check_extras(extras)
    embedding = _embedding_parameters(vocab_size, hidden_size, tied_embeddings, learned_positions, extras)

    if mla is not None:
        attention = mla_attention_parameters(hidden_size, heads, mla, norm)
    else:
        attention = attention_parameters(
            hidden_size, heads, kv_heads, head_dim, qkv_bias=attention_bias, output_bias=attention_output_bias
        )
    if extras.attention_sinks:
        attention += heads
    if extras.query_key_norm_width:
        attention += norm_parameters(extras.query_key_norm_width, norm)
    layer_norms = extras.norms_per_layer * norm_parameters(hidden_size, norm)
    dense_mlp = mlp_parameters(hidden_size, ffn_hidden_size, gated=gated_mlp, bias=mlp_bias)
    dense_layer = attention + layer_norms + dense_mlp

    moe_layers = moe_layer_count(layers, moe)
    dense_layers = layers - moe_layers
    final_norm = norm_parameters(hidden_size, norm) if extras.final_norm else 0
    total = embedding + final_norm + dense_layers * dense_layer
    active = total
    largest_layer = dense_layer if dense_layers else 0

    if moe is not None and moe_layers:
        expert = mlp_parameters(hidden_size, moe.expert_ffn_hidden_size, gated=gated_mlp, bias=mlp_bias)
        shared = moe.shared_experts * (
            mlp_parameters(hidden_size, moe.shared_expert_ffn_hidden_size, gated=gated_mlp, bias=mlp_bias)
            if moe.shared_experts
            else 0
        )
        router = hidden_size * moe.experts
        if extras.router_bias:
            router += moe.experts
        if extras.shared_expert_gate:
            router += hidden_size
        moe_layer_total = attention + layer_norms + router + shared + moe.experts * expert
        moe_layer_active = attention + layer_norms + router + shared + moe.experts_per_token * expert
        total += moe_layers * moe_layer_total
        active += moe_layers * moe_layer_active
        largest_layer = max(largest_layer, moe_layer_total)

    return ParameterCount(total=total, active=active, embedding=embedding, largest_layer=largest_layer)


def _check_extras(extras: LayerExtras) -> None:
    for name in ("norms_per_layer", "query_key_norm_width", "embedding_width"):
        value = getattr(extras, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"{name} must be a non-negative integer, got {value!r}")


def _embedding_parameters(
    vocab_size: int, hidden_size: int, tied: bool, learned_positions: int, extras: LayerExtras
) -> int:
    """Token table, untied head (and its bias), learned positions, OPT's project-in/out."""
    width = extras.embedding_width or hidden_size
    projections = 2 * width * hidden_size if width != hidden_size else 0
    head_bias = vocab_size if extras.output_head_bias else 0
    return vocab_size * width * (1 if tied else 2) + head_bias + learned_positions * hidden_size + projections
