"""Issue 13 item 1 (third pass): DeepSpeed ZeRO-3 gathers the released parameters again for
the recomputed forward, a term that couples the ZeRO stage (state group) with checkpointing
(activation group); the solver holds it as a declared interaction term and stays exact.

The expected figures are derived here from DeepSpeed's release rule (a module stays gathered
between its recomputed forward and its backward iff fewer than ``stage3_max_reuse_distance``
= 1e9 elements of other modules lie between, i.e. 2 x the modules after it in the layer) on
module sizes written out by hand, not read back from the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.costs.recompute_regather import regathered_parameters_per_layer
from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.estimate import estimate_training
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.optimizer.decode import decode_choice
from vramopt.optimizer.interaction import Interaction, plan_seconds
from vramopt.optimizer.oracle import solve_exhaustive
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.solve import solve_cp
from vramopt.plan import check_plan
from vramopt.types import SearchSpace, TrainingPlan, TrainingWorkload
from vramopt.validation.narayanan import gpt_model


def test_the_release_rule_frees_two_thirds_of_a_gpt3_layer_none_of_8b_and_qkv_plus_output_of_70b():
    """issue 13 item 1: GPT-3 175B modules 3h^2, h^2, 4h^2, 4h^2 (h 12,288, 1.5e8 = h^2): after
    QKV lie 9h^2 (x2 = 2.7e9), after the output 8h^2 (2.4e9), after MLP up 4h^2 (1.2e9), all
    >= 1e9: 8 of 12 h^2 released. Llama 3.1 8B: everything after QKV is 2 x 192M < 1e9. 70B
    (h 8192, 8 KV heads of 128, f 28,672 gated): QKV 83.9M and output 67.1M released (the
    MLP up's 2 x 235M < 1e9), of 855.6M."""
    gpt = gpt_model(96, 12288, 96)
    h = 12288.0
    assert regathered_parameters_per_layer(gpt, 1, 1, 1) == pytest.approx(8 * h * h, rel=1e-12)
    assert regathered_parameters_per_layer(load_model("llama-3.1-8b"), 1, 1, 1) == 0.0
    qkv, out = 8192 * (8192 + 2 * 8 * 128), 8192 * 8192
    assert regathered_parameters_per_layer(load_model("llama-3.1-70b"), 1, 1, 1) == pytest.approx(qkv + out, rel=1e-12)


def test_gpt3_at_tp8_keeps_more_modules_gathered():
    """issue 13 item 1: under tp 8 each module holds an eighth (ds_numel is tp-local): after QKV
    2 x 9h^2/8 = 3.4e8 < 1e9, so nothing is released."""
    assert regathered_parameters_per_layer(gpt_model(96, 12288, 96), 8, 1, 1) == 0.0


def _values(framework: str, checkpointing: str, zero_stage: int, gpus: int = 384):
    model = gpt_model(96, 12288, 96)
    case = TrainingCase(model=model, gpu=load_gpu("a100-80gb"), seq_len=2048, global_batch=gpus * 4, framework=framework)
    plan = TrainingPlan(gpu="a100-80gb", gpus=gpus, tensor_parallel=1, pipeline_parallel=1, zero_stage=zero_stage,
                        checkpointing=checkpointing, precision="bf16", flash_attention=False, micro_batch=4)
    return {name: float(np.asarray(value).reshape(-1)[0]) for name, value in evaluate_training(case, check_plan(case, plan)).items()}


def test_the_regather_is_paid_by_deepspeed_zero3_under_full_recomputation_only():
    """issue 13 item 1: at 384 A100s the gathers already outlast the GEMMs, so the extra gather,
    2/3 of one bf16 copy of the weights moved (n-1)/n per GPU, is exposed whole."""
    deepspeed, generic = _values("deepspeed", "every:1", 3), _values("generic", "every:1", 3)
    gpu = load_gpu("a100-80gb")
    from vramopt.costs.coefficients import coefficient

    bandwidth = gpu.node.network_bandwidth_bytes_per_s_per_gpu * coefficient("collective_bandwidth_efficiency")
    extra = 383 / 384 * 96 * 8 * 12288.0**2 * 2 / bandwidth
    assert deepspeed["step_time_s"] - generic["step_time_s"] == pytest.approx(extra, rel=1e-9)
    assert deepspeed["recompute_regather_s"] == pytest.approx(extra, rel=1e-9)
    for checkpointing in ("none", "selective"):
        assert _values("deepspeed", checkpointing, 3)["recompute_regather_s"] == 0.0
        assert _values("deepspeed", checkpointing, 3)["recompute_regather_if_full_s"] == pytest.approx(extra, rel=1e-9)
    assert _values("deepspeed", "every:1", 2)["recompute_regather_s"] == 0.0


def test_table2_zero3_slowdown_has_the_right_direction_at_384_gpus():
    """issue 13 must-show (Narayanan 2021 Table 2): published ZeRO-3 / PTD-P = 144 / 153 = 0.941."""
    from vramopt.validation.narayanan_table2 import zero3_slowdowns

    published, predicted = zero3_slowdowns()["n21_t2_ratio_175b_384"]
    assert published == pytest.approx(144 / 153)
    assert predicted < 1.0 and abs(predicted / published - 1.0) <= 0.05


CASES = [
    ("llama-3.1-70b", 16, 64, "throughput", None),
    ("llama-3.1-70b", 32, 64, "per-gpu", None),
    ("llama-3.1-405b", 64, 128, "throughput", None),
    ("llama-3.1-70b", 32, 64, "min-gpus", 30000.0),
]


def _problem(model, gpus, batch, objective, target):
    workload = TrainingWorkload(model=model, seq_len=4096, global_batch=batch)
    space = SearchSpace(gpus=("h100",), max_gpus=gpus, framework="deepspeed", objective=objective, min_tokens_per_s=target)
    return workload, build_problem(workload, space)


@pytest.mark.parametrize("model,gpus,batch,objective,target", CASES)
def test_cp_sat_equals_exhaustive_with_the_interaction_term(model, gpus, batch, objective, target):
    """issue 13 item 1: the solver stays exact (CP-SAT = the exhaustive oracle) on DeepSpeed
    problems whose tables hold the term, and the table's time of the answer is the estimate's."""
    workload, problem = _problem(model, gpus, batch, objective, target)
    assert problem.interaction is not None and (problem.interaction.time_ticks > 0).any()
    exhaustive = solve_exhaustive(problem)
    found = solve_cp(problem, 60.0, 2).choice
    assert found.objective == exhaustive.objective
    assert (found.key, found.state_item, found.activation_item) == (exhaustive.key, exhaustive.state_item, exhaustive.activation_item)
    plan = decode_choice(problem, exhaustive)
    estimate = estimate_training(workload, plan, "deepspeed")
    assert plan_seconds(problem, exhaustive.key, exhaustive.state_item, exhaustive.activation_item) == pytest.approx(
        estimate.values["step_time_s"], rel=1e-9)


def _brute_force_ticks(problem) -> int:
    """The least step ticks over every fitting (key, state, activation), written independently."""
    state, activation, term = problem.state, problem.activation, problem.interaction
    ticks = (state.time_ticks[:, :, None] + activation.time_ticks[:, None, :]
             + term.time_ticks[:, :, None] * term.recomputes[None, None, :])
    memory = state.memory_mib[:, :, None] + activation.memory_mib[:, None, :]
    fits = state.valid[:, :, None] & activation.valid[:, None, :] & (memory <= problem.budget_mib[:, None, None])
    return int(ticks[fits].min())


@pytest.mark.parametrize("seed", range(6))
def test_pruning_and_cp_sat_stay_exact_under_large_injected_interaction_terms(seed):
    """issue 13 item 1: with the term scaled up until it reorders plans (up to 3x the fastest
    step), the group fronts and greedy bounds keep the optimum: CP-SAT = exhaustive = an
    independent brute force."""
    from dataclasses import replace

    _, problem = _problem("llama-3.1-70b", 16, 64, "throughput", None)
    rng = np.random.default_rng(seed)
    scale = int(problem.state.time_ticks[problem.state.valid].min())
    ticks = np.where(problem.state.valid, rng.integers(0, 3 * scale, problem.state.valid.shape), 0)
    ticks[rng.random(ticks.shape) < 0.5] = 0
    recomputes = rng.random(len(problem.activation.values)) < 0.5
    injected = replace(problem, interaction=Interaction(time_s=ticks * problem.tick_s, time_ticks=ticks, recomputes=recomputes))
    exhaustive = solve_exhaustive(injected)
    found = solve_cp(injected, 60.0, 2).choice
    assert found.objective == exhaustive.objective
    assert exhaustive.objective[0] == _brute_force_ticks(injected)
