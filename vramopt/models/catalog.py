"""Strict loader of the model catalog (``vramopt/models/catalog/<name>.toml``).

Every key of the schema is required except the optional tables ``[moe]`` and ``[mla]`` and
``published.params_active`` (required for MoE models). Unknown keys, missing keys, wrong
types and inconsistent dimensions raise ``CatalogError`` naming the file and the key. The
parameter count is computed from the dimensions (``parameters.count_parameters``), never
read from the file; the publisher's figures go to ``[published]`` for the tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from vramopt.catalog_files import TableReader, read_toml
from vramopt.errors import CatalogError, InputError
from vramopt.models.parameters import NORM_KINDS, count_parameters
from vramopt.types import MlaSpec, MoeSpec, ModelSpec

CATALOG_DIRECTORY = Path(__file__).parent / "catalog"

REQUIRED_SOURCES = ("architecture", "params_total")


def _layer_indices(reader: TableReader, key: str) -> tuple[int, ...]:
    values = reader.raw(key, ..., list)
    if not all(isinstance(value, int) and not isinstance(value, bool) and value >= 0 for value in values):
        raise reader.error(key, "must be a list of non-negative layer indices")
    if len(set(values)) != len(values):
        raise reader.error(key, "repeats a layer index")
    return tuple(sorted(values))


def _read_moe(reader: TableReader | None) -> MoeSpec | None:
    if reader is None:
        return None
    moe = MoeSpec(
        experts=reader.integer("experts", minimum=1),
        experts_per_token=reader.integer("experts_per_token", minimum=1),
        expert_ffn_hidden_size=reader.integer("expert_ffn_hidden_size", minimum=1),
        shared_experts=reader.integer("shared_experts", minimum=0),
        shared_expert_ffn_hidden_size=reader.integer("shared_expert_ffn_hidden_size", minimum=0),
        moe_layer_interval=reader.integer("moe_layer_interval", minimum=1),
        first_dense_layers=reader.integer("first_dense_layers", minimum=0),
        moe_layer_offset=reader.integer("moe_layer_offset", minimum=0),
        dense_layer_indices=_layer_indices(reader, "dense_layer_indices"),
    )
    reader.finish()
    if moe.moe_layer_offset >= moe.moe_layer_interval:
        raise reader.error("moe_layer_offset", f"must be less than moe_layer_interval ({moe.moe_layer_interval})")
    if moe.experts_per_token > moe.experts:
        raise reader.error("experts_per_token", f"({moe.experts_per_token}) exceeds experts ({moe.experts})")
    if moe.shared_experts > 0 and moe.shared_expert_ffn_hidden_size == 0:
        raise reader.error("shared_expert_ffn_hidden_size", "must be positive when shared_experts > 0")
    return moe


def _read_mla(reader: TableReader | None) -> MlaSpec | None:
    if reader is None:
        return None
    mla = MlaSpec(
        q_lora_rank=reader.integer("q_lora_rank", minimum=0),
        kv_lora_rank=reader.integer("kv_lora_rank", minimum=1),
        qk_nope_head_dim=reader.integer("qk_nope_head_dim", minimum=1),
        qk_rope_head_dim=reader.integer("qk_rope_head_dim", minimum=1),
        v_head_dim=reader.integer("v_head_dim", minimum=1),
    )
    reader.finish()
    return mla


def _read_sources(reader: TableReader) -> dict[str, str]:
    sources = {key: reader.text(key) for key in reader.table}
    for key in REQUIRED_SOURCES:
        if key not in sources:
            raise reader.error(key, "is missing")
    reader.finish()
    return sources


def _read_published(reader: TableReader, is_moe: bool) -> tuple[float, float | None]:
    total, _ = reader.sourced("params_total")
    active: float | None = None
    if reader.has("params_active"):
        active, _ = reader.sourced("params_active")
    elif is_moe:
        raise reader.error("params_active", "is missing (required for a mixture-of-experts model)")
    reader.finish()
    for key, value in (("params_total", total), ("params_active", active)):
        if value is not None and value <= 0:
            raise reader.error(key, f"must be positive, got {value}")
    return total, active


def parse_model_file(path: Path) -> ModelSpec:
    """Read one model catalog file; the name in it must equal the file's stem."""
    path = Path(path)
    top = TableReader(read_toml(path), path)

    name = top.text("name")
    if name != path.stem:
        raise top.error("name", f"is '{name}' but the file is named '{path.name}' (they must match)")
    aliases = top.strings("aliases")
    for alias in aliases:
        if not alias.strip():
            raise top.error("aliases", "contains an empty alias")
    lowered = [alias.lower() for alias in aliases]
    if len(set(lowered)) != len(lowered) or name.lower() in lowered:
        raise top.error("aliases", "repeats a name (aliases are compared case-insensitively)")

    norm = top.text("norm")
    if norm not in NORM_KINDS:
        raise top.error("norm", f"must be one of {', '.join(NORM_KINDS)}, got '{norm}'")

    dimensions = dict(
        layers=top.integer("layers", minimum=1),
        hidden_size=top.integer("hidden_size", minimum=1),
        heads=top.integer("heads", minimum=1),
        kv_heads=top.integer("kv_heads", minimum=1),
        head_dim=top.integer("head_dim", minimum=1),
        ffn_hidden_size=top.integer("ffn_hidden_size", minimum=1),
        vocab_size=top.integer("vocab_size", minimum=1),
        gated_mlp=top.boolean("gated_mlp"),
        tied_embeddings=top.boolean("tied_embeddings"),
        attention_bias=top.boolean("attention_bias"),
        mlp_bias=top.boolean("mlp_bias"),
        norm=norm,
        learned_positions=top.integer("learned_positions", minimum=0),
    )
    if dimensions["heads"] % dimensions["kv_heads"] != 0:
        raise top.error("kv_heads", f"({dimensions['kv_heads']}) must divide heads ({dimensions['heads']})")

    moe = _read_moe(top.sub("moe", None))
    if moe is not None and moe.first_dense_layers >= dimensions["layers"]:
        raise top.error("moe.first_dense_layers", f"must be less than layers ({dimensions['layers']})")
    mla = _read_mla(top.sub("mla", None))
    sources_reader = top.sub("sources")
    sources = _read_sources(sources_reader)
    published_total, published_active = _read_published(top.sub("published"), moe is not None)

    spec_text = dict(
        display_name=top.text("display_name"),
        family=top.text("family"),
        notes=top.raw("notes", ..., str),
        max_context=top.integer("max_context", minimum=1),
    )
    top.finish()

    try:
        parameters = count_parameters(**dimensions, moe=moe, mla=mla)
    except InputError as error:
        raise CatalogError(f"{path}: {error}") from None

    return ModelSpec(
        name=name,
        aliases=tuple(aliases),
        moe=moe,
        mla=mla,
        parameters=parameters,
        published_params_total=published_total,
        published_params_active=published_active,
        sources=sources,
        **dimensions,
        **spec_text,
    )


def parse_catalog(paths: Iterable[Path]) -> dict[str, ModelSpec]:
    """Parse several catalog files; names and aliases must be unique across them.

    Returns the models keyed by name, in file-name order. A name or alias claimed by two
    files (compared case-insensitively) raises ``CatalogError`` naming both files.
    """
    models: dict[str, ModelSpec] = {}
    owner: dict[str, Path] = {}
    for path in sorted(Path(path) for path in paths):
        spec = parse_model_file(path)
        for label in (spec.name, *spec.aliases):
            key = label.lower()
            if key in owner:
                raise CatalogError(f"{path}: name or alias '{label}' is already used by {owner[key]}")
            owner[key] = path
        models[spec.name] = spec
    return models


def load_catalog_directory(directory: Path = CATALOG_DIRECTORY) -> dict[str, ModelSpec]:
    """Every ``*.toml`` model file of a directory (the packaged catalog by default)."""
    return parse_catalog(Path(directory).glob("*.toml"))
