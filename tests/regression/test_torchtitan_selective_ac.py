"""Issue 15 item 1 (torchtitan's memory accounting): op-level selective activation
checkpointing, the loss buffers and FSDP2's unsharded buffers under ``--framework torchtitan``
(vramopt/frameworks/torchtitan_activations.py, frameworks/memory.py ``_torchtitan``).

Expected values are worked by hand from torchtitan 0.3.0's code (distributed/
activation_checkpoint.py SelectiveAC: every compute op's output kept except every second
mm/linear; models/llama3: fused wqkv, wo, w1, w3, w2 in that order; components/loss.py) and
Llama 3.1's dimensions (h 4,096, 32 heads and 8 KV heads of 128, f 14,336, V 128,256, 32
layers; 70B: h 8,192, 64 + 8 heads, f 28,672, 80 layers)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vramopt.costs.columns import PlanColumns
from vramopt.costs.training import TrainingCase, evaluate_training

from vramopt.estimate import estimate_training
from vramopt.frameworks.torchtitan_activations import kept_matmuls, recomputed_matmuls, selective_kept_bytes_per_layer
from vramopt.frameworks.torchtitan_activations import selective_recompute_flops_per_layer
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.types import TrainingPlan, TrainingWorkload

from tests.unit.test_separability import activation_choices, keys, states


def _values(framework, gpus=8, checkpointing="selective", micro_batch=2, seq_len=8192, model="llama-3.1-8b", zero_stage=3, **plan):
    plan = TrainingPlan(gpu="h100", gpus=gpus, zero_stage=zero_stage, micro_batch=micro_batch, checkpointing=checkpointing,
                        grad_comm_precision="fp32", **plan)
    workload = TrainingWorkload(model=model, seq_len=seq_len, global_batch=gpus // plan.tensor_parallel * micro_batch)
    return {name: float(np.asarray(value).reshape(-1)[0]) for name, value in
            estimate_training(workload, plan, framework=framework).values.items()}


def test_kept_bytes_of_a_llama_8b_block_by_hand():
    """Issue 15 item 1. 2 x 8,192 tokens, tp 1, per layer: block input 4,096 + wqkv (32 + 2 x 8) x
    128 = 6,144 + attention output 4,096 + w1 14,336 + w2 4,096 = 32,768 bf16 values per token
    (65,536 B) and the attention's fp32 log-sum-exp and row maxima 8 x 32 = 256 B: 16,384 x
    65,792 = 1,077,936,128 B."""
    model = load_model("llama-3.1-8b")
    assert [name for name, *_ in kept_matmuls(model)] == ["wqkv", "w1", "w2"]
    assert [name for name, *_ in recomputed_matmuls(model)] == ["wo", "w3"]
    assert float(selective_kept_bytes_per_layer(model, 16384, 1, False)) == 1_077_936_128


def test_kept_bytes_under_tensor_and_sequence_parallelism_by_hand():
    """Issue 15 item 1. Llama 3.1 70B, 8,192 tokens, tp 8 with sequence parallelism: input
    8,192 / 8 = 1,024, wqkv (64 + 16) x 128 / 8 = 1,280, w1 28,672 / 8 = 3,584, w2's local
    partial sum 8,192 (not sharded before its reduce-scatter), attention output 64 x 128 / 8 =
    1,024, the two reduce-scatter outputs 2 x 8,192 / 8 = 2,048: 17,152 values, 34,304 B, plus
    8 x 64 / 8 = 64 B of fp32 attention statistics: 8,192 x 34,368 = 281,542,656 B."""
    model = load_model("llama-3.1-70b")
    assert float(selective_kept_bytes_per_layer(model, 8192, 8, True)) == 281_542_656


def test_recomputed_flops_by_hand():
    """Issue 15 item 1. The recomputed wo (4,096 x 4,096) and w3 (4,096 x 14,336) of Llama 3.1
    8B for 16,384 tokens: 2 x 16,384 x (16,777,216 + 58,720,256) = 2,473,901,162,496 FLOPs per
    layer."""
    assert float(selective_recompute_flops_per_layer(load_model("llama-3.1-8b"), 16384, 1)) == 2_473_901_162_496


def test_activation_and_loss_bytes_of_the_8b_fsdp_plan_by_hand():
    """Issue 15 item 1. 32 kept blocks of 1,077,936,128 B, plus the block being recomputed:
    its full set (Korthikanti et al. 2022 with flash attention: (10 + 4 + 1 + 6 x 14,336 /
    4,096) = 36 B per token and unit of h, 36 x 16,384 x 4,096 = 2,415,919,104 B) less its kept
    part: 35,831,939,072 B, and the output projection's and final norm's inputs, 2 x 2 x 16,384
    x 4,096 = 268,435,456 B. The loss, compiled (as --export torchtitan runs it) in 0.3.0's 8
    chunks (tests/regression/test_torchtitan_chunked_loss.py): one chunk's 2,048 x 128,256 bf16
    logits and their bf16 gradient, 4 B each, the fp32 accumulator 4 x 16,384 x 4,096 and the
    chunks' copies 2 x 16,384 x 4,096: 1,453,326,336 B (the unsharded output-projection gradient
    is counted with the gradients). The generic accounting keeps Korthikanti's selective count
    (32 x 2,415,919,104) and one fp32 copy of the logits."""
    torchtitan, generic = _values("torchtitan"), _values("generic")
    assert torchtitan["activations_bytes"] == 35_831_939_072 + 268_435_456
    assert torchtitan["logits_bytes"] == 1_453_326_336
    assert generic["activations_bytes"] == 32 * 2_415_919_104
    assert generic["logits_bytes"] == 4 * 16384 * 128256


def test_full_checkpointing_keeps_the_sequence_sharded_block_input():
    """Issue 15 item 1. FullAC under tp 8 with sequence parallelism keeps each block's input
    sharded on the sequence: Llama 3.1 70B, 16 x 8,192 tokens: 80 x 2 x 131,072 x 8,192 / 8 B,
    plus one block recomputed (Korthikanti: (10 + 4 + 0.5 + 6 x 28,672 / 8,192) / 8 x 131,072 x
    8,192 B), and the output projection's all-gathered input (2 x 131,072 x 8,192 B) and the final
    norm's sharded one. The compiled loss holds 4 B per local logit of one of the 8 chunks
    (16,384 x 16,032): the chunk's bf16 logits and their gradient; beside it
    the fp32 accumulator of the replicated projection input (4 x 131,072 x 8,192) and the chunks'
    copies (2 x 131,072 x 8,192)."""
    values = _values("torchtitan", gpus=256, checkpointing="every:1", micro_batch=16, model="llama-3.1-70b",
                     tensor_parallel=8, sequence_parallel=True)
    tokens = 16 * 8192
    blocks = 80 * 2 * tokens * 8192 / 8 + (10 + 4 + 0.5 + 21) / 8 * tokens * 8192
    assert values["activations_bytes"] == pytest.approx(blocks + 2 * tokens * 8192 + 2 * tokens * 8192 / 8, rel=1e-12)
    assert values["logits_bytes"] == 4 * tokens / 8 * 128256 / 8 + 6 * tokens * 8192


def test_fsdp2_unsharded_buffers():
    """Issue 15 item 1. FSDP2 (ZeRO-3) over 8 ranks: fp32 shards 4 P / 8, two blocks gathered in
    bf16 (2 x 2 x the largest block) and the [norm, lm_head] group kept unsharded from the
    forward to the backward (2 x 128,256 x 4,096), and the chunked loss's unsharded gradient of
    that lm_head (2 x 128,256 x 4,096). Under pipeline parallelism the stage stays
    unsharded in bf16 (2 B per stage parameter) with unsharded fp32 gradient accumulation
    (4 B per stage parameter)."""
    model = load_model("llama-3.1-8b")
    flat = _values("torchtitan")
    largest = model.parameters.largest_layer
    assert flat["weights_bytes"] == pytest.approx(4 * model.parameters.total / 8 + 4 * largest + 2 * 128256 * 4096, rel=1e-12)
    assert flat["gradients_bytes"] == pytest.approx(4 * model.parameters.total / 8 + 2 * 128256 * 4096, rel=1e-12)
    piped = _values("torchtitan", gpus=16, pipeline_parallel=2)
    stage = (model.parameters.total - model.parameters.embedding) / 2 + 128256 * 4096  # 16 layers and one untied table
    assert piped["weights_bytes"] == pytest.approx(4 * stage / 8 + 2 * stage, rel=1e-12)
    assert piped["gradients_bytes"] == pytest.approx(4 * stage, rel=1e-12)


def test_recomputation_time_at_least_the_recomputed_gemms_at_peak():
    """Issue 15 item 1. torchtitan recomputes wo and w3 of each of the 32 layers per micro-batch:
    at least 32 x 2,473,901,162,496 FLOPs at the H100's dense bf16 peak more than vramopt's own
    selective recomputation (nothing under flash attention)."""
    gpu = load_gpu("h100")
    torchtitan, generic = _values("torchtitan"), _values("generic")
    extra_s = torchtitan["compute_s"] - generic["compute_s"]
    assert extra_s >= 32 * 2_473_901_162_496 / gpu.peak_flops_per_s["bf16"]
    assert torchtitan["step_time_s"] > generic["step_time_s"]


def test_generic_and_other_frameworks_unchanged():
    """Issue 15 item 1: the rule applies under --framework torchtitan only."""
    for framework in ("generic", "megatron"):  # DeepSpeed has no selective recomputation
        values = _values(framework, zero_stage=1)
        assert values["activations_bytes"] == 32 * 2_415_919_104
        assert values["logits_bytes"] == 4 * 16384 * 128256


def test_kept_set_matches_torchtitan_selective_ac_on_a_real_block():
    """Issue 15 item 1, against torchtitan's own code: a Llama 3 block as torchtitan 0.3.0
    builds it (fused QKV; dim 256, 16 heads, 4 KV heads, f 768), wrapped by its SelectiveAC,
    run forward on the CPU; the tensors the checkpoint's caching mode stores are exactly the
    outputs of the matmuls vramopt counts as kept (1st, 3rd, 5th: wqkv 384, w1 768, w2 256 per
    token). The attention output is not stored on the CPU because its CPU kernel
    (``_scaled_dot_product_flash_attention_for_cpu``) is not in the save list (the CUDA SDPA
    and FlexAttention kernels are)."""
    torch = pytest.importorskip("torch")
    activation_checkpoint = pytest.importorskip("torchtitan.distributed.activation_checkpoint")
    llama3 = pytest.importorskip("torchtitan.models.llama3")
    from torch.utils import _pytree as pytree
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.common.rope import ComplexRoPE

    (config,) = llama3._build_llama3_layers(n_layers=1, dim=256, n_heads=16, n_kv_heads=4, hidden_dim=768, attn_backend="flex",
                                            rope=ComplexRoPE.Config(dim=16, max_seq_len=512, theta=500000, scaling="llama"))
    config = dataclasses.replace(config, attention=dataclasses.replace(config.attention, inner_attention=ScaledDotProductAttention.Config()))
    block = config.build()
    contexts = []
    real = activation_checkpoint.create_selective_checkpoint_contexts

    def capture(policy, *args, **kwargs):
        contexts.append(real(policy, *args, **kwargs))
        return contexts[-1]

    activation_checkpoint.create_selective_checkpoint_contexts = capture
    try:
        wrapped = activation_checkpoint.SelectiveAC(activation_checkpoint.SelectiveAC.Config())._wrap_block(block, base_fqn="layers.0")
        tokens_in = torch.randn(2, 64, 256, requires_grad=True)
        output = wrapped(tokens_in, None, None)
        # What the forward left stored for the recomputation (the backward consumes it).
        stored = [getattr(leaf, "val", leaf) for leaf in pytree.tree_leaves(contexts[0][0].storage)]
        stored_bytes = sum(value.numel() * value.element_size() for value in stored if isinstance(value, torch.Tensor))
        output.sum().backward()
    finally:
        activation_checkpoint.create_selective_checkpoint_contexts = real
    shape = SimpleNamespace(hidden_size=256, head_dim=16, heads=16, kv_heads=4, ffn_hidden_size=768, gated_mlp=True)
    assert [n for _, n, _, _ in kept_matmuls(shape)] == [384, 768, 256]
    assert stored_bytes == 128 * sum(n for _, n, _, _ in kept_matmuls(shape)) * 4  # fp32 on the CPU
    assert tokens_in.grad is not None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_torchtitan_terms_keep_the_state_and_activation_split(data):
    """Issue 15 item 1: under --framework torchtitan the memory and step time still split into
    a state part and an activation part per key (what the solver's two tables add; the
    generic check is tests/unit/test_separability.py, whose draws this reuses)."""
    key = data.draw(keys())
    state_a, state_b = data.draw(states()), data.draw(states())
    act_x, act_y = data.draw(activation_choices(key)), data.draw(activation_choices(key))
    rows = []
    for state, activation in ((state_a, act_x), (state_a, act_y), (state_b, act_x), (state_b, act_y)):
        rows.append(dict(
            gpus=key["tp"] * key["cp"] * key["pp"] * key["dp"], tensor_parallel=key["tp"], context_parallel=key["cp"],
            pipeline_parallel=key["pp"], expert_parallel=key["ep"], first_stage_layers=key["first"], last_stage_layers=key["last"],
            data_parallel=key["dp"], precision=key["precision"], micro_batch=key["micro_batch"], **state, **activation,
        ))
    plans = PlanColumns(**{name: np.array([row[name] for row in rows], dtype=np.int64) for name in rows[0]})
    case = TrainingCase(model=key["model"], gpu=key["gpu"], seq_len=key["seq_len"], global_batch=key["global_batch"], framework="torchtitan")
    values = {name: np.broadcast_to(np.asarray(value, dtype=float), (4,)) for name, value in evaluate_training(case, plans).items()}
    for name in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "data_parallel_s", "offload_s", "optimizer_step_s"):
        assert values[name][1] == pytest.approx(values[name][0], rel=1e-12) and values[name][3] == pytest.approx(values[name][2], rel=1e-12)
    for name in ("activations_bytes", "compute_s", "tensor_parallel_s"):
        assert values[name][2] == pytest.approx(values[name][0], rel=1e-12) and values[name][3] == pytest.approx(values[name][1], rel=1e-12)
    assert np.all(values["logits_bytes"] == values["logits_bytes"][0])
