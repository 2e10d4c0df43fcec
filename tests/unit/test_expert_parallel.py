"""Expert parallelism (issue 14 item 1, added through the technique structure of issue 12):
the routed experts split over ep ranks of cp x dp, and the dispatch/combine all-to-all."""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.constraints.validity import training_invalid_reasons
from vramopt.costs.columns import CHECKPOINT_EVERY, PlanColumns
from vramopt.costs.expert_parallel import all_to_all_seconds_per_micro_batch, routed_expert_parameters
from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.estimate import estimate_training
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.optimizer.search import solve
from vramopt.types import SearchSpace, TrainingPlan, TrainingWorkload

MIXTRAL = load_model("mixtral-8x7b")
H100 = load_gpu("h100")


def _columns(**values):
    base = dict(gpus=16, tensor_parallel=2, pipeline_parallel=2, data_parallel=4, sequence_parallel=1, virtual_stages=1,
                zero_stage=0, checkpoint_kind=0, checkpoint_every=0, precision=1, grad_comm_precision=1, offload=0,
                flash_attention=1, micro_batch=1, context_parallel=1, optimizer=0, expert_parallel=1)
    base.update(values)
    return PlanColumns.from_scalars(**base)


def _scalar(value) -> float:
    return float(np.asarray(value).reshape(-1)[0])


def _evaluate(model=MIXTRAL, **values):
    case = TrainingCase(model=model, gpu=H100, seq_len=4096, global_batch=64)
    return {name: float(np.asarray(value).reshape(-1)[0]) for name, value in evaluate_training(case, _columns(**values)).items()}


def test_routed_experts_are_what_separates_total_from_active_parameters():
    """Mistral AI 2024, Mixtral of Experts: 46.7B parameters, 12.9B active (top-2 of 8). The
    routed experts vramopt splits are exactly the part a token uses 2/8 of."""
    routed = routed_expert_parameters(MIXTRAL)
    assert routed == 32 * 8 * 3 * 4096 * 14336  # 32 layers, 8 SwiGLU experts of 4096 x 14336 (config.json)
    active = MIXTRAL.parameters.total - routed * (1 - 2 / 8)
    assert active / 1e9 == pytest.approx(12.9, abs=0.05)
    assert routed_expert_parameters(load_model("llama-3.1-8b")) == 0.0


def test_ep_one_changes_nothing():
    with_column = _evaluate(expert_parallel=1)
    case = TrainingCase(model=MIXTRAL, gpu=H100, seq_len=4096, global_batch=64)
    columns = _columns()
    without = evaluate_training(case, PlanColumns(**{name: getattr(columns, name) for name in columns.column_names()
                                                      if name != "expert_parallel"}))
    for name in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "step_time_s"):
        assert with_column[name] == float(np.asarray(without[name]).reshape(-1)[0])
    assert with_column["expert_parallel_s"] == 0.0


def test_unsharded_states_lose_the_experts_other_ranks_hold():
    """ZeRO-0: each GPU keeps 1/ep of its stage's routed experts (split by tp as before)."""
    one, four = _evaluate(expert_parallel=1), _evaluate(expert_parallel=4)
    saved_parameters = routed_expert_parameters(MIXTRAL) / (2 * 2) * (1 - 1 / 4)  # tp 2 x pp 2, 3/4 of them elsewhere
    assert one["weights_bytes"] - four["weights_bytes"] == pytest.approx(2 * saved_parameters, rel=1e-9)  # bf16
    assert one["gradients_bytes"] - four["gradients_bytes"] == pytest.approx(2 * saved_parameters, rel=1e-9)
    assert one["optimizer_bytes"] - four["optimizer_bytes"] == pytest.approx(12 * saved_parameters, rel=1e-9)  # Adam


def test_sharded_states_cost_the_same_with_or_without_ep():
    """Under ZeRO-3 the expert states shard over edp = cp x dp / ep instead of cp x dp: ep
    cancels (Megatron-Core's distributed optimizer over the expert data-parallel group)."""
    one, four = _evaluate(expert_parallel=1, zero_stage=3), _evaluate(expert_parallel=4, zero_stage=3)
    for name in ("weights_bytes", "gradients_bytes", "optimizer_bytes"):
        assert four[name] == pytest.approx(one[name], rel=1e-12), name
    # What offload moves is the shard too: NVMe bytes and transfer time do not shrink with ep.
    one, four = (_evaluate(expert_parallel=ep, zero_stage=3, offload=2) for ep in (1, 4))
    for name in ("nvme_bytes_per_node", "offload_s"):
        assert four[name] == pytest.approx(one[name], rel=1e-12), name


def test_all_to_all_bytes_and_link():
    """4 all-to-alls per MoE layer (dispatch + combine, forward + backward), each GPU sending
    the (ep-1)/ep share of s/(cp tp) tokens x top-2 x hidden 4096 in bf16."""
    ep = 4
    columns = _columns(expert_parallel=ep)
    tokens = 4096 / 2  # tp 2 with sequence parallelism
    bytes_out = tokens * 2 * 4096 * 2 * (ep - 1) / ep
    layers_per_stage = 32 / 2
    # ep ranks are tp apart: the group spans tp x ep = 8 GPUs, one H100 node (NVLink).
    from vramopt.costs.communication import group_bandwidth

    bandwidth = float(np.asarray(group_bandwidth(H100, ep, 8)).reshape(-1)[0])
    expected = layers_per_stage * 4 * bytes_out / bandwidth
    assert _scalar(all_to_all_seconds_per_micro_batch(MIXTRAL, H100, columns, 4096)) == pytest.approx(expected, rel=1e-12)
    recomputed = _scalar(all_to_all_seconds_per_micro_batch(MIXTRAL, H100, _columns(expert_parallel=ep, checkpoint_kind=CHECKPOINT_EVERY,
                                                                                  checkpoint_every=1), 4096))
    assert recomputed == pytest.approx(expected * 6 / 4, rel=1e-12)  # full recomputation replays the forward's 2
    across = _scalar(all_to_all_seconds_per_micro_batch(MIXTRAL, H100, _columns(expert_parallel=8, tensor_parallel=2, data_parallel=8,
                                                                              gpus=32), 4096))
    assert across > expected  # tp 2 x ep 8 = 16 GPUs: the group leaves the node


def test_invalid_expert_layouts_are_named():
    case = TrainingCase(model=MIXTRAL, gpu=H100, seq_len=4096, global_batch=64)

    def broken(**values):
        return {reason for reason, mask in training_invalid_reasons(case, _columns(**values)).items() if bool(np.asarray(mask).any())}

    assert broken(expert_parallel=4) == set()
    assert "expert_parallel must divide the routed experts" in broken(expert_parallel=16, data_parallel=16, gpus=64)
    assert any("expert_parallel x expert_tensor_parallel must divide" in reason for reason in broken(expert_parallel=8))  # cp x dp = 4
    dense = TrainingCase(model=load_model("llama-3.1-8b"), gpu=H100, seq_len=4096, global_batch=64)
    reasons = {reason for reason, mask in training_invalid_reasons(dense, _columns(expert_parallel=2)).items() if bool(np.asarray(mask).any())}
    assert "expert_parallel > 1 needs a mixture-of-experts model" in reasons


def test_the_solver_searches_ep_and_agrees_with_the_oracle():
    workload = TrainingWorkload(model="mixtral-8x7b", seq_len=4096, global_batch=64)
    space = SearchSpace(gpus=("h100",), max_gpus=16, workers=1)
    exact, oracle = solve(workload, space, "cp-sat"), solve(workload, space, "exhaustive")
    assert exact.estimate.plan == oracle.estimate.plan
    pinned = solve(workload, SearchSpace(gpus=("h100",), max_gpus=16, workers=1, pin={"expert_parallel": "8"}), "cp-sat")
    assert pinned.estimate.plan.expert_parallel == 8
    assert pinned.estimate.values["expert_parallel_s"] > 0


def test_estimate_shows_ep_and_the_all_to_all():
    result = estimate_training(TrainingWorkload(model="mixtral-8x7b", seq_len=4096, global_batch=64),
                               TrainingPlan(gpu="h100", gpus=16, tensor_parallel=2, pipeline_parallel=2, expert_parallel=4,
                                            zero_stage=1, sequence_parallel=True))
    data = result.to_dict()
    assert data["plan"]["expert_parallel"] == 4 and data["throughput"]["expert_parallel_s"] > 0


@pytest.mark.parametrize("args, message", [
    (["estimate", "--model", "8b", "--gpus", "8", "--ep", "2", "--gpu", "h100"], "needs a mixture-of-experts model"),
    (["estimate", "--model", "mixtral", "--gpus", "6", "--ep", "3", "--gpu", "h100", "--global-batch", "6"],
     "expert_parallel must divide the routed experts"),
    # Serving takes ep since issue 14 item 2 (tests/regression/test_expert_parallel_serving.py); its replica is ep GPUs.
    (["estimate", "--workload", "infer", "--model", "mixtral", "--ep", "2"], "expert_parallel must divide the GPU count"),
])
def test_bad_expert_parallel_input_is_one_line(args, message):
    from click.testing import CliRunner

    from vramopt.cli import main

    result = CliRunner().invoke(main, args)  # click 8.2+: stderr kept apart
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
