"""Context parallelism's cost terms against hand arithmetic (issue 12 item 4).

Each expected value is worked out here from the model's dimensions and the catalog's link
figures, not read back from the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.costs.gemm import GENERATIONS

from vramopt.constraints.context_parallel import default_degrees
from vramopt.constraints.technique import DomainContext
from vramopt.costs.coefficients import coefficient
from vramopt.costs.columns import CHECKPOINT_EVERY, CHECKPOINT_NONE, PlanColumns
from vramopt.costs.context_parallel import (
    attention_forward_seconds_per_layer,
    kv_chunk_bytes,
    ring_bandwidth,
    ring_seconds_per_micro_batch,
    whole_tile_chunks,
)
from vramopt.constraints.validity import training_invalid_reasons as invalid_reasons
from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.types import PRECISIONS

BF16 = PRECISIONS.index("bf16")


def columns(**overrides) -> PlanColumns:
    values = dict(
        gpus=8, tensor_parallel=1, context_parallel=1, pipeline_parallel=1, data_parallel=8, sequence_parallel=0,
        virtual_stages=1, zero_stage=0, checkpoint_kind=CHECKPOINT_NONE, checkpoint_every=0, precision=BF16,
        grad_comm_precision=BF16, offload=0, flash_attention=1, micro_batch=1,
    )
    values.update(overrides)
    return PlanColumns.from_scalars(**values)


def evaluate(model: str, gpu: str, seq_len: int, global_batch: int, **overrides) -> dict[str, float]:
    case = TrainingCase(model=load_model(model), gpu=load_gpu(gpu), seq_len=seq_len, global_batch=global_batch)
    values = evaluate_training(case, columns(**overrides))
    return {name: float(np.asarray(value).reshape(-1)[0]) for name, value in values.items()}


def test_kv_chunk_of_llama_70b_at_128k_with_tp8_cp2():
    # 2 (K and V) x 65,536 tokens x 1 sequence x (8 KV heads / tp 8) x 128 head dim x 2 bytes.
    chunk = kv_chunk_bytes(load_model("llama-3.1-70b"), columns(tensor_parallel=8, context_parallel=2), 131072)
    assert float(chunk[0]) == 2 * 65536 * 1 * 128 * 2 == 33_554_432


def test_kv_heads_are_not_split_below_one_per_rank():
    # Llama 3.1 8B has 8 KV heads: at tp 16 each rank still holds one (replicated) head.
    model = load_model("llama-3.1-8b")
    assert model.kv_heads == 8
    chunk = kv_chunk_bytes(model, columns(tensor_parallel=16, context_parallel=4), 32768)
    assert float(chunk[0]) == 2 * (32768 / 4) * 1 * 128 * 2


def test_ring_runs_on_nvlink_inside_a_node_and_on_the_network_across():
    gpu = load_gpu("h100")
    efficiency = coefficient("collective_bandwidth_efficiency")
    inside = ring_bandwidth(gpu, columns(tensor_parallel=4, context_parallel=2))  # spans 8 GPUs = one node
    across = ring_bandwidth(gpu, columns(tensor_parallel=8, context_parallel=2))  # spans 16 GPUs
    assert float(inside[0]) == pytest.approx(gpu.nvlink_bandwidth_bytes_per_s * efficiency)
    assert float(across[0]) == pytest.approx(400e9 / 8 * efficiency)  # DGX H100: one 400 Gb/s NIC per GPU


def test_exposed_ring_time_by_hand_when_the_transfer_outlasts_attention():
    # Llama 3.1 8B, 2,048 tokens, cp 8 across H100 nodes (tp 2 x cp 8 = 16 GPUs > 8): short
    # chunks, so a step's transfer is longer than its attention compute.
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100")
    plan = columns(gpus=16, tensor_parallel=2, context_parallel=8, data_parallel=1)
    seq_len = 2048
    chunk_bytes = 2 * (seq_len / 8) * 1 * (8 / 2) * 128 * 2
    bandwidth = 50e9 * coefficient("collective_bandwidth_efficiency")
    transfer = chunk_bytes / bandwidth
    # FlashAttention at the Hopper forward+backward fraction, causal: half the s x s work.
    flops_per_s = gpu.peak_flops_per_s["bf16"] * GENERATIONS["hopper"].flash_attention_fraction
    attention_forward = 4 * (32 * 128) * seq_len * (seq_len / 8) / 2 * 0.5 / flops_per_s
    step_attention = attention_forward / 8
    assert transfer > step_attention
    exposed_per_layer = (8 - 1) * (transfer - step_attention) * (1 + 2)  # forward + backward (K,V and dK,dV)
    ring = ring_seconds_per_micro_batch(model, gpu, plan, seq_len)
    assert float(ring["ring_exposed_s"][0]) == pytest.approx(model.layers * exposed_per_layer, rel=1e-12)
    assert float(ring["ring_transfer_s"][0]) == pytest.approx(model.layers * 7 * transfer * 3, rel=1e-12)
    assert float(attention_forward_seconds_per_layer(model, gpu, plan, seq_len)[0]) == pytest.approx(attention_forward, rel=1e-12)
    # Full recomputation runs the forward ring a second time.
    recomputed = ring_seconds_per_micro_batch(
        model, gpu, columns(gpus=16, tensor_parallel=2, context_parallel=8, data_parallel=1, checkpoint_kind=CHECKPOINT_EVERY,
                            checkpoint_every=1), seq_len)
    assert float(recomputed["ring_exposed_s"][0]) == pytest.approx(model.layers * 7 * (transfer - step_attention) * 4, rel=1e-12)


def test_long_sequences_hide_the_ring_behind_attention():
    # 128K tokens on one node: each step's attention (quadratic in s) dwarfs its KV chunk.
    values = evaluate("llama-3.1-8b", "h100", 131072, 2, gpus=8, context_parallel=4, data_parallel=2)
    assert values["context_parallel_transfer_s"] > 0
    assert values["context_parallel_s"] == 0.0


def test_activations_and_logits_are_those_of_s_over_cp_tokens():
    split = evaluate("llama-3.1-70b", "h100", 65536, 4, gpus=8, tensor_parallel=4, context_parallel=2, data_parallel=1)
    short = evaluate("llama-3.1-70b", "h100", 32768, 4, gpus=4, tensor_parallel=4, context_parallel=1, data_parallel=1)
    assert split["activations_bytes"] == pytest.approx(short["activations_bytes"], rel=1e-12)
    # fp32 logits: 4 bytes x s/cp tokens x V / tp.
    assert split["logits_bytes"] == pytest.approx(4 * 32768 * 128256 / 4, rel=1e-12)


def test_model_states_shard_over_dp_times_cp():
    # ZeRO-3: 2 data-parallel x 4 context-parallel ranks shard like 8 data-parallel ranks.
    with_cp = evaluate("llama-3.1-8b", "h100", 32768, 16, gpus=8, context_parallel=4, data_parallel=2, zero_stage=3)
    data_only = evaluate("llama-3.1-8b", "h100", 32768, 16, gpus=8, context_parallel=1, data_parallel=8, zero_stage=3)
    for name in ("weights_bytes", "gradients_bytes", "optimizer_bytes"):
        assert with_cp[name] == pytest.approx(data_only[name], rel=1e-12), name
    params = load_model("llama-3.1-8b").params_total
    assert with_cp["optimizer_bytes"] == pytest.approx(params * 12 / 8, rel=1e-12)  # Adam K = 12, over 8 ranks


def test_gradient_all_reduce_spans_dp_times_cp_ranks():
    # ZeRO-0: the all-reduce moves 2 (n-1)/n of the gradients, n = dp x cp = 8, on NVLink.
    gpu = load_gpu("h100")
    values = evaluate("llama-3.1-8b", "h100", 32768, 16, gpus=8, context_parallel=8, data_parallel=1)
    params = load_model("llama-3.1-8b").params_total
    volume = 2 * 7 / 8 * params * 2
    seconds = volume / (gpu.nvlink_bandwidth_bytes_per_s * coefficient("collective_bandwidth_efficiency"))
    assert values["data_parallel_transfer_s"] == pytest.approx(seconds, rel=1e-12)
    assert 0 < values["data_parallel_s"] <= values["data_parallel_transfer_s"]


def test_compute_and_tensor_parallel_traffic_divide_by_cp():
    one = evaluate("llama-3.1-70b", "h100", 65536, 4, gpus=4, tensor_parallel=4, context_parallel=1, data_parallel=1)
    two = evaluate("llama-3.1-70b", "h100", 65536, 4, gpus=8, tensor_parallel=4, context_parallel=2, data_parallel=1)
    # Half the tokens per rank: half the FLOPs, in GEMMs a little less efficient (thinner M).
    assert one["compute_s"] / 2 <= two["compute_s"] <= 1.02 * one["compute_s"] / 2
    assert two["tensor_parallel_s"] == pytest.approx(one["tensor_parallel_s"] / 2, rel=1e-12)


@pytest.mark.parametrize(
    "seq_len, cp, whole",
    [(4096, 16, True), (4096, 32, False), (1000, 2, False), (1000, 1, True), (131072, 16, True), (8192 + 256, 2, False)],
)
def test_chunks_must_be_whole_128_token_tiles(seq_len, cp, whole):
    # s / (2 cp) must be a multiple of 128: 4096 / 32 = 128 yes, 4096 / 64 = 64 no.
    assert bool(whole_tile_chunks(seq_len, cp)) is whole


def test_invalid_plans_name_their_reason():
    case = TrainingCase(model=load_model("llama-3.1-8b"), gpu=load_gpu("h100"), seq_len=1000, global_batch=8)
    reasons = invalid_reasons(case, columns(gpus=8, context_parallel=2, data_parallel=4, flash_attention=0))
    failing = {reason for reason, mask in reasons.items() if bool(np.asarray(mask).any())}
    assert any(reason.startswith("context_parallel must split seq_len") for reason in failing)
    assert "context_parallel > 1 needs flash_attention (ring attention is blockwise)" in failing
    wrong_count = invalid_reasons(case, columns(gpus=8, context_parallel=2, data_parallel=8))
    assert bool(wrong_count["tensor_parallel x context_parallel x pipeline_parallel x data_parallel must equal the GPU count"][0])


def context(seq_len: int, max_gpus: int) -> DomainContext:
    return DomainContext(layers=32, gpus_per_node=8, max_gpus=max_gpus, global_batch=64, allow_tp_across_nodes=False,
                         allow_fp4=False, supported_precisions=("bf16",), seq_len=seq_len)


def test_default_domain_searches_cp_only_for_long_sequences():
    assert default_degrees(context(8192, 64)) == (1,)
    assert default_degrees(context(0, 64)) == (1,)
    assert default_degrees(context(131072, 64)) == (1, 2, 4, 8, 16)
    assert default_degrees(context(16384, 4)) == (1, 2, 4)
    # 8,448 tokens: 2 x 2 chunks of 2,112 tokens are not whole tiles; cp = 2 is left out.
    assert default_degrees(context(8448, 16)) == (1,)
