"""Typed access to the keys of a Hugging Face ``config.json``, and the helpers the family
readers (``hf_families.py``) share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramopt.catalog_files import TableReader
from vramopt.errors import CatalogError
from vramopt.models.parameters import LayerExtras
from vramopt.types import MAX_COUNT, MoeSpec


class ConfigReader:
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

    def refuse_if(self, key: str, value: Any, why: str) -> None:
        """Refuse a key whose value changes the architecture in a way not counted."""
        if self.data.get(key) == value:
            raise self.error(key, f"is {value!r}: {why} is not supported")

    def layer_indices(self, key: str, layers: int) -> tuple[int, ...]:
        """A list of 0-based layer indices (absent or null: none)."""
        indices = self.data.get(key) or []
        if not isinstance(indices, list) or not all(
            isinstance(index, int) and not isinstance(index, bool) and 0 <= index < layers for index in indices
        ):
            raise self.error(key, f"must be a list of layer indices in [0, {layers})")
        return tuple(sorted(set(indices)))


def head_dim(config: ConfigReader, hidden_size: int, heads: int, heads_key: str, allow_key: bool) -> int:
    if allow_key and config.present("head_dim"):
        return config.size("head_dim")
    if hidden_size % heads != 0:
        raise config.error(heads_key, f"({heads}) must divide the hidden size ({hidden_size})")
    return hidden_size // heads


def kv_heads(config: ConfigReader, heads: int, key: str = "num_key_value_heads") -> int:
    value = config.size(key, default=heads)
    if heads % value != 0:
        raise config.error(key, f"({value}) must divide num_attention_heads ({heads})")
    return value


def moe(config: ConfigReader, experts_key: str, **values: Any) -> MoeSpec:
    spec = MoeSpec(**values)
    if spec.experts_per_token > spec.experts:
        raise config.error("num_experts_per_tok", f"({spec.experts_per_token}) exceeds {experts_key} ({spec.experts})")
    return spec


def decoder_fields(
    config: ConfigReader,
    *,
    qkv_bias: bool,
    output_bias: bool,
    mlp_bias: bool = False,
    tied_default: bool = False,
    ffn_key: str = "intermediate_size",
    gated: bool = True,
    norm: str = "rmsnorm",
    extras: LayerExtras | None = None,
    head_dim_key: bool = True,
    head_dim_default: int | None = None,
) -> dict[str, Any]:
    """The fields of a rotary decoder with separate Q/K/V/O projections (Llama and most since).

    The biases, the norm, the MLP kind and the extras are the family's, passed by its reader.
    ``head_dim_key``: the family reads a ``head_dim`` key (else hidden / heads);
    ``head_dim_default``: its value when the key is absent (Gemma: 256, not hidden / heads).
    """
    hidden_size = config.size("hidden_size")
    heads = config.size("num_attention_heads")
    if head_dim_default is not None and head_dim_key:
        width = config.size("head_dim", default=head_dim_default)
    else:
        width = head_dim(config, hidden_size, heads, "num_attention_heads", allow_key=head_dim_key)
    return dict(
        layers=config.size("num_hidden_layers"),
        hidden_size=hidden_size,
        heads=heads,
        kv_heads=kv_heads(config, heads),
        head_dim=width,
        ffn_hidden_size=config.size(ffn_key),
        vocab_size=config.size("vocab_size"),
        max_context=config.size("max_position_embeddings"),
        gated_mlp=gated,
        tied_embeddings=config.flag("tie_word_embeddings", tied_default),
        attention_bias=qkv_bias,
        attention_output_bias=output_bias,
        mlp_bias=mlp_bias,
        norm=norm,
        learned_positions=0,
        extras=extras or LayerExtras(),
    )
