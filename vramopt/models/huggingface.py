"""Import a model from a Hugging Face ``config.json``.

Natively (no transformers import, so the CLI stays fast): one reader per supported
``model_type`` in ``hf_families.READERS`` (deepseek_v2, deepseek_v3, falcon, gemma, gemma2,
gemma3_text, gpt2, gpt_neox, gpt_oss, granite, llama, llama4_text, mistral, mixtral, olmo2,
opt, phi, phi3, qwen2, qwen2_moe, qwen3, qwen3_moe, starcoder2), reading the keys of the
transformers configuration class of that family with its defaults. The parameter count equals
``AutoModelForCausalLM.from_config`` on the meta device for every family
(``tests/unit/test_huggingface_transformers_counts.py``).

A ``quantization_config`` gives the checkpoint's weight format (``checkpoint_quantization.py``).
Encoder-decoder, encoder-only, state-space and vision-language configs are refused with what
vramopt does not model (``UNSUPPORTED_KINDS``). Any malformed file raises ``CatalogError`` with
one line naming the file and the key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from vramopt.catalog_files import MAX_CATALOG_FILE_BYTES
from vramopt.errors import CatalogError, InputError
from vramopt.input_files import display_path, parse_json, read_bounded
from vramopt.models.checkpoint_quantization import read_quantization
from vramopt.models.hf_config_reader import ConfigReader
from vramopt.models.hf_families import READERS
from vramopt.models.parameters import count_parameters
from vramopt.types import ModelSpec

MAX_CONFIG_FILE_BYTES = MAX_CATALOG_FILE_BYTES
"""A config.json is a few kilobytes; refuse anything over ~1 MB rather than parse it."""

_ENCODER_DECODER = "is an encoder-decoder model: its encoder and cross-attention are not modelled (decoder-only transformers only)"
_ENCODER_ONLY = "is an encoder-only model: bidirectional encoders without a causal language-model head are not modelled"
_STATE_SPACE = "has state-space / recurrent layers, which are not modelled (attention decoders only)"
_VISION = "is a vision-language model: its vision encoder (vision_config) and projector are not modelled"

UNSUPPORTED_KINDS = {
    **dict.fromkeys(("t5", "mt5", "umt5", "longt5", "bart", "mbart", "pegasus", "marian", "whisper",
                     "encoder-decoder"), _ENCODER_DECODER),
    **dict.fromkeys(("bert", "roberta", "xlm-roberta", "deberta", "deberta-v2", "distilbert", "electra",
                     "modernbert"), _ENCODER_ONLY),
    **dict.fromkeys(("mamba", "mamba2", "falcon_mamba", "rwkv", "jamba", "zamba", "zamba2", "bamba",
                     "recurrent_gemma", "falcon_h1", "nemotron_h"), _STATE_SPACE),
    **dict.fromkeys(("llama4", "gemma3", "mllama", "llava", "llava_next", "qwen2_vl", "qwen2_5_vl",
                     "paligemma", "idefics3", "mistral3", "pixtral"), _VISION),
}
"""model_type -> what vramopt does not model in it (the refusal names it)."""


def _read_json(path: Path) -> dict[str, Any]:
    def fail(detail: str) -> CatalogError:
        return CatalogError(f"{display_path(path)}: {detail}")

    data = parse_json(read_bounded(path, MAX_CONFIG_FILE_BYTES, fail), fail, allow_constants=False)
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: the top level must be a JSON object, got {type(data).__name__}")
    return data


def _model_name(config: ConfigReader, path: Path) -> str:
    name = config.data.get("_name_or_path")
    if isinstance(name, str) and name.strip():
        return name.strip()
    folder = path.resolve().parent.name
    return folder or path.stem


def _refusal(config: ConfigReader, model_type: str) -> CatalogError:
    missing = UNSUPPORTED_KINDS.get(model_type)
    if missing is None:
        return config.error("model_type", f"'{model_type}' is not supported (supported: {', '.join(sorted(READERS))})")
    text_config = config.data.get("text_config")
    text_type = text_config.get("model_type") if isinstance(text_config, dict) else None
    if missing == _VISION and text_type in READERS:
        missing += f"; its text model is: save text_config as a config.json (model_type '{text_type}')"
    return config.error("model_type", f"'{model_type}' {missing}")


def load_config_json(path: Path | str) -> ModelSpec:
    """A ``ModelSpec`` from a Hugging Face config.json (architecture keys and quantization_config)."""
    path = Path(path)
    data = _read_json(path)
    config = ConfigReader(data, path)
    model_type = config.table.raw("model_type", ..., str)
    reader = READERS.get(model_type)
    if reader is None:
        raise _refusal(config, model_type)
    fields = reader(config)
    quantization = read_quantization(config)
    output_bias = fields.pop("attention_output_bias")
    max_context = fields.pop("max_context")
    extras = fields.pop("extras")
    try:
        parameters = count_parameters(**fields, attention_output_bias=output_bias, extras=extras)
    except InputError as error:
        raise CatalogError(f"{path}: {error}") from None
    name = _model_name(config, path)
    counted = f"{parameters.total:,} parameters counted by vramopt.models.parameters from the config"
    if model_type in ("deepseek_v2", "deepseek_v3"):
        counted += " (multi-token-prediction module excluded)"
    sources = {
        "architecture": f"{path} (Hugging Face config.json, model_type '{model_type}')",
        "params_total": counted,
    }
    if quantization is not None:
        sources["checkpoint_quantization"] = (
            f"{path} quantization_config: {quantization.method}, {quantization.weight_bits}-bit weights"
        )
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
        sources=sources,
        notes="imported from a Hugging Face config.json",
        checkpoint_quantization=quantization,
        **fields,
    )

