"""issue 14 item 4: hybrid sharding (HSDP) as a searched ZeRO/FSDP variant. Llama 3.1 8B on 32
nodes of 8 H100: full ZeRO-3 over 256 ranks exposes its per-micro-batch weight gathers on the
network; sharding within each node keeps them on NVLink and only all-reduces gradient shards
across nodes. Before the field existed the pin was an unknown field and the search could not
consider it."""

from __future__ import annotations

from vramopt.optimizer.search import solve_training
from vramopt.types import SearchSpace, TrainingWorkload

WORKLOAD = TrainingWorkload(model="8b")


def test_many_nodes_pick_hybrid_sharding_over_full_sharding():
    """issue 14 item 4: the default search on 256 H100 picks a node-sized shard group, and it
    is faster than the best plan that shards over all data-parallel ranks."""
    hybrid = solve_training(WORKLOAD, SearchSpace(gpus=("h100",), max_gpus=256, workers=1), runner_up_count=0)
    full = solve_training(WORKLOAD, SearchSpace(gpus=("h100",), max_gpus=256, pin={"data_parallel_shard": "0"}, workers=1),
                          runner_up_count=0)
    plan = hybrid.to_dict()["plan"]
    assert plan["data_parallel_shard"] * plan["tensor_parallel"] == 8  # one node's GPUs
    assert plan["zero_stage"] >= 1
    assert hybrid.estimate.values["tokens_per_s"] > 1.05 * full.estimate.values["tokens_per_s"]


def test_one_node_keeps_full_sharding_out_of_the_hybrid_domain():
    """issue 14 item 4: on one node a shard group only adds an all-reduce on the same fabric,
    so the default domain is full sharding alone."""
    result = solve_training(WORKLOAD, SearchSpace(gpus=("h100",), max_gpus=8, workers=1), runner_up_count=0)
    assert result.to_dict()["plan"]["data_parallel_shard"] == 0
