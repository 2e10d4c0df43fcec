"""Issue 15 item 1 (each framework's runtime as its code has it): Megatron-LM core_v0.16.1 overlaps
the interleaved schedule's point-to-point transfers with the next chunk's compute by default
(``overlap_p2p_comm``, turned off only by ``--no-overlap-p2p-communication``, a store_false in
megatron/training/arguments.py; tests/fixtures/exporters/megatron_lm_arguments.json records it),
so ``--framework megatron`` prices the pipeline transfers as overlapped under interleaving
(costs/pipeline_p2p.py), and as blocking without it, like every other framework."""

from __future__ import annotations

import json
from pathlib import Path

from vramopt.estimate import estimate_training
from vramopt.types import TrainingPlan, TrainingWorkload

WORKLOAD = TrainingWorkload(model="70b", global_batch=64)


def _p2p_s(framework, virtual_stages):
    plan = TrainingPlan(gpu="h100", gpus=32, tensor_parallel=4, sequence_parallel=True, pipeline_parallel=8,
                        virtual_stages=virtual_stages, zero_stage=1, checkpointing="full", micro_batch=1)
    values = estimate_training(WORKLOAD, plan, framework=framework).values
    return float(values["pipeline_parallel_s"]), float(values["pipeline_parallel_transfer_s"])


def test_megatron_overlaps_the_interleaved_transfers_by_default():
    exposed, transfer = _p2p_s("megatron", 2)
    generic_exposed, generic_transfer = _p2p_s("generic", 2)
    assert transfer == generic_transfer > 0
    assert generic_exposed == generic_transfer  # blocking
    assert exposed < 0.5 * transfer  # under the next chunk's compute


def test_without_interleaving_the_transfers_block_under_megatron_too():
    assert _p2p_s("megatron", 1) == _p2p_s("generic", 1)


def test_the_default_is_the_recorded_parsers():
    fixture = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "exporters" / "megatron_lm_arguments.json").read_text())
    (argument,) = [a for a in fixture["arguments"] if a["dest"] == "overlap_p2p_comm"]
    assert argument["options"] == ["--no-overlap-p2p-communication"] and argument["kind"] == "store_false"
