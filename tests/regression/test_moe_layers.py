"""Issue 11 item 15: one rule decides which layers are mixture-of-experts, for every caller.

Before the fix ``models/parameters.py`` counted layer i as MoE when ``(i + 1) % interval ==
0`` (from layer 0), while ``costs/activations.py`` (and ``costs/lora.py``) counted from the
first MoE-eligible layer: 48 layers, first_dense_layers=1, interval 2 gave 24 MoE layers
for the parameter count and 23 for the activations. Now ``parameters.moe_layer_indices``
is the only rule and it states each framework's own convention through
``moe_layer_offset``; the golden cases below are published configs.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from vramopt.costs.activations import activation_shape
from vramopt.costs.lora import adapter_parameters
from vramopt.models import load_config_json, load_model
from vramopt.models.parameters import count_parameters, moe_layer_indices
from vramopt.types import MoeSpec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"


def _with_moe(model_name: str, moe: MoeSpec):
    """A catalog model with another MoE layout, its parameter count recomputed."""
    model = load_model(model_name)
    parameters = count_parameters(
        layers=model.layers, hidden_size=model.hidden_size, heads=model.heads, kv_heads=model.kv_heads,
        head_dim=model.head_dim, ffn_hidden_size=model.ffn_hidden_size, vocab_size=model.vocab_size,
        gated_mlp=model.gated_mlp, tied_embeddings=model.tied_embeddings, attention_bias=model.attention_bias,
        mlp_bias=model.mlp_bias, norm=model.norm, learned_positions=model.learned_positions, moe=moe,
    )
    return replace(model, moe=moe, parameters=parameters)


def _moe_layers_seen_by_activations(model) -> float:
    """Invert activation_shape's per-layer MLP average to the MoE layer count it used.

    Maverick and DeepSeek-V3 are built so that a token passes through as wide an MLP in an
    MoE layer as in a dense one (16384 and 18432), which makes the average blind to the
    count; widening the routed experts (same layout) makes it visible."""
    model = replace(model, moe=replace(model.moe, expert_ffn_hidden_size=model.moe.expert_ffn_hidden_size + 1024))
    moe = model.moe
    h = model.hidden_size
    matrices = 3.0 if model.gated_mlp else 2.0
    attention = 4.0 * model.heads * model.head_dim / h + 4.0 * model.kv_heads * model.head_dim / h
    dense = 2.0 * matrices * model.ffn_hidden_size / h
    sparse = 2.0 * matrices * (moe.experts_per_token * moe.expert_ffn_hidden_size
                               + moe.shared_experts * moe.shared_expert_ffn_hidden_size) / h
    mlp_average = activation_shape(model).sharded_sbh - attention
    return (mlp_average - dense) * model.layers / (sparse - dense)


def _moe_layers_seen_by_parameters(model) -> float:
    """Invert the parameter count to the MoE layer count it used (each MoE layer adds the
    router and experts and drops the dense MLP). Valid for Llama-style models: no biases,
    RMSNorm, rotary positions, untied head."""
    moe = model.moe
    h = model.hidden_size
    matrices = 3 if model.gated_mlp else 2
    dense_mlp = matrices * h * model.ffn_hidden_size
    moe_mlp = h * moe.experts + (moe.experts + moe.shared_experts) * matrices * h * moe.expert_ffn_hidden_size
    attention = 2 * model.heads * model.head_dim * h + 2 * model.kv_heads * model.head_dim * h
    per_layer_norms = 2 * h
    embedding = model.vocab_size * h * (1 if model.tied_embeddings else 2)
    dense_total = embedding + h + model.layers * (attention + per_layer_norms + dense_mlp)
    return (model.parameters.total - dense_total) / (moe_mlp - dense_mlp)


def test_issue_example_48_layers_first_dense_1_interval_2_is_one_count_everywhere():
    """issue 11 item 15: the issue's own example gives the same count in every caller."""
    # Maverick's shapes with the issue's layout: DeepSeek convention (offset 0), layer 0 dense.
    moe = MoeSpec(experts=128, experts_per_token=1, expert_ffn_hidden_size=8192, shared_experts=1,
                  shared_expert_ffn_hidden_size=8192, moe_layer_interval=2, first_dense_layers=1)
    model = _with_moe("llama-4-maverick", moe)
    # i >= 1 and i % 2 == 0: layers 2, 4, ..., 46.
    assert moe_layer_indices(48, moe) == tuple(range(2, 48, 2))
    assert len(moe_layer_indices(48, moe)) == 23
    assert _moe_layers_seen_by_parameters(model) == pytest.approx(23)
    assert _moe_layers_seen_by_activations(model) == pytest.approx(23)


def test_lora_adapters_use_the_same_moe_layers():
    """issue 11 item 15: LoRA counts adapters over the same MoE layers."""
    moe = MoeSpec(experts=4, experts_per_token=1, expert_ffn_hidden_size=8192, moe_layer_interval=2,
                  first_dense_layers=1)
    model = _with_moe("llama-4-maverick", moe)
    rank = 8
    h = model.hidden_size
    attention = rank * ((h + 40 * 128) * 2 + (h + 8 * 128) * 2)
    expert = rank * 3 * (h + 8192)
    dense = rank * 3 * (h + model.ffn_hidden_size)
    moe_layers = 23
    expected = 48 * attention + moe_layers * 4 * expert + (48 - moe_layers) * dense
    assert adapter_parameters(model, rank) == expected


def test_deepseek_v3_has_58_moe_layers():
    """issue 11 item 15, golden: DeepSeek-V3. deepseek-ai/DeepSeek-V3 config.json:
    num_hidden_layers 61, first_k_dense_replace 3, moe_layer_freq 1; vLLM
    model_executor/models/deepseek_v2.py DeepseekV2DecoderLayer: MoE iff layer_idx >=
    first_k_dense_replace and layer_idx % moe_layer_freq == 0. 61 - 3 = 58 MoE layers."""
    catalog = load_model("deepseek-v3")
    imported = load_config_json(FIXTURES / "deepseek-v3" / "config.json")
    for model in (catalog, imported):
        assert moe_layer_indices(model.layers, model.moe) == tuple(range(3, 61))
        assert _moe_layers_seen_by_activations(model) == pytest.approx(58)


def test_llama_4_maverick_has_24_moe_layers():
    """issue 11 item 15, golden: Llama 4 Maverick. meta-llama/Llama-4-Maverick-17B-128E
    config.json text_config: num_hidden_layers 48, interleave_moe_layer_step 2;
    transformers models/llama4/configuration_llama4.py: moe_layers = range(step - 1,
    num_hidden_layers, step) = 1, 3, ..., 47: 24 MoE layers."""
    model = load_model("llama-4-maverick")
    assert moe_layer_indices(48, model.moe) == tuple(range(1, 48, 2))
    assert _moe_layers_seen_by_activations(model) == pytest.approx(24)
    assert _moe_layers_seen_by_parameters(model) == pytest.approx(24)


def test_qwen2_moe_sparse_step_and_mlp_only_layers(tmp_path):
    """issue 11 item 15: transformers models/qwen2_moe/modeling_qwen2_moe.py
    Qwen2MoeDecoderLayer: MoE iff layer_idx not in mlp_only_layers and (layer_idx + 1) %
    decoder_sparse_step == 0. Qwen1.5-MoE-A2.7B's 24 layers with step 2 and
    mlp_only_layers [3]: layers 1, 5, 7, ..., 23, eleven MoE layers."""
    config = json.loads((FIXTURES / "qwen1.5-moe-a2.7b" / "config.json").read_text())
    config.update(decoder_sparse_step=2, mlp_only_layers=[3])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    model = load_config_json(path)
    expected = tuple(index for index in range(1, 24, 2) if index != 3)
    assert moe_layer_indices(24, model.moe) == expected and len(expected) == 11
    assert _moe_layers_seen_by_activations(model) == pytest.approx(11)


def test_deepseek_moe_layer_freq_2_follows_the_deepseek_rule(tmp_path):
    """issue 11 item 15: DeepSeek's rule with moe_layer_freq 2 and first_k_dense_replace 1
    over 48 layers (the issue's example): layers 2, 4, ..., 46, 23 MoE layers."""
    config = json.loads((FIXTURES / "deepseek-v3" / "config.json").read_text())
    config.update(num_hidden_layers=48, first_k_dense_replace=1, moe_layer_freq=2)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    model = load_config_json(path)
    assert moe_layer_indices(48, model.moe) == tuple(range(2, 48, 2))
