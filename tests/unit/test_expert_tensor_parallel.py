"""Expert tensor parallelism (issue 14 item 1: Megatron-Core's ETP as its own degree): the
expert layers refold a stage's tp x cp x dp ranks as etp x ep x edp, so experts can be kept
whole (etp = 1) while attention keeps its tp. Expected values are derived by hand from the
model's config.json dimensions and the group algebra (costs/expert_parallel.py)."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from vramopt.cli import main
from vramopt.constraints.validity import training_invalid_reasons
from vramopt.costs.columns import PlanColumns
from vramopt.costs.communication import group_bandwidth
from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.estimate import estimate_training
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.optimizer.search import solve
from vramopt.types import SearchSpace, TrainingPlan, TrainingWorkload

MIXTRAL = load_model("mixtral-8x7b")
H100 = load_gpu("h100")
ROUTED_MIXTRAL = 32 * 8 * 3 * 4096 * 14336
"""Mixtral 8x7B config.json: 32 layers, 8 SwiGLU experts of 4096 x 14336 each."""


def _columns(**values):
    base = dict(gpus=16, tensor_parallel=2, pipeline_parallel=1, data_parallel=8, sequence_parallel=1, virtual_stages=1,
                zero_stage=0, checkpoint_kind=0, checkpoint_every=0, precision=1, grad_comm_precision=1, offload=0,
                flash_attention=1, micro_batch=1, context_parallel=1, optimizer=0, expert_parallel=1, expert_tensor_parallel=0)
    base.update(values)
    return PlanColumns.from_scalars(**base)


def _evaluate(model=MIXTRAL, **values):
    case = TrainingCase(model=model, gpu=H100, seq_len=4096, global_batch=64)
    return {name: float(np.asarray(value).reshape(-1)[0]) for name, value in evaluate_training(case, _columns(**values)).items()}


def test_etp_equal_to_tp_is_the_old_default_bit_for_bit():
    for ep in (1, 4):
        assert _evaluate(expert_parallel=ep, expert_tensor_parallel=0) == _evaluate(expert_parallel=ep, expert_tensor_parallel=2)


def test_whole_experts_hold_one_ep_share_of_the_routed_weights():
    """bf16 weights at ZeRO-0: a GPU holds routed / (ep x etp) of the experts, so going from
    etp = tp = 2 to etp = 1 at ep 4 adds routed x (1/4 - 1/8) weights of 2 bytes."""
    split = _evaluate(expert_parallel=4, expert_tensor_parallel=2)
    whole = _evaluate(expert_parallel=4, expert_tensor_parallel=1)
    assert whole["weights_bytes"] - split["weights_bytes"] == pytest.approx(ROUTED_MIXTRAL * (1 / 4 - 1 / 8) * 2, rel=1e-9)


def test_sharded_expert_states_do_not_depend_on_etp():
    """ZeRO-3 shards expert states over edp = tp cp dp / (ep etp): the bytes per GPU are
    routed / (tp cp dp) whatever the split (Megatron-Core distributed optimizer over edp)."""
    split = _evaluate(expert_parallel=4, expert_tensor_parallel=2, zero_stage=3)
    whole = _evaluate(expert_parallel=4, expert_tensor_parallel=1, zero_stage=3)
    assert whole["optimizer_bytes"] == pytest.approx(split["optimizer_bytes"], rel=1e-12)


def test_ep_group_of_whole_experts_stays_in_the_node():
    """ep ranks sit etp apart: tp 2, ep 8 spans 16 GPUs (the network) with etp = 2 and 8 GPUs
    (NVLink) with etp = 1; the bytes are the same, so the time scales by the bandwidths."""
    across = _evaluate(expert_parallel=8, expert_tensor_parallel=2)["expert_parallel_s"]
    inside = _evaluate(expert_parallel=8, expert_tensor_parallel=1)["expert_parallel_s"]
    ratio = float(group_bandwidth(H100, 8, 8)) / float(group_bandwidth(H100, 8, 16))
    assert across / inside == pytest.approx(ratio, rel=1e-9) and ratio > 1


def test_whole_experts_drop_the_mlp_collectives_of_moe_layers():
    """Every Mixtral layer is MoE: with etp = 1 the MLP half of the f/g collectives
    (Shoeybi et al. 2019 section 3: 2 of a layer's 4) disappears."""
    split = _evaluate(expert_parallel=4, expert_tensor_parallel=2)["tensor_parallel_transfer_s"]
    whole = _evaluate(expert_parallel=4, expert_tensor_parallel=1)["tensor_parallel_transfer_s"]
    assert whole == pytest.approx(split / 2, rel=1e-9)


def test_expert_gemms_keep_their_flops_but_get_faster_as_ep_grows():
    """The same expert FLOPs per GPU in fatter GEMMs: E/ep experts fed ep times the tokens."""
    times = [_evaluate(expert_parallel=ep, expert_tensor_parallel=1, data_parallel=8)["compute_s"] for ep in (1, 2, 4, 8)]
    assert all(later <= earlier for earlier, later in zip(times, times[1:]))
    assert times[-1] < times[0]


def test_rules_are_named():
    case = TrainingCase(model=MIXTRAL, gpu=H100, seq_len=4096, global_batch=64)

    def broken(model_case=case, **values):
        return {reason for reason, mask in training_invalid_reasons(model_case, _columns(**values)).items()
                if bool(np.asarray(mask).any())}

    assert broken(expert_parallel=8, expert_tensor_parallel=1) == set()
    assert any("expert_parallel x expert_tensor_parallel must divide" in reason
               for reason in broken(expert_parallel=8, expert_tensor_parallel=4))  # 32 > tp cp dp = 16
    dense = TrainingCase(model=load_model("llama-3.1-8b"), gpu=H100, seq_len=4096, global_batch=64)
    assert "expert_tensor_parallel other than tensor_parallel needs a mixture-of-experts model" in broken(
        dense, expert_tensor_parallel=1)


def test_the_solver_searches_etp_and_agrees_with_the_oracle():
    workload = TrainingWorkload(model="mixtral-8x7b", seq_len=4096, global_batch=64)
    space = SearchSpace(gpus=("h100",), max_gpus=32, workers=1)
    exact, oracle = solve(workload, space, "cp-sat"), solve(workload, space, "exhaustive")
    assert exact.estimate.plan == oracle.estimate.plan
    pinned = solve(workload, SearchSpace(gpus=("h100",), max_gpus=32, workers=1,
                                         pin={"expert_parallel": "8", "expert_tensor_parallel": "1"}), "cp-sat")
    assert pinned.estimate.plan.expert_parallel == 8 and pinned.estimate.plan.expert_tensor_parallel == 1


def test_published_qwen3_layout_is_expressible_and_fits():
    """Megatron-MoE-ModelZoo best_practice/Qwen3 (commit c1ad0b5), 'Performance Results':
    Qwen3-235B-A22B on 256 H100, TP2 EP8 ETP1 PP1, FSDP, micro-batch 4, global batch 2048,
    sequence 4096, full recompute, bf16: it ran, so it fits in 80 GB."""
    result = estimate_training(
        TrainingWorkload(model="qwen3-235b-a22b", seq_len=4096, global_batch=2048),
        TrainingPlan(gpu="h100", gpus=256, tensor_parallel=2, expert_parallel=8, expert_tensor_parallel=1, zero_stage=3,
                     micro_batch=4, checkpointing="full", sequence_parallel=True, precision="bf16"))
    data = result.to_dict()
    assert data["memory"]["fits"] and data["plan"]["expert_tensor_parallel"] == 1
    assert data["plan"]["data_parallel"] == 128


@pytest.mark.parametrize("args, message", [
    (["estimate", "--model", "8b", "--gpus", "8", "--tp", "4", "--etp", "1", "--gpu", "h100"], "needs a mixture-of-experts model"),
    (["estimate", "--model", "mixtral", "--gpus", "16", "--tp", "2", "--ep", "8", "--etp", "4", "--gpu", "h100",
      "--global-batch", "64"], "expert_parallel x expert_tensor_parallel must divide"),
    (["estimate", "--workload", "infer", "--model", "mixtral", "--etp", "1"], "--etp does not apply to --workload infer"),
])
def test_bad_expert_tensor_parallel_input_is_one_line(args, message):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
