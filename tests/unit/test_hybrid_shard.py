"""Hybrid sharding, data_parallel_shard (issue 14 item 4; issue 15's torchtitan HSDP rows): the
memory and communication terms against hand formulas from the catalog's link figures, the
validity rules and framework rules with their messages, and the three training exports, parsed
by torchtitan's, DeepSpeed's and Megatron-LM's own parsers where they install."""

from __future__ import annotations

import shlex

import pytest

from vramopt.constraints.hybrid_shard import default_values
from vramopt.constraints.technique import DomainContext
from vramopt.costs.coefficients import coefficient
from vramopt.errors import InputError
from vramopt.estimate import estimate_training
from vramopt.exporters.deepspeed import deepspeed_config
from vramopt.exporters.megatron import megatron_args
from vramopt.exporters.torchtitan import torchtitan_args
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.types import TrainingPlan, TrainingWorkload

GB = 1e9

WORKLOAD = TrainingWorkload(model="8b", seq_len=4096, global_batch=1024)
"""Llama 3.1 8B on 32 nodes of 8 H100: dp 256 at micro-batch 2, so 2 micro-batches per step."""


def _plan(shard: int, zero: int = 3, **extra) -> TrainingPlan:
    fields = dict(gpu="h100", gpus=256, zero_stage=zero, data_parallel_shard=shard, micro_batch=2, precision="bf16",
                  grad_comm_precision="bf16")
    return TrainingPlan(**{**fields, **extra})


def _values(shard: int, zero: int = 3, framework: str = "generic", **extra):
    return estimate_training(WORKLOAD, _plan(shard, zero, **extra), framework=framework).values


def test_states_divide_by_the_shard_group_not_by_dp():
    """issue 14 item 4: ZeRO-3 over 8 ranks of a node keeps 1/8 of the gradients and of Adam's
    12 bytes per parameter (tp = pp = 1: every parameter is on the GPU), 32x what full sharding keeps."""
    parameters = load_model("8b").parameters.total
    hybrid, full = _values(8), _values(0)
    assert hybrid["optimizer_bytes"] == pytest.approx(parameters * 12 / 8, rel=1e-9)
    assert hybrid["gradients_bytes"] == pytest.approx(parameters * 2 / 8, rel=1e-9)
    assert full["optimizer_bytes"] == pytest.approx(parameters * 12 / 256, rel=1e-9)
    # ZeRO-1 shards only the optimizer states, over the group.
    assert _values(8, zero=1)["optimizer_bytes"] == pytest.approx(parameters * 12 / 8, rel=1e-9)
    assert _values(8, zero=1)["gradients_bytes"] == pytest.approx(parameters * 2, rel=1e-9)


def test_the_shard_group_talks_over_nvlink_and_only_gradient_shards_cross_the_network():
    """issue 14 item 4: per micro-batch, ZeRO-3 inside the 8-GPU group moves 7/8 of two weight
    gathers and one gradient reduce-scatter at the NVLink rate; the 32 replicas all-reduce each
    GPU's 1/8 gradient shard (2 x 31/32 of it) at the per-GPU network rate."""
    gpu = load_gpu("h100")
    parameters = load_model("8b").parameters.total
    efficiency = coefficient("collective_bandwidth_efficiency")
    micro_batches, shard, replicas = 2, 8, 32
    inside = micro_batches * (shard - 1) / shard * (2 * 2 * parameters + 2 * parameters) / (gpu.nvlink_bandwidth_bytes_per_s * efficiency)
    across = (micro_batches * 2 * (replicas - 1) / replicas * 2 * parameters / shard
              / (gpu.node.network_bandwidth_bytes_per_s_per_gpu * efficiency))
    assert _values(8)["data_parallel_transfer_s"] == pytest.approx(inside + across, rel=1e-9)
    # Full sharding runs the same ZeRO-3 traffic over all 256 ranks, across nodes.
    full = micro_batches * 255 / 256 * 6 * parameters / (gpu.node.network_bandwidth_bytes_per_s_per_gpu * efficiency)
    assert _values(0)["data_parallel_transfer_s"] == pytest.approx(full, rel=1e-9)
    # ZeRO-1/2 (Megatron's distributed optimizer instances) all-reduce across replicas once per step.
    inside_1 = 2 * (shard - 1) / shard * 2 * parameters / (gpu.nvlink_bandwidth_bytes_per_s * efficiency)
    across_1 = across / micro_batches
    assert _values(8, zero=1)["data_parallel_transfer_s"] == pytest.approx(inside_1 + across_1, rel=1e-9)


def test_hybrid_sharding_beats_full_sharding_where_the_cross_node_gather_dominates():
    """issue 14 item 4: full ZeRO-3 over 32 nodes exposes its per-micro-batch network gathers;
    HSDP within the node hides its traffic behind the GEMMs, at 12x the memory for states."""
    hybrid, full = _values(8), _values(0)
    assert full["data_parallel_s"] > 0.3 and hybrid["data_parallel_s"] < 0.1 * full["data_parallel_s"]
    assert hybrid["tokens_per_s"] > 1.3 * full["tokens_per_s"]
    assert hybrid["total_bytes"] > full["total_bytes"] + 10 * GB


@pytest.mark.parametrize("shard, zero, extra, message", [
    (3, 3, {}, "data_parallel_shard must divide data_parallel"),
    (256, 3, {}, "data_parallel_shard equal to data_parallel is full sharding"),
    (8, 0, {}, "hybrid sharding needs zero_stage >= 1"),
])
def test_plans_hybrid_sharding_cannot_make_are_refused_with_the_rule(shard, zero, extra, message):
    with pytest.raises(InputError, match=message):
        estimate_training(WORKLOAD, _plan(shard, zero, **extra))


def test_the_expert_groups_must_fit_the_shard_group():
    """torchtitan: efsdp = dp_shard x cp x tp / ep; Megatron-Core: the expert data-parallel size
    divisible by the instances. Mixtral's ep 8 does not fit a shard group of 4 ranks at tp 1."""
    workload = TrainingWorkload(model="mixtral-8x7b", seq_len=4096, global_batch=256)
    plan = TrainingPlan(gpu="h100", gpus=64, expert_parallel=8, zero_stage=3, data_parallel_shard=4, checkpointing="full")
    with pytest.raises(InputError, match="expert_parallel x expert_tensor_parallel must divide the shard group"):
        estimate_training(workload, plan)
    fits = TrainingPlan(gpu="h100", gpus=64, expert_parallel=8, zero_stage=3, data_parallel_shard=8, checkpointing="full")
    assert estimate_training(workload, fits).values["total_bytes"] > 0


def test_the_default_domain_is_full_sharding_on_one_node_and_node_sized_groups_beyond():
    def context(max_gpus, per_node=8):
        return DomainContext(layers=32, gpus_per_node=per_node, max_gpus=max_gpus, global_batch=1024, allow_tp_across_nodes=False,
                             allow_fp4=False, supported_precisions=("bf16",))
    assert default_values(context(8)) == (0,)
    assert default_values(context(16)) == (0, 4, 8)
    assert default_values(context(256)) == (0, 4, 8)
    assert default_values(context(256, per_node=4)) == (0, 2, 4)
    assert default_values(context(16, per_node=2)) == (0, 2)


def test_deepspeed_refuses_hybrid_sharding_and_megatron_runs_it_with_its_distributed_optimizer():
    with pytest.raises(InputError, match="DeepSpeed: no hybrid sharding of the model states"):
        estimate_training(WORKLOAD, _plan(8), framework="deepspeed")
    with pytest.raises(InputError, match="cannot run under --framework megatron: Megatron-LM: ZeRO-1 is its distributed optimizer"):
        estimate_training(WORKLOAD, _plan(8, zero=3), framework="megatron")
    assert _values(8, zero=1, framework="megatron")["tokens_per_s"] > 0


def _argument(arguments, flag):
    return arguments[arguments.index(flag) + 1]


def test_torchtitan_gets_its_replicate_and_shard_degrees():
    """torchtitan's ParallelismConfig: data_parallel_replicate_degree x data_parallel_shard_degree = dp."""
    # torchtitan reduces in fp32 (its rule on grad_comm_precision).
    response = estimate_training(WORKLOAD, _plan(8, grad_comm_precision="fp32"), framework="torchtitan").to_dict()
    arguments = torchtitan_args(response).content["arguments"]
    assert _argument(arguments, "--parallelism.data_parallel_replicate_degree") == "32"
    assert _argument(arguments, "--parallelism.data_parallel_shard_degree") == "8"
    manager = pytest.importorskip("torchtitan.config.manager", reason="torchtitan is not installed (the 'frameworks' extra)")
    from torchtitan.distributed.parallel_dims import ParallelDims

    config = manager.ConfigManager().parse_args(arguments)
    assert (config.parallelism.data_parallel_replicate_degree, config.parallelism.data_parallel_shard_degree) == (32, 8)
    ParallelDims.from_config(config.parallelism, world_size=256)  # its own check of the product


def test_megatron_gets_the_distributed_optimizer_instances():
    from tests.unit.test_megatron_export import fixture_parser

    response = estimate_training(WORKLOAD, _plan(8, zero=1), framework="megatron").to_dict()
    parsed = fixture_parser().parse_args(megatron_args(response).content["arguments"])
    assert parsed.use_distributed_optimizer and parsed.num_distributed_optimizer_instances == 32


def test_deepspeed_gets_hpz_at_zero_3_with_what_it_does_not_shard(monkeypatch):
    response = estimate_training(WORKLOAD, _plan(8)).to_dict()
    result = deepspeed_config(response)
    assert result.content["zero_optimization"]["zero_hpz_partition_size"] == 8
    note = next(note for note in result.notes if note.startswith("data_parallel_shard"))
    assert "secondary copy of the weights" in note and "optimizer states stay sharded over all data-parallel ranks" in note
    at_zero_2 = deepspeed_config(estimate_training(WORKLOAD, _plan(8, zero=2)).to_dict())
    assert "zero_hpz_partition_size" not in at_zero_2.content["zero_optimization"]
    assert any("needs stage 3" in note for note in at_zero_2.notes)
    config_module = pytest.importorskip("deepspeed.runtime.config", reason="DeepSpeed is not installed (the 'frameworks' extra)")
    monkeypatch.setattr(config_module.dist, "get_rank", lambda *args, **kwargs: 0)
    monkeypatch.setattr(config_module.dist, "get_world_size", lambda *args, **kwargs: 256)
    assert config_module.DeepSpeedConfig(dict(result.content)).zero_config.zero_hpz_partition_size == 8


def test_the_plan_shows_and_briefs_the_hybrid():
    from vramopt.constraints.hybrid_shard import display

    plan = estimate_training(WORKLOAD, _plan(8)).to_dict()["plan"]
    assert plan["data_parallel_shard"] == 8
    assert display(plan) == "hybrid: sharded over 8 dp ranks x 32 replicas"
    assert display({**plan, "data_parallel_shard": 0}) == ""


def test_estimate_refuses_a_bad_shard_in_one_line(tmp_path):
    import subprocess
    import sys

    command = [sys.executable, "-c", "from vramopt.cli import main; main()", "estimate", "--model", "8b", "--gpu", "h100",
               "--gpus", "256", "--zero", "3", "--dp-shard", "3"]
    completed = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert completed.returncode == 2, completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: data_parallel_shard must divide data_parallel"), shlex.quote(completed.stderr)
