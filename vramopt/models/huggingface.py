"""Import a model from a Hugging Face ``config.json``.

Supported ``model_type`` values and the keys read (names as in the transformers
configuration classes; defaults are the classes' defaults):

- ``llama``, ``mistral``, ``mixtral``, ``qwen2``, ``qwen2_moe``, ``deepseek_v3``:
  num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads (default: heads),
  head_dim (default hidden/heads), intermediate_size, vocab_size, max_position_embeddings,
  tie_word_embeddings (default false). Gated MLP, RMSNorm, rotary positions.
  llama: attention_bias (Q/K/V and O) and mlp_bias, default false. qwen2 / qwen2_moe: Q/K/V
  biases, no O bias. mixtral: num_local_experts, num_experts_per_tok.
  qwen2_moe: num_experts, num_experts_per_tok, moe_intermediate_size,
  shared_expert_intermediate_size, decoder_sparse_step, mlp_only_layers (layer i is MoE
  when (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers).
  deepseek_v3: the MLA ranks, n_routed_experts, n_shared_experts, moe_intermediate_size,
  first_k_dense_replace, moe_layer_freq (layer i is MoE when i >= first_k_dense_replace
  and i % moe_layer_freq == 0; ``parameters.moe_layer_indices``); the multi-token-prediction module
  (num_nextn_predict_layers) is not counted.
- ``opt``: ffn_dim, learned positions max_position_embeddings + 2 (OPT's offset),
  word_embed_proj_dim must equal hidden_size, enable_bias (default true), tied by default.
- ``gpt2``: n_layer, n_embd, n_head, n_inner (default 4 * n_embd), n_positions, tied.
- ``gpt_neox``: rotary, untied output head by default, attention_bias (default true).

Any malformed file raises ``CatalogError`` with one line naming the file and the key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from vramopt.catalog_files import MAX_CATALOG_FILE_BYTES, TableReader
from vramopt.errors import CatalogError, InputError
from vramopt.input_files import display_path, parse_json, read_bounded
from vramopt.models.parameters import count_parameters
from vramopt.types import MAX_COUNT, MlaSpec, MoeSpec, ModelSpec

MAX_CONFIG_FILE_BYTES = MAX_CATALOG_FILE_BYTES
"""A config.json is a few kilobytes; refuse anything over ~1 MB rather than parse it."""

OPT_POSITION_OFFSET = 2
"""OPTLearnedPositionalEmbedding allocates max_position_embeddings + 2 rows (transformers)."""

GPT2_FFN_MULTIPLIER = 4
"""GPT-2's MLP width when n_inner is null: 4 * n_embd (transformers GPT2MLP)."""


def _read_json(path: Path) -> dict[str, Any]:
    def fail(detail: str) -> CatalogError:
        return CatalogError(f"{display_path(path)}: {detail}")

    data = parse_json(read_bounded(path, MAX_CONFIG_FILE_BYTES, fail), fail, allow_constants=False)
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: the top level must be a JSON object, got {type(data).__name__}")
    return data


class _ConfigReader:
    """Typed access to config.json keys; null counts as absent (transformers does so too)."""

    def __init__(self, data: dict[str, Any], path: Path) -> None:
        self.table = TableReader(data, path)
        self.data = data
        self.path = path

    def error(self, key: str, message: str) -> CatalogError:
        return self.table.error(key, message)

    def present(self, key: str) -> bool:
        return self.data.get(key) is not None

    def size(self, key: str, default: int | None = None) -> int:
        """A positive integer; ``default`` when absent or null (required when no default)."""
        return self._integer(key, default, 1, "must be positive")

    def count(self, key: str, default: int) -> int:
        """A non-negative integer; ``default`` when absent or null."""
        return self._integer(key, default, 0, "must not be negative")

    def _integer(self, key: str, default: int | None, minimum: int, too_small: str) -> int:
        if not self.present(key):
            if default is None:
                raise self.error(key, "is missing")
            return default
        value = self.table.raw(key, ..., int)
        if value < minimum:
            raise self.error(key, f"{too_small}, got {value}")
        if value > MAX_COUNT:
            raise self.error(key, f"must be at most {MAX_COUNT:,}, got {value}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        if not self.present(key):
            return default
        return self.table.raw(key, ..., bool)


def _head_dim(config: _ConfigReader, hidden_size: int, heads: int, heads_key: str, allow_key: bool) -> int:
    if allow_key and config.present("head_dim"):
        return config.size("head_dim")
    if hidden_size % heads != 0:
        raise config.error(heads_key, f"({heads}) must divide the hidden size ({hidden_size})")
    return hidden_size // heads


def _kv_heads(config: _ConfigReader, heads: int) -> int:
    kv_heads = config.size("num_key_value_heads", default=heads)
    if heads % kv_heads != 0:
        raise config.error("num_key_value_heads", f"({kv_heads}) must divide num_attention_heads ({heads})")
    return kv_heads


def _llama_like(config: _ConfigReader, model_type: str) -> dict[str, Any]:
    """Dimensions shared by llama, mistral, mixtral, qwen2, qwen2_moe and deepseek_v3."""
    hidden_size = config.size("hidden_size")
    heads = config.size("num_attention_heads")
    qkv_bias = model_type in ("qwen2", "qwen2_moe")
    attention_bias = config.flag("attention_bias", False) if model_type == "llama" else qkv_bias
    return dict(
        layers=config.size("num_hidden_layers"),
        hidden_size=hidden_size,
        heads=heads,
        kv_heads=_kv_heads(config, heads),
        head_dim=_head_dim(config, hidden_size, heads, "num_attention_heads", allow_key=True),
        ffn_hidden_size=config.size("intermediate_size"),
        vocab_size=config.size("vocab_size"),
        max_context=config.size("max_position_embeddings"),
        gated_mlp=True,
        tied_embeddings=config.flag("tie_word_embeddings", False),
        attention_bias=attention_bias,
        # transformers' LlamaAttention gives o_proj the same bias as q/k/v; Qwen2 has none.
        attention_output_bias=attention_bias and model_type == "llama",
        mlp_bias=config.flag("mlp_bias", False) if model_type == "llama" else False,
        norm="rmsnorm",
        learned_positions=0,
    )


def _dense_llama(config: _ConfigReader) -> dict[str, Any]:
    return _llama_like(config, config.data["model_type"])


def _mixtral(config: _ConfigReader) -> dict[str, Any]:
    fields = _llama_like(config, "mixtral")
    fields["moe"] = _moe(
        config,
        experts_key="num_local_experts",
        experts=config.size("num_local_experts"),
        experts_per_token=config.size("num_experts_per_tok"),
        expert_ffn_hidden_size=fields["ffn_hidden_size"],
    )
    return fields


def _moe(config: _ConfigReader, experts_key: str, **values: int) -> MoeSpec:
    moe = MoeSpec(**values)
    if moe.experts_per_token > moe.experts:
        raise config.error("num_experts_per_tok", f"({moe.experts_per_token}) exceeds {experts_key} ({moe.experts})")
    return moe


def _qwen2_moe(config: _ConfigReader) -> dict[str, Any]:
    fields = _llama_like(config, "qwen2_moe")
    mlp_only_layers = config.data.get("mlp_only_layers") or []
    layers = fields["layers"]
    if not isinstance(mlp_only_layers, list) or not all(
        isinstance(index, int) and not isinstance(index, bool) and 0 <= index < layers for index in mlp_only_layers
    ):
        raise config.error("mlp_only_layers", f"must be a list of layer indices in [0, {layers})")
    sparse_step = config.size("decoder_sparse_step", default=1)
    shared_width = config.count("shared_expert_intermediate_size", 0)
    fields["moe"] = _moe(
        config,
        experts_key="num_experts",
        experts=config.size("num_experts"),
        experts_per_token=config.size("num_experts_per_tok"),
        expert_ffn_hidden_size=config.size("moe_intermediate_size"),
        shared_experts=1 if shared_width else 0,
        shared_expert_ffn_hidden_size=shared_width,
        moe_layer_interval=sparse_step,
        moe_layer_offset=sparse_step - 1,
        dense_layer_indices=tuple(sorted(set(mlp_only_layers))),
    )
    return fields


def _deepseek_v3(config: _ConfigReader) -> dict[str, Any]:
    fields = _llama_like(config, "deepseek_v3")
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
    fields["moe"] = _moe(
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


def _opt(config: _ConfigReader) -> dict[str, Any]:
    hidden_size = config.size("hidden_size")
    heads = config.size("num_attention_heads")
    projection = config.size("word_embed_proj_dim", default=hidden_size)
    if projection != hidden_size:
        raise config.error(
            "word_embed_proj_dim",
            f"({projection}) differs from hidden_size ({hidden_size}); OPT's project_in/project_out layers are not supported",
        )
    if not config.flag("do_layer_norm_before", True):
        raise config.error("do_layer_norm_before", "is false (post-norm OPT without a final norm) and is not supported")
    positions = config.size("max_position_embeddings")
    bias = config.flag("enable_bias", True)
    return dict(
        layers=config.size("num_hidden_layers"),
        hidden_size=hidden_size,
        heads=heads,
        kv_heads=heads,
        head_dim=_head_dim(config, hidden_size, heads, "num_attention_heads", allow_key=False),
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
    )


def _gpt2(config: _ConfigReader) -> dict[str, Any]:
    hidden_size = config.size("n_embd")
    heads = config.size("n_head")
    positions = config.size("n_positions")
    return dict(
        layers=config.size("n_layer"),
        hidden_size=hidden_size,
        heads=heads,
        kv_heads=heads,
        head_dim=_head_dim(config, hidden_size, heads, "n_head", allow_key=False),
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
    )


def _gpt_neox(config: _ConfigReader) -> dict[str, Any]:
    hidden_size = config.size("hidden_size")
    heads = config.size("num_attention_heads")
    bias = config.flag("attention_bias", True)
    return dict(
        layers=config.size("num_hidden_layers"),
        hidden_size=hidden_size,
        heads=heads,
        kv_heads=heads,
        head_dim=_head_dim(config, hidden_size, heads, "num_attention_heads", allow_key=False),
        ffn_hidden_size=config.size("intermediate_size"),
        vocab_size=config.size("vocab_size"),
        max_context=config.size("max_position_embeddings"),
        gated_mlp=False,
        tied_embeddings=config.flag("tie_word_embeddings", False),
        attention_bias=bias,
        attention_output_bias=bias,
        mlp_bias=True,
        norm="layernorm",
        learned_positions=0,
    )


READERS: dict[str, Callable[[_ConfigReader], dict[str, Any]]] = {
    "llama": _dense_llama,
    "mistral": _dense_llama,
    "qwen2": _dense_llama,
    "mixtral": _mixtral,
    "qwen2_moe": _qwen2_moe,
    "deepseek_v3": _deepseek_v3,
    "opt": _opt,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
}
"""model_type -> function reading the architecture fields of that family."""


def _model_name(config: _ConfigReader, path: Path) -> str:
    name = config.data.get("_name_or_path")
    if isinstance(name, str) and name.strip():
        return name.strip()
    folder = path.resolve().parent.name
    return folder or path.stem


def load_config_json(path: Path | str) -> ModelSpec:
    """A ``ModelSpec`` from a Hugging Face config.json (architecture keys only)."""
    path = Path(path)
    data = _read_json(path)
    config = _ConfigReader(data, path)
    model_type = config.table.raw("model_type", ..., str)
    reader = READERS.get(model_type)
    if reader is None:
        raise config.error("model_type", f"'{model_type}' is not supported (supported: {', '.join(sorted(READERS))})")
    fields = reader(config)
    output_bias = fields.pop("attention_output_bias")
    max_context = fields.pop("max_context")
    try:
        parameters = count_parameters(**fields, attention_output_bias=output_bias)
    except InputError as error:
        raise CatalogError(f"{path}: {error}") from None
    name = _model_name(config, path)
    counted = f"{parameters.total:,} parameters counted by vramopt.models.parameters from the config"
    if model_type == "deepseek_v3":
        counted += " (multi-token-prediction module excluded)"
    return ModelSpec(
        name=name,
        display_name=name,
        aliases=(),
        family=model_type,
        max_context=max_context,
        moe=fields.pop("moe", None),
        mla=fields.pop("mla", None),
        parameters=parameters,
        published_params_total=None,
        published_params_active=None,
        sources={
            "architecture": f"{path} (Hugging Face config.json, model_type '{model_type}')",
            "params_total": counted,
        },
        notes="imported from a Hugging Face config.json",
        **fields,
    )

