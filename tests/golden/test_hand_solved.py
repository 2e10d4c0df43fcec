"""Hand-solved instances: tiny searches whose optimal plan is derived on paper from the
formulas of docs/cost-model.md and the objective of docs/solver.md, then checked against
``solve`` (CP-SAT and the exhaustive engine).

Unlike "CP-SAT equals exhaustive" (tests/property), this oracle does not share the
solver's tables or the cost code: every expected plan and number below is arithmetic on
documented formulas and catalog inputs, written out in the docstrings. In the spirit of
cvxpy's solver tests (small problems with known optimal answers).

Inputs used, with their documented values (a change to one of them means re-deriving):
- Llama 2 7B (catalog): L = 32, h = 4,096, a = a_kv = 32, d_h = 128, f = 11,008 gated,
  V = 32,000, untied. Counted by hand: embeddings E = 2 x 32,000 x 4,096 = 262,144,000;
  one layer 4h^2 + 3hf + 2h = 202,383,360; P = 32 x 202,383,360 + 4,096 (final norm) + E
  = 6,738,415,616; N = P - E = 6,476,271,616.
- Llama 3.1 70B: L = 80, h = 8,192, a = 64, a_kv = 8, d_h = 128, f = 28,672, V = 128,256:
  E = 2,101,346,304, layer 855,654,400, P = 70,553,706,496.
- Llama 3.1 405B: L = 126, h = 16,384, a = 128, a_kv = 8, f = 53,248: layer 3,187,703,808,
  P = 405,853,388,800.
- H100 (catalog): bf16 989.5 TFLOP/s, HBM 3.35 TB/s, NVLink 450 GB/s per direction, PCIe
  64 GB/s per direction, DGX H100 node: 8 GPUs, NVMe 56 GB/s, reserve 2 GiB. RTX 4090:
  reserve 1 GiB. Capacities are read from the catalog (they are being changed to the
  runtime-reported figures); every instance but the slot count keeps its margins far from
  the limit, so the plan does not depend on which figure is used.
- Coefficients (docs/cost-model.md section 9): collective_bandwidth_efficiency 0.8,
  pcie_efficiency 0.8, cpu_adam_params_per_s_per_node
  1e10, hbm_bandwidth_efficiency 0.8, all_reduce_latency_s 1e-5, paged_kv_waste_fraction
  0.04. Compute time comes from the operator-level model (costs/operators.py); the plan
  choices below hold for any compute time that is the same across the compared state
  choices, and the tests bound it physically (``assert_compute_is_physical``). Data-parallel
  traffic is derived by hand as the transfer; the exposed part (costs/overlap.py) is at most that.
- Objective (docs/solver.md): minimize step ticks, then GPUs, then memory MiB, then the
  declared order of choices (ZeRO 0 before 3, no offload before cpu before nvme, ...).
"""

from __future__ import annotations

import math

import pytest

from vramopt.costs.gemm import FITTED_H100
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.optimizer.search import solve
from vramopt.types import SearchSpace, ServingWorkload, TrainingWorkload

GB = 1e9
GIB = 2**30
MIB = 2**20
EXACT = 1e-9

# Llama 2 7B, by hand (module docstring).
P_7B = 6_738_415_616
N_7B = 6_476_271_616
LAYER_7B = 202_383_360
L_7B, H_7B, V_7B = 32, 4096, 32_000
SHARDED_SBH_7B = 4 * 1 + 4 * 1 + 2 * 3 * 11008 / 4096
"""Korthikanti's 24 generalized (cost-model section 2): 4q + 4r + 2*3*f/h = 8 + 16.125."""
LAYER_SBH_7B = 10 + SHARDED_SBH_7B  # 34.125

P_70B = 70_553_706_496
P_405B = 405_853_388_800

H100_BF16 = 989.5e12
H100_NVLINK = 450e9
H100_PCIE = 64e9
H100_NVME = 56e9
H100_HBM = 3.35e12
RESERVE_2_GIB = 2 * GIB


def assert_compute_is_physical(compute_s: float, flops: float) -> None:
    """Compute time is operator-level (costs/operators.py), not one utilization, so it is not
    re-derived here; it must lie between the H100's measured maximum achievable matmul rate
    (792.1 of 989 TFLOP/s, the fastest any GEMM runs) and a third of the bf16 peak."""
    assert flops / (H100_BF16 * 792.1 / 989) < compute_s < flops / (H100_BF16 / 3)


def flops_per_token_7b(seq_len: int, full_recompute: bool = False) -> float:
    """Cost-model section 3: 6(N + V h) + 12 L H s, plus 2N + 4 L H s under full recompute."""
    flops = 6 * (N_7B + V_7B * H_7B) + 12 * L_7B * H_7B * seq_len
    if full_recompute:
        flops += 2 * N_7B + 4 * L_7B * H_7B * seq_len
    return flops


def solve_both(workload, space):
    """The CP-SAT answer, after checking the exhaustive engine returns the same plan."""
    answer = solve(workload, space, engine="cp-sat", runner_up_count=0)
    exhaustive = solve(workload, space, engine="exhaustive", runner_up_count=0)
    assert (answer.estimate is None) == (exhaustive.estimate is None)
    if answer.estimate is not None:
        assert answer.estimate.plan == exhaustive.estimate.plan
    return answer


def test_hand_counted_parameters_are_the_catalogs():
    # The derivations below start from these counts; check them against the catalog once.
    assert load_model("llama-2-7b").parameters.total == P_7B
    assert load_model("llama-2-7b").parameters.largest_layer == LAYER_7B
    assert load_model("llama-3.1-70b").parameters.total == P_70B
    assert load_model("llama-3.1-405b").parameters.total == P_405B


def test_7b_on_one_h100_only_cpu_offload_is_chosen():
    """Llama 2 7B, one H100, s = 1,024, one sequence per step, bf16, no checkpointing,
    flash attention; the state choices (ZeRO 0-3, offload none/cpu/nvme) are free.

    Model state without offload: 16 B/param (2 weights + 2 gradients + 12 Adam) x P =
    107.8 GB, above the 72 GB limit of an 80 GB GPU at 10% headroom (77 GB at 85.5 GB):
    ZeRO divides nothing at dp = 1, so every plan without offload fails.
    CPU offload (ZeRO >= 1) moves the 12 B/param of Adam to the host: the GPU keeps
    4P = 26.95 GB + activations 32 x 34.125 x s b h = 4.58 GB + logits 4 s V = 0.13 GB +
    reserve 2 GiB = 33.81 GB. Its step adds PCIe 4P / (64 GB/s x 0.8) = 0.526 s and the
    host's Adam P / 1e10 = 0.674 s: 1.200 s.
    NVMe offload (ZeRO 3) also fits but reads and writes 32P bytes = 215.6 GB at 56 GB/s
    (3.85 s) plus the same Adam: slower. So offload = cpu; ZeRO 1, 2 and 3 give the same
    memory and time at dp = 1, and the declared order picks ZeRO 1.
    """
    workload = TrainingWorkload(model="llama-2-7b", seq_len=1024, global_batch=1)
    space = SearchSpace(
        gpus=("h100",), max_gpus=1, workers=1,
        pin={"precision": "bf16", "micro_batch": "1", "checkpointing": "none", "flash_attention": "true"},
    )
    answer = solve_both(workload, space)
    plan, values = answer.estimate.plan, answer.estimate.values
    assert (plan.gpus, plan.zero_stage, plan.offload) == (1, 1, "cpu")

    assert 16 * P_7B > 0.9 * 85.6 * GB  # no plan without offload, with either capacity figure
    activations = L_7B * LAYER_SBH_7B * 1024 * 1 * H_7B
    assert values["weights_bytes"] == pytest.approx(2 * P_7B, rel=EXACT)
    assert values["gradients_bytes"] == pytest.approx(2 * P_7B, rel=EXACT)
    assert values["optimizer_bytes"] == 0
    assert values["activations_bytes"] == pytest.approx(activations, rel=EXACT)
    assert values["total_bytes"] == pytest.approx(4 * P_7B + activations + 4 * 1024 * V_7B + RESERVE_2_GIB, rel=EXACT)
    assert values["total_bytes"] == pytest.approx(33.812e9, rel=1e-4)
    assert values["host_bytes_per_node"] == pytest.approx(12 * P_7B, rel=EXACT)
    offload = 4 * P_7B / (H100_PCIE * 0.8) + P_7B / 1e10
    assert values["offload_s"] == pytest.approx(offload, rel=EXACT)
    assert offload == pytest.approx(1.2003, abs=1e-4)
    compute = values["compute_s"]
    assert_compute_is_physical(compute, 1024 * flops_per_token_7b(1024))
    assert values["step_time_s"] == pytest.approx(compute + offload, rel=EXACT)
    assert answer.estimate.tokens_per_s == pytest.approx(1024 / (compute + offload), rel=EXACT)


def test_7b_on_four_h100_zero_2_wins_the_memory_tie_with_zero_1():
    """Llama 2 7B, up to 4 H100, s = 1,024, global batch 4, micro-batch 1, tp = pp = 1,
    no offload, no checkpointing; ZeRO stage and the GPU count are free.

    4 GPUs (dp 4): one micro-batch each, compute 1,024 tokens (0.074 s). ZeRO 0 needs 16P
    = 107.8 GB: no. ZeRO 1: 2P + 2P + 12P/4 = 7P = 47.2 GB (+ 6.9 GB) fits; ZeRO 2:
    2P + 2P/4 + 3P = 5.5P = 37.1 GB fits. Both move DDP's 2 (dp-1)/dp x 2P bytes = 3P =
    20.2 GB per step at 450 GB/s x 0.8, half exposed: 0.0281 s, the same time. ZeRO 3
    gathers and reduce-scatters m (dp-1)/dp x 6P = 4.5P bytes: 0.0421 s, slower.
    2 GPUs (dp 2) run two micro-batches each: compute 0.149 s alone is slower than 4 GPUs'
    0.102 s; 1 GPU fits only with offload, which is pinned off.
    So 4 GPUs, and between the tied ZeRO 1 and 2 the objective's next terms (same GPUs,
    less memory) pick ZeRO 2: 2P + 0.5P + 3P + 4.58 + 0.13 GB + 2 GiB = 43.92 GB.
    """
    workload = TrainingWorkload(model="llama-2-7b", seq_len=1024, global_batch=4)
    space = SearchSpace(
        gpus=("h100",), max_gpus=4, workers=1,
        pin={"precision": "bf16", "micro_batch": "1", "tensor_parallel": "1", "pipeline_parallel": "1",
             "checkpointing": "none", "flash_attention": "true", "offload": "none"},
    )
    answer = solve_both(workload, space)
    plan, values = answer.estimate.plan, answer.estimate.values
    assert (plan.gpus, plan.zero_stage, plan.offload) == (4, 2, "none")

    activations = L_7B * LAYER_SBH_7B * 1024 * H_7B
    total = 2 * P_7B + 2 * P_7B / 4 + 12 * P_7B / 4 + activations + 4 * 1024 * V_7B + RESERVE_2_GIB
    assert values["total_bytes"] == pytest.approx(total, rel=EXACT)
    assert total == pytest.approx(43.92e9, rel=1e-4)
    transfer = (2 * 3 / 4 * 2 * P_7B) / (H100_NVLINK * 0.8)
    assert values["data_parallel_transfer_s"] == pytest.approx(transfer, rel=EXACT)
    assert 0 < values["data_parallel_s"] <= transfer
    assert_compute_is_physical(values["compute_s"], 1024 * flops_per_token_7b(1024))
    parts = values["compute_s"] + values["data_parallel_s"] + values["optimizer_step_s"]
    assert values["step_time_s"] == pytest.approx(parts, rel=EXACT)


def test_7b_on_two_h100_the_pipeline_bubble_makes_tensor_parallelism_win():
    """Llama 2 7B on 2 H100, s = 1,024, global batch 2 = one micro-batch of 2 (so dp = 2 is
    excluded), ZeRO 0, no offload, no checkpointing, flash attention.

    One GPU: 16P = 107.8 GB, no. Two GPUs hold 8P = 53.9 GB of model state either way.
    pp = 2: each stage computes 2 x 1,024 / 2 tokens per micro-batch (0.0744 s), and with
    m = 1 micro-batch the 1F1B step takes m + (p-1) = 2 slots: 0.149 s, no faster than one
    GPU (interleaving needs m divisible by p, so v = 1).
    tp = 2: the same 0.0744 s of compute once, plus 4 all-reduces per layer of s b h x 2 B
    = 16.8 MB, each 2 (t-1)/t x 16.8 MB / (450 GB/s x 0.8) = 46.6 us, x 4 x 32 = 5.97 ms:
    0.0804 s. So tp = 2 -- and it is the bubble that decides: without it pp = 2 would take
    0.0744 s and win.
    Sequence parallelism moves the same volume (reduce-scatter + all-gather), so the time
    ties, and it shards the 10 s b h replicated activations: less memory, so it is on.
    Memory: (2 + 2 + 12) P / 2 = 53.9 GB + 32 x (10/2 + 24.125/2) s b h = 4.58 GB + logits
    4 s b V / t = 0.13 GB + 2 GiB = 60.77 GB.
    """
    workload = TrainingWorkload(model="llama-2-7b", seq_len=1024, global_batch=2)
    space = SearchSpace(
        gpus=("h100",), max_gpus=2, workers=1,
        pin={"precision": "bf16", "micro_batch": "2", "zero_stage": "0", "offload": "none",
             "checkpointing": "none", "flash_attention": "true"},
    )
    answer = solve_both(workload, space)
    plan, values = answer.estimate.plan, answer.estimate.values
    assert (plan.gpus, plan.tensor_parallel, plan.pipeline_parallel, plan.sequence_parallel) == (2, 2, 1, True)

    compute = values["compute_s"]
    assert_compute_is_physical(compute, 2048 / 2 * flops_per_token_7b(1024))
    message = 1024 * 2 * H_7B * 2
    tensor_parallel = L_7B * 4 * (2 * (2 - 1) / 2 * message / (H100_NVLINK * 0.8))
    assert tensor_parallel == pytest.approx(5.965e-3, rel=1e-3)
    assert values["tensor_parallel_s"] == pytest.approx(tensor_parallel, rel=EXACT)
    assert values["step_time_s"] == pytest.approx(compute + tensor_parallel + values["optimizer_step_s"], rel=EXACT)
    assert values["step_time_s"] < 2 * compute  # the pp = 2 step: compute x (m + p - 1)
    activations = L_7B * (10 / 2 + SHARDED_SBH_7B / 2) * 1024 * 2 * H_7B
    total = 16 * P_7B / 2 + activations + 4 * 1024 * 2 * V_7B / 2 + RESERVE_2_GIB
    assert values["activations_bytes"] == pytest.approx(activations, rel=EXACT)
    assert values["total_bytes"] == pytest.approx(total, rel=EXACT)


def test_7b_at_4096_tokens_needs_full_recomputation_every_layer():
    """Llama 2 7B on 4 H100, s = 4,096, global batch 16, micro-batch 4 (one per GPU),
    ZeRO 3, no offload, flash attention; checkpointing free (none, selective, every:k for
    k dividing 32).

    State at dp 4: weights 2P/4 + 2 gathered layers 2 x 202,383,360 x 2 B = 4.18 GB,
    gradients 2P/4 = 3.37 GB, Adam 12P/4 = 20.22 GB; logits 4 s b V = 2.10 GB; reserve
    2 GiB: 32.01 GB before activations. s b h = 4,096 x 4 x 4,096 = 67.1M.
    none: 32 x 34.125 s b h = 73.3 GB, total 105.3 GB: no. Selective with flash attention
    stores the same (flash keeps no scores). every:k stores ceil(32/k) x 2 s b h plus one
    segment of k working layers: k = 1 gives 64 + 34.125 = 98.125 s b h = 6.59 GB, the
    least of every k (k = 2: 100.25; 4: 152.5; ...), total 38.59 GB.
    Every k recomputes the same one extra forward (2N + 4 L H s per token), so all
    every:k tie on time and the objective's memory term picks every:1.
    """
    workload = TrainingWorkload(model="llama-2-7b", seq_len=4096, global_batch=16)
    space = SearchSpace(
        gpus=("h100",), max_gpus=4, workers=1,
        pin={"gpus": "4", "precision": "bf16", "micro_batch": "4", "tensor_parallel": "1", "pipeline_parallel": "1",
             "zero_stage": "3", "offload": "none", "flash_attention": "true"},
    )
    answer = solve_both(workload, space)
    plan, values = answer.estimate.plan, answer.estimate.values
    assert (plan.gpus, plan.checkpointing) == (4, "every:1")

    sbh = 4096 * 4 * H_7B
    activations = (32 * 2 + 1 * LAYER_SBH_7B) * sbh
    state = 2 * P_7B / 4 + 2 * LAYER_7B * 2 + 2 * P_7B / 4 + 12 * P_7B / 4
    total = state + activations + 4 * 4096 * 4 * V_7B + RESERVE_2_GIB
    assert values["activations_bytes"] == pytest.approx(activations, rel=EXACT)
    assert activations == 6_585_057_280
    assert values["total_bytes"] == pytest.approx(total, rel=EXACT)
    assert total - activations + L_7B * LAYER_SBH_7B * sbh > 0.9 * 85.6 * GB  # "none" fits neither capacity
    assert_compute_is_physical(values["compute_s"], 4096 * 4 * flops_per_token_7b(4096, full_recompute=True))
    transfer = (1 * 3 / 4 * P_7B * (2 * 2 + 2)) / (H100_NVLINK * 0.8)
    assert values["data_parallel_transfer_s"] == pytest.approx(transfer, rel=EXACT)
    assert 0 < values["data_parallel_s"] <= transfer
    parts = values["compute_s"] + values["data_parallel_s"] + values["optimizer_step_s"]
    assert values["step_time_s"] == pytest.approx(parts, rel=EXACT)


def _slot_grid() -> list[int]:
    """docs/solver.md section 7.8: round(2^(k/8)) from 1 to 2,048."""
    return sorted({round(2 ** (k / 8)) for k in range(89)})


def test_70b_serving_on_eight_h100_holds_as_many_slots_as_the_split_kv_cache_allows():
    """Llama 3.1 70B served in bf16 on 8 H100 at tp = 8, context 8,192, paged bf16 KV, no
    speculative decoding; the slots (the search's 2^(1/8) grid) are free.

    Per GPU (cost-model section 7): weights 2P/8 = 17.64 GB; KV per token 2 x 80 x 8 x 128
    x 2 B = 327,680 B, divided by min(t, a_kv) = 8; paged slots hold T_avg = 4,096 tokens x
    1.04; activations 2 x 8,192 x (4h + 3f) / 8 = 0.243 GB plus 4 V / 8 per slot; reserve 2
    GiB. Each slot costs 4,259.84 x 327,680 / 8 + 4 x 128,256 / 8 = 174.5 MB per GPU. Decode
    is memory bound here (the weights and the KV read take longer than the FLOPs), so
    tokens/s = n / step grows with every slot: the answer is the largest grid value that
    fits the headroom budget, with the solver's MiB rounding (needs up, budget down).
    With 80 GB GPUs that is 279 (297 fit); with 81,559 MiB ones, 304.
    Were the KV cache not divided by tp, each slot would cost 8x, and ~37 slots would fit.
    """
    gpu = load_gpu("h100")
    workload = ServingWorkload(model="llama-3.1-70b", context=8192)
    space = SearchSpace(
        gpus=("h100",), max_gpus=8, workers=1,
        pin={"gpus": "8", "tensor_parallel": "8", "pipeline_parallel": "1", "quantization": "bf16",
             "kv_cache_dtype": "bf16", "paged_kv": "true", "speculative_decoding": "false", "mig_profile": "none"},
    )
    weights = P_70B * 2 / 8
    kv_per_token = 2 * 80 * 8 * 128 * 2
    tokens_held = 4096 * 1.04
    kv_per_slot = tokens_held * kv_per_token / 8
    activations_fixed = 2 * 8192 * (4 * 8192 + 3 * 28672) / 8
    logits_per_slot = 4 * 128_256 / 8
    budget_mib = math.floor(gpu.memory_bytes * 0.9 / MIB) - math.ceil(RESERVE_2_GIB / MIB)

    def need_mib(slots: int) -> int:
        return math.ceil((weights + slots * kv_per_slot + activations_fixed + slots * logits_per_slot) / MIB)

    expected = max(slots for slots in _slot_grid() if need_mib(slots) <= budget_mib)
    # the rounding cannot flip the answer: the next grid value misses by far more than 1 MiB
    following = _slot_grid()[_slot_grid().index(expected) + 1]
    assert need_mib(following) - budget_mib > 100
    if gpu.memory_bytes == 80 * GB:
        assert expected == 279
    elif gpu.memory_bytes == 81_559 * MIB:
        assert expected == 304

    answer = solve_both(workload, space)
    plan, values = answer.estimate.plan, answer.estimate.values
    assert (plan.tensor_parallel, plan.slots) == (8, expected)
    assert values["kv_cache_bytes"] == pytest.approx(expected * kv_per_slot, rel=EXACT)
    assert values["weights_bytes"] == pytest.approx(weights, rel=EXACT)

    average_tokens = 4096
    memory_time = (weights + expected * average_tokens * kv_per_token / 8) / (H100_HBM * 0.8)
    flops_per_token = 2 * P_70B + 4 * 80 * 64 * 128 * average_tokens
    # GEMMs from their shapes at tp 8 (costs/serving_operators.py): per layer QKV (1,280, 8,192),
    # output (8,192, 1,024), gate + up (7,168, 8,192), down (8,192, 3,584) at the Hopper fraction
    # x depth k / (k + 128), plus the half-empty wave (132 / 2 tiles of 128 x 256 x k) per
    # kernel, as the M = 279-token step pays in full (M >= 128).
    rate = H100_BF16 * FITTED_H100
    shapes = ((1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584))
    per_token = 80 * sum(2 * n * k / (rate * k / (k + 128)) for n, k in shapes)
    wave = 80 * sum(66 * 128 * 256 * 2 * (k + 128) / rate for _, k in shapes) + 66 * 128 * 256 * 2 * (8192 + 128) / rate
    gemm_rate = 80 * sum(2 * n * k for n, k in shapes) / per_token * expected * per_token / (expected * per_token + wave)
    compute_time = expected * flops_per_token / 8 / gemm_rate
    assert memory_time > compute_time
    all_reduce = 1e-5 + 2 * (8 - 1) / 8 * expected * 8192 * 2 / (H100_NVLINK * 0.8)
    step = memory_time + 2 * 80 * all_reduce
    assert values["step_time_s"] == pytest.approx(step, rel=EXACT)
    assert answer.estimate.tokens_per_s == pytest.approx(expected / step, rel=EXACT)


def test_70b_training_on_one_rtx4090_without_offload_is_infeasible_for_the_model_state():
    """Llama 3.1 70B on one RTX 4090 (24 GB), s = 1,024, one sequence, bf16, every:1,
    flash attention, offload pinned to none.

    Model state alone: 16 B x 70.55B = 1,128.9 GB; ZeRO divides nothing at dp = 1, so the
    leanest plan needs 16P + activations (80 x 2 s b h + one working layer of 35.5 s b h =
    195.5 x 1,024 x 8,192 = 1.64 GB) + logits 4 s V = 0.53 GB + reserve 1 GiB =
    1,132.10 GB per GPU against 0.9 x 24 GB. The binding constraint is GPU memory.
    Allowing offload fixes it: NVMe offload keeps two working layers of weights and of
    gradients on the GPU (4 x 855,654,400 x 2 B = 6.8 GB, plus 3.2 GB of activations,
    logits and reserve) and puts 16P = 1.13 TB on the 4 TB drive (3.6 TB usable).
    """
    workload = TrainingWorkload(model="llama-3.1-70b", seq_len=1024, global_batch=1)
    space = SearchSpace(
        gpus=("rtx4090",), max_gpus=1, workers=1,
        pin={"precision": "bf16", "micro_batch": "1", "checkpointing": "every:1", "flash_attention": "true", "offload": "none"},
    )
    answer = solve_both(workload, space)
    assert answer.estimate is None and answer.solver.status == "infeasible"
    explanation = answer.explanation
    assert explanation.binding_constraint == "gpu_memory"
    sbh = 1024 * 8192
    needed = 16 * P_70B + (80 * 2 + 35.5) * sbh + 4 * 1024 * 128_256 + 1 * GIB
    assert explanation.needed_bytes_per_gpu == pytest.approx(needed, rel=EXACT)
    assert needed == pytest.approx(1_132.098e9, rel=1e-6)
    assert explanation.allowed_bytes_per_gpu == pytest.approx(0.9 * load_gpu("rtx4090").memory_bytes, rel=EXACT)
    assert "16 bytes per parameter" in explanation.reason
    assert any(relaxation.change == "allow offload (cpu or nvme)" for relaxation in explanation.relaxations)


def test_405b_bf16_serving_on_eight_h100_is_infeasible_and_fp8_or_16_gpus_fix_it():
    """Llama 3.1 405B served with bf16 weights (pinned) on at most 8 H100, context 4,096.

    At most 8 shards: 2P / 8 = 101.46 GB of weights per GPU, above 0.9 x 80 GB (or 0.9 x
    85.5 GB). The leanest plan is tp = 8 (activations are divided by t, so tp beats pp),
    1 slot, fp8 paged KV, no draft: + 1 x 2,048 x 1.04 x (2 x 126 x 8 x 128 x 1 B) / 8 =
    68.7 MB of KV + vLLM's profiling peak 8,192 x 2 x (2h + 3f / 8) + 1 x V x 10 = 865.3 MB
    of activations (costs/vllm_memory.py) + 0.5 GiB of CUDA graphs + 2 GiB = 105.08 GB.
    Relaxations: fp8 weights halve the weights to 50.7 GB per GPU (fits); 16 GPUs
    (whole nodes beyond 8) give tp 8 x pp 2 and 2P / 16 = 50.7 GB (fits).
    """
    workload = ServingWorkload(model="llama-3.1-405b", context=4096)
    space = SearchSpace(gpus=("h100",), max_gpus=8, workers=1, pin={"quantization": "bf16"})
    answer = solve_both(workload, space)
    assert answer.estimate is None and answer.solver.status == "infeasible"
    explanation = answer.explanation
    assert explanation.binding_constraint == "gpu_memory"
    kv = 1 * 2048 * 1.04 * (2 * 126 * 8 * 128 * 1) / 8
    activations = 8192 * 2 * (2 * 16384 + 3 * 53248 / 8) + 1 * 128_256 * 10
    needed = 2 * P_405B / 8 + kv + activations + 0.5 * 2**30 + RESERVE_2_GIB
    assert explanation.needed_bytes_per_gpu == pytest.approx(needed, rel=EXACT)
    assert needed == pytest.approx(105.082e9, rel=1e-5)
    changes = [relaxation.change for relaxation in explanation.relaxations]
    assert "--max-gpus 16" in changes
    assert "allow quantization fp8/int8/int4" in changes
