"""Import of Hugging Face config.json files (vramopt.models.huggingface)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramopt.errors import CatalogError
from vramopt.models import load_model
from vramopt.models.huggingface import MAX_CONFIG_FILE_BYTES, load_config_json

FIXTURES = Path(__file__).parent.parent / "fixtures" / "hf_configs"

# Published counts (tolerance 1%). Each fixture holds the architecture keys of the public
# config.json of that model.
PUBLISHED = {
    # folder: (total, active or None, source)
    "gpt2": (124.4e6, None, "GPT-2 small incl. the 1024-row position table (124,439,808)"),
    "gpt-neox-20b": (20.55e9, None, "Black et al. 2022, GPT-NeoX-20B: 20,554,567,680 parameters"),
    "mistral-7b-v0.1": (7.24e9, None, "Hugging Face model page mistralai/Mistral-7B-v0.1: 7.24B params"),
    "llama-3.1-8b": (8.03e9, None, "Hugging Face model page meta-llama/Llama-3.1-8B: 8.03B params"),
    "mixtral-8x7b-v0.1": (46.7e9, 12.9e9, "Mistral AI announcement: 46.7B total, 12.9B per token"),
    "qwen2.5-72b": (72.7e9, None, "Qwen/Qwen2.5-72B model card: 72.7B"),
    "opt-13b": (12.85e9, None, "Hugging Face model page facebook/opt-13b: 12.85e9 in the checkpoint"),
    "qwen1.5-moe-a2.7b": (14.3e9, 2.7e9, "Qwen1.5-MoE-A2.7B blog: 14.3B total, 2.7B activated"),
    "deepseek-v3": (671e9, None, "DeepSeek-V3 Technical Report: 671B total (MTP module excluded)"),
}


@pytest.mark.parametrize("folder", sorted(PUBLISHED))
def test_imported_count_matches_published(folder):
    total, active, _source = PUBLISHED[folder]
    spec = load_config_json(FIXTURES / folder / "config.json")
    assert spec.params_total == pytest.approx(total, rel=0.01)
    if active is not None:
        assert spec.params_active == pytest.approx(active, rel=0.01)
        assert spec.params_active < spec.params_total
    assert spec.sources["architecture"] and spec.sources["params_total"]


@pytest.mark.parametrize(
    "folder, catalog_name",
    [
        ("llama-3.1-8b", "llama-3.1-8b"),
        ("mixtral-8x7b-v0.1", "mixtral-8x7b"),
        ("qwen2.5-72b", "qwen2.5-72b"),
        ("opt-13b", "opt-13b"),
        ("deepseek-v3", "deepseek-v3"),
    ],
)
def test_import_agrees_exactly_with_the_catalog(folder, catalog_name):
    imported = load_config_json(FIXTURES / folder / "config.json")
    catalog = load_model(catalog_name)
    assert imported.parameters == catalog.parameters
    for field in ("layers", "hidden_size", "heads", "kv_heads", "head_dim", "vocab_size", "moe", "mla",
                  "tied_embeddings", "learned_positions", "norm", "gated_mlp"):
        assert getattr(imported, field) == getattr(catalog, field), field


def test_family_specific_mappings():
    gpt2 = load_config_json(FIXTURES / "gpt2" / "config.json")
    assert gpt2.ffn_hidden_size == 4 * 768 and gpt2.tied_embeddings and gpt2.learned_positions == 1024
    neox = load_config_json(FIXTURES / "gpt-neox-20b" / "config.json")
    assert not neox.tied_embeddings and neox.learned_positions == 0 and neox.norm == "layernorm"
    opt = load_config_json(FIXTURES / "opt-13b" / "config.json")
    assert opt.learned_positions == 2048 + 2 and opt.max_context == 2048
    qwen = load_config_json(FIXTURES / "qwen2.5-72b" / "config.json")
    assert qwen.attention_bias and not qwen.mlp_bias
    mistral = load_config_json(FIXTURES / "mistral-7b-v0.1" / "config.json")
    assert mistral.head_dim == 128 and mistral.kv_heads == 8
    deepseek = load_config_json(FIXTURES / "deepseek-v3" / "config.json")
    assert deepseek.head_dim == 192 and deepseek.moe.first_dense_layers == 3


def test_name_comes_from_name_or_path_else_folder():
    assert load_config_json(FIXTURES / "llama-3.1-8b" / "config.json").name == "meta-llama/Llama-3.1-8B"
    assert load_config_json(FIXTURES / "gpt2" / "config.json").name == "gpt2"


def test_load_model_routes_paths(tmp_path):
    assert load_model(str(FIXTURES / "gpt2")).family == "gpt2"
    assert load_model(str(FIXTURES / "gpt2" / "config.json")).family == "gpt2"
    with pytest.raises(CatalogError, match="cannot read"):
        load_model(str(tmp_path / "absent.json"))
    with pytest.raises(CatalogError, match="config.json: cannot read"):
        load_model(str(tmp_path))  # an existing folder without a config.json


def test_llama_attention_bias_includes_output_projection(tmp_path):
    base = json.loads((FIXTURES / "llama-3.1-8b" / "config.json").read_text())
    plain = load_config_json(FIXTURES / "llama-3.1-8b" / "config.json")
    path = tmp_path / "biased" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**base, "attention_bias": True}))
    biased = load_config_json(path)
    # q (4096) + k, v (1024 each) + o (4096) per layer.
    assert biased.params_total - plain.params_total == 32 * (4096 + 2 * 1024 + 4096)


# --- malformed files -----------------------------------------------------------------------

LLAMA = json.loads((FIXTURES / "llama-3.1-8b" / "config.json").read_text())
GPT2 = json.loads((FIXTURES / "gpt2" / "config.json").read_text())
OPT = json.loads((FIXTURES / "opt-13b" / "config.json").read_text())
MIXTRAL = json.loads((FIXTURES / "mixtral-8x7b-v0.1" / "config.json").read_text())


def without(config: dict, key: str) -> dict:
    return {name: value for name, value in config.items() if name != key}


@pytest.mark.parametrize(
    "config, key",
    [
        (without(LLAMA, "hidden_size"), "hidden_size"),
        (without(LLAMA, "model_type"), "model_type"),
        ({**LLAMA, "hidden_size": "4096"}, "hidden_size"),
        ({**LLAMA, "hidden_size": 4096.0}, "hidden_size"),
        ({**LLAMA, "num_hidden_layers": True}, "num_hidden_layers"),
        ({**LLAMA, "tie_word_embeddings": "no"}, "tie_word_embeddings"),
        ({**LLAMA, "model_type": "t5"}, "model_type"),
        ({**LLAMA, "model_type": 7}, "model_type"),
        ({**LLAMA, "num_hidden_layers": 0}, "num_hidden_layers"),
        ({**LLAMA, "vocab_size": -5}, "vocab_size"),
        ({**LLAMA, "num_key_value_heads": 5}, "num_key_value_heads"),
        ({**without(LLAMA, "head_dim"), "num_attention_heads": 48}, "num_attention_heads"),
        ({**GPT2, "n_head": 7}, "n_head"),
        (without(GPT2, "n_positions"), "n_positions"),
        ({**OPT, "layer_norm_elementwise_affine": False}, "layer_norm_elementwise_affine"),
        ({**MIXTRAL, "num_experts_per_tok": 9}, "num_experts_per_tok"),
        (without(MIXTRAL, "num_local_experts"), "num_local_experts"),
    ],
)
def test_malformed_config_names_file_and_key(tmp_path, config, key):
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    with pytest.raises(CatalogError) as caught:
        load_config_json(path)
    message = str(caught.value)
    assert str(path) in message and f"'{key}'" in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    "content, phrase",
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2, 3]", "must be a JSON object"),
        (b'"llama"', "must be a JSON object"),
        (b'{"model_type": "llama", "hidden_size": NaN}', "not valid JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"", "not valid JSON"),
    ],
)
def test_unreadable_config_raises_catalog_error(tmp_path, content, phrase):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(CatalogError) as caught:
        load_config_json(path)
    message = str(caught.value)
    assert str(path) in message and phrase in message and "\n" not in message


def test_oversized_config_is_refused(tmp_path):
    path = tmp_path / "config.json"
    padding = " " * (MAX_CONFIG_FILE_BYTES + 10)
    path.write_text(json.dumps(LLAMA) + padding)
    with pytest.raises(CatalogError, match="larger than"):
        load_config_json(path)
