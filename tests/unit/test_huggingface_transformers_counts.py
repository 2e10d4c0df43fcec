"""Issue 15 build item 3: for every supported family, vramopt's native count of a config.json
equals the parameters of ``transformers.AutoModelForCausalLM.from_config`` built on the meta
device (no memory, no download). Skips where transformers is not installed; the
``transformers`` extra (in CI's ``frameworks`` install) has it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.test_huggingface_architectures import TRANSFORMERS_TOTAL
from vramopt.models import load_config_json

torch = pytest.importorskip("torch", reason="the transformers count needs torch (the frameworks extra)")
transformers = pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[transformers]')")

FIXTURES = Path(__file__).parent.parent / "fixtures" / "hf_configs"


def transformers_count(path: Path) -> int:
    data = json.loads(path.read_text())
    # from_config never quantizes; the logical parameters are those of the architecture.
    data.pop("quantization_config", None)
    config = transformers.AutoConfig.for_model(**data)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(parameter.numel() for parameter in model.parameters())


@pytest.mark.parametrize("folder", sorted(TRANSFORMERS_TOTAL))
def test_native_count_equals_transformers_on_the_meta_device(folder):
    path = FIXTURES / folder / "config.json"
    counted = transformers_count(path)
    assert load_config_json(path).params_total == counted
    # The recorded figure the transformers-free test uses is what transformers builds.
    assert TRANSFORMERS_TOTAL[folder] == counted


def test_the_count_moves_with_each_family_specific_key(tmp_path):
    """A change of one family-specific key changes both counts alike (the readers read it)."""
    cases = [
        ("qwen3-8b", {"attention_bias": True}),
        ("gemma-3-1b", {"head_dim": 128}),
        ("falcon-7b", {"parallel_attn": False}),
        ("falcon-40b", {"num_ln_in_parallel_attn": 1}),
        ("opt-350m", {"do_layer_norm_before": True}),
        ("phi-2", {"qk_layernorm": True}),
        ("gpt-oss-20b", {"attention_bias": False}),
        ("llama-4-scout-text", {"interleave_moe_layer_step": 2}),
        ("llama-4-scout-text", {"moe_layers": [1, 5, 9]}),
        ("qwen3-30b-a3b", {"mlp_only_layers": [0, 47], "decoder_sparse_step": 2}),
        ("qwen1.5-moe-a2.7b", {"qkv_bias": False}),
        ("deepseek-v2-lite", {"q_lora_rank": 768, "first_k_dense_replace": 3}),
        ("starcoder2-15b", {"use_bias": False}),
        ("granite-3.1-8b", {"mlp_bias": True, "tie_word_embeddings": False}),
    ]
    for folder, change in cases:
        data = {**json.loads((FIXTURES / folder / "config.json").read_text()), **change}
        path = tmp_path / f"{folder}-{len(list(tmp_path.iterdir()))}" / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(data))
        assert load_config_json(path).params_total == transformers_count(path), (folder, change)
        assert load_config_json(path).params_total != TRANSFORMERS_TOTAL[folder], (folder, change)
