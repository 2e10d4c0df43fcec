"""Unit tests of the parameter-count formulas (vramopt.models.parameters)."""

from __future__ import annotations

import pytest

from vramopt.errors import InputError
from vramopt.models.parameters import (
    attention_parameters,
    count_parameters,
    mla_attention_parameters,
    mlp_parameters,
    moe_layer_indices,
    norm_parameters,
)
from vramopt.types import MlaSpec, MoeSpec


def gpt_style(layers: int, hidden: int, heads: int, vocab: int, positions: int, tied: bool = True):
    """A GPT-2/GPT-3-style model: plain 4h MLP, LayerNorm, biases everywhere, learned positions."""
    return count_parameters(
        layers=layers,
        hidden_size=hidden,
        heads=heads,
        kv_heads=heads,
        head_dim=hidden // heads,
        ffn_hidden_size=4 * hidden,
        vocab_size=vocab,
        gated_mlp=False,
        tied_embeddings=tied,
        attention_bias=True,
        mlp_bias=True,
        norm="layernorm",
        learned_positions=positions,
    )


def llama_style(layers, hidden, heads, kv_heads, ffn, vocab, **extra):
    return count_parameters(
        layers=layers,
        hidden_size=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=extra.pop("head_dim", hidden // heads),
        ffn_hidden_size=ffn,
        vocab_size=vocab,
        gated_mlp=True,
        tied_embeddings=False,
        attention_bias=extra.pop("attention_bias", False),
        mlp_bias=False,
        norm="rmsnorm",
        **extra,
    )


def test_narayanan_2021_equation_matches_gpt3_style_count():
    # Narayanan et al. 2021 (Efficient Large-Scale Language Model Training on GPU Clusters
    # Using Megatron-LM), section 5.1: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)).
    # The equation leaves out the final LayerNorm (2h); otherwise the counts are identical.
    for layers, hidden, heads, vocab, positions in [
        (96, 12288, 96, 50257, 2048),  # GPT-3 175B
        (24, 2048, 16, 51200, 2048),
        (128, 25600, 160, 51200, 2048),  # the paper's 1T configuration
    ]:
        count = gpt_style(layers, hidden, heads, vocab, positions)
        equation = 12 * layers * hidden**2 * (1 + 13 / (12 * hidden) + (vocab + positions) / (12 * layers * hidden))
        assert count.total - 2 * hidden == pytest.approx(equation, rel=1e-12)
        assert count.total == pytest.approx(equation, rel=1e-3)


def test_gpt2_small_exact():
    # GPT-2 124M: 124,439,808 parameters including the 1024-row position table.
    assert gpt_style(12, 768, 12, 50257, 1024).total == 124_439_808


def test_norms_and_mlp_and_attention_building_blocks():
    assert norm_parameters(4096, "rmsnorm") == 4096
    assert norm_parameters(4096, "layernorm") == 8192
    with pytest.raises(InputError, match="norm"):
        norm_parameters(4096, "batchnorm")
    assert mlp_parameters(10, 40, gated=True, bias=False) == 3 * 10 * 40
    assert mlp_parameters(10, 40, gated=False, bias=True) == 2 * 10 * 40 + 40 + 10
    assert mlp_parameters(10, 40, gated=True, bias=True) == 3 * 10 * 40 + 2 * 40 + 10
    # Llama-3.1-70B attention: Q and O 8192x8192, K and V 8192x1024.
    assert attention_parameters(8192, 64, 8, 128, qkv_bias=False, output_bias=False) == (
        2 * 8192 * 8192 + 2 * 8192 * 1024
    )
    # Qwen2: Q/K/V biases (8192 + 2 * 1024), no output bias.
    assert attention_parameters(8192, 64, 8, 128, qkv_bias=True, output_bias=False) == (
        2 * 8192 * 8192 + 2 * 8192 * 1024 + 8192 + 2 * 1024
    )


def test_output_projection_bias_default_follows_mlp_bias():
    common = dict(layers=1, hidden_size=64, heads=4, kv_heads=4, head_dim=16, ffn_hidden_size=256,
                  vocab_size=100, gated_mlp=False, tied_embeddings=True, norm="layernorm")
    qwen_like = count_parameters(**common, attention_bias=True, mlp_bias=False)
    gpt_like = count_parameters(**common, attention_bias=True, mlp_bias=True)
    plain_mlp_bias = 256 + 64
    assert gpt_like.total - qwen_like.total == plain_mlp_bias + 64  # MLP biases + o bias
    explicit = count_parameters(**common, attention_bias=True, mlp_bias=False, attention_output_bias=True)
    assert explicit.total - qwen_like.total == 64


def test_mla_matches_deepseek_v3_by_hand():
    mla = MlaSpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    expected = (
        7168 * 1536  # q_a
        + 1536  # q_a norm
        + 1536 * 128 * (128 + 64)  # q_b
        + 7168 * (512 + 64)  # kv_a (latent + shared rope key)
        + 512  # kv_a norm
        + 512 * 128 * (128 + 128)  # kv_b
        + 128 * 128 * 7168  # o
    )
    assert mla_attention_parameters(7168, 128, mla, "rmsnorm") == expected == 187_107_328
    no_query_rank = MlaSpec(q_lora_rank=0, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    assert mla_attention_parameters(7168, 128, no_query_rank, "rmsnorm") == (
        expected - (7168 * 1536 + 1536 + 1536 * 128 * 192) + 7168 * 128 * 192
    )


def test_moe_layer_indices():
    assert moe_layer_indices(4, None) == ()
    assert moe_layer_indices(4, MoeSpec(experts=8, experts_per_token=2, expert_ffn_hidden_size=1)) == (0, 1, 2, 3)
    # Llama 4 convention (offset = step - 1): layers 1, 3, ..., 47.
    interleaved = MoeSpec(experts=128, experts_per_token=1, expert_ffn_hidden_size=1, moe_layer_interval=2,
                          moe_layer_offset=1)
    assert moe_layer_indices(48, interleaved) == tuple(range(1, 48, 2))
    # DeepSeek convention (offset 0): layers 0, 2, ..., 46.
    even = MoeSpec(experts=128, experts_per_token=1, expert_ffn_hidden_size=1, moe_layer_interval=2)
    assert moe_layer_indices(48, even) == tuple(range(0, 48, 2))
    first_dense = MoeSpec(experts=256, experts_per_token=8, expert_ffn_hidden_size=1, first_dense_layers=3)
    assert moe_layer_indices(61, first_dense) == tuple(range(3, 61))
    forced_dense = MoeSpec(experts=8, experts_per_token=2, expert_ffn_hidden_size=1, dense_layer_indices=(0, 5))
    assert moe_layer_indices(6, forced_dense) == (1, 2, 3, 4)


def test_mixtral_total_active_and_largest_layer():
    moe = MoeSpec(experts=8, experts_per_token=2, expert_ffn_hidden_size=14336)
    count = llama_style(32, 4096, 32, 8, 14336, 32000, moe=moe)
    assert count.total == pytest.approx(46.7e9, rel=0.01)
    assert count.active == pytest.approx(12.9e9, rel=0.01)
    assert count.active < count.total
    expert = 3 * 4096 * 14336
    attention = 2 * 4096 * 4096 + 2 * 4096 * 1024
    assert count.largest_layer == attention + 2 * 4096 + 4096 * 8 + 8 * expert
    assert count.total - count.active == 32 * 6 * expert
    assert count.embedding == 2 * 32000 * 4096


def test_interleaved_moe_counts_dense_layers_with_dense_width():
    # Llama 4 Maverick: 24 dense layers of width 16384, 24 MoE layers (128 experts of 8192 + shared).
    moe = MoeSpec(experts=128, experts_per_token=1, expert_ffn_hidden_size=8192, shared_experts=1,
                  shared_expert_ffn_hidden_size=8192, moe_layer_interval=2, moe_layer_offset=1)
    count = llama_style(48, 5120, 40, 8, 16384, 202048, head_dim=128, moe=moe)
    attention = 2 * 5120 * 5120 + 2 * 5120 * 1024
    dense_layer = attention + 2 * 5120 + 3 * 5120 * 16384
    moe_layer = attention + 2 * 5120 + 5120 * 128 + 129 * 3 * 5120 * 8192
    assert count.total == 2 * 202048 * 5120 + 5120 + 24 * dense_layer + 24 * moe_layer
    assert count.largest_layer == moe_layer
    assert count.total == pytest.approx(400e9, rel=0.01)


def test_dense_active_equals_total_and_tied_embedding_is_shared():
    untied = gpt_style(2, 64, 4, 1000, 0, tied=False)
    tied = gpt_style(2, 64, 4, 1000, 0, tied=True)
    assert untied.total == untied.active
    assert untied.total - tied.total == 1000 * 64
    assert untied.embedding == 2 * 1000 * 64 and tied.embedding == 1000 * 64
    with_positions = gpt_style(2, 64, 4, 1000, 128, tied=True)
    assert with_positions.embedding == tied.embedding + 128 * 64


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(layers=0), "layers"),
        (dict(hidden_size=-1), "hidden_size"),
        (dict(kv_heads=3), "kv_heads"),
        (dict(learned_positions=-1), "learned_positions"),
        (dict(norm="batchnorm"), "norm"),
        (dict(moe=MoeSpec(experts=4, experts_per_token=5, expert_ffn_hidden_size=8)), "experts_per_token"),
        (dict(moe=MoeSpec(experts=4, experts_per_token=1, expert_ffn_hidden_size=8, first_dense_layers=2)),
         "first_dense_layers"),
        (dict(moe=MoeSpec(experts=4, experts_per_token=1, expert_ffn_hidden_size=8, shared_experts=1)),
         "shared_expert_ffn_hidden_size"),
        (dict(moe=MoeSpec(experts=4, experts_per_token=1, expert_ffn_hidden_size=8, moe_layer_interval=2,
                          moe_layer_offset=2)), "moe_layer_offset"),
        (dict(moe=MoeSpec(experts=4, experts_per_token=1, expert_ffn_hidden_size=8, dense_layer_indices=(2,))),
         "dense_layer_indices"),
        (dict(moe=MoeSpec(experts=4, experts_per_token=1, expert_ffn_hidden_size=8, dense_layer_indices=(0, 1))),
         "no MoE layer"),
    ],
)
def test_invalid_dimensions_raise_input_error(change, message):
    arguments = dict(layers=2, hidden_size=64, heads=4, kv_heads=4, head_dim=16, ffn_hidden_size=256,
                     vocab_size=100, gated_mlp=True, tied_embeddings=False, attention_bias=False,
                     mlp_bias=False, norm="rmsnorm")
    arguments.update(change)
    with pytest.raises(InputError, match=message):
        count_parameters(**arguments)
