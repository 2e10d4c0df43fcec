"""Model catalog and Hugging Face config.json import.

``load_model`` accepts a catalog name or alias (case-insensitive), or a path to a
Hugging Face ``config.json`` (or a folder holding one).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from vramopt.catalog_files import suggest
from vramopt.models.catalog import load_catalog_directory, parse_model_file
from vramopt.models.huggingface import load_config_json
from vramopt.models.parameters import count_parameters, moe_layer_indices
from vramopt.types import ModelSpec

__all__ = [
    "all_models",
    "count_parameters",
    "load_config_json",
    "load_model",
    "model_names",
    "moe_layer_indices",
    "parse_model_file",
]

HF_CONFIG_FILE_NAME = "config.json"


@lru_cache(maxsize=1)
def _catalog() -> tuple[tuple[ModelSpec, ...], dict[str, ModelSpec]]:
    """The packaged catalog, read once: the models in name order and a lowercase index."""
    models = load_catalog_directory()
    index: dict[str, ModelSpec] = {}
    for spec in models.values():
        for label in (spec.name, *spec.aliases):
            index[label.lower()] = spec
    return tuple(models[name] for name in sorted(models)), index


def all_models() -> tuple[ModelSpec, ...]:
    """Every catalog model, in name order."""
    return _catalog()[0]


def model_names() -> tuple[str, ...]:
    """Catalog names (not aliases), sorted."""
    return tuple(spec.name for spec in all_models())


def load_model(name_or_path: str) -> ModelSpec:
    """A catalog model by name or alias, or a model imported from a config.json.

    Resolution order: a string ending in ``.json`` is a config file; otherwise a catalog
    name or alias, compared case-insensitively; otherwise an existing file (a config.json
    under another name) or folder (its ``config.json``). Anything else raises
    ``UnknownNameError`` listing close catalog names. Write ``./name`` to reach a local
    folder whose name is also a catalog alias.
    """
    path = Path(name_or_path)
    if name_or_path.strip().lower().endswith(".json"):
        return load_config_json(path)
    _, index = _catalog()
    spec = index.get(name_or_path.strip().lower())
    if spec is not None:
        return spec
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except OSError:  # e.g. a name longer than the file system allows: not a path
        is_dir = is_file = False
    if is_dir:
        return load_config_json(path / HF_CONFIG_FILE_NAME)
    if is_file:
        return load_config_json(path)
    raise suggest(name_or_path, index, "model")
