"""Uneven pipeline stages (issue 14 item 3): the Megatron-Core assignment, its rules, the
heaviest stage's memory and the slowest stage's time, the search domain, the exports and
bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.cli_runner import invoke
from vramopt.costs.columns import PlanColumns
from vramopt.costs.pipeline_stages import (
    is_valid_split,
    pipeline_degrees,
    stage_counts,
    stage_splits,
    uneven_invalid_reasons,
)
from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.errors import InputError
from vramopt.estimate import estimate_training
from vramopt.exporters.megatron import megatron_args
from vramopt.exporters.torchtitan import torchtitan_args
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.types import PRECISIONS, TrainingPlan, TrainingWorkload

BF16 = PRECISIONS.index("bf16")


def megatron_stage_counts(layers: int, stages: int, first: int | None, last: int | None) -> list[int]:
    """Megatron-Core's assignment written out from TransformerConfig.__post_init__ and
    get_num_layers_to_build (core_v0.16.1): given ends, the rest evenly over the middle."""
    middle_stages = stages - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    assert middle_stages == 0 or rest % middle_stages == 0
    middle = rest // middle_stages if middle_stages else 0
    counts = [middle] * stages
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return counts


def test_llama3_405b_layout_is_seven_fourteen_eights_and_seven():
    """Llama 3 paper section 3.3.2: 126 layers on 16 stages, one fewer on the first and last."""
    assert (7, 7) in stage_splits(126, 16)
    assert stage_counts(126, 16, 7, 7) == megatron_stage_counts(126, 16, 7, 7) == [7] + [8] * 14 + [7]
    assert sum(stage_counts(126, 16, 0, 6)) == 126 and stage_counts(126, 16, 0, 6)[-1] == 6


@pytest.mark.parametrize("layers", [61, 126, 95, 27])
@pytest.mark.parametrize("stages", [2, 4, 8, 16])
def test_every_default_split_is_valid_complete_and_balanced(layers, stages):
    for first, last in stage_splits(layers, stages):
        assert is_valid_split(layers, stages, first, last)
        counts = stage_counts(layers, stages, first, last)
        assert counts == megatron_stage_counts(layers, stages, first or None, last or None)
        assert len(counts) == stages and sum(counts) == layers and min(counts) >= 1
        assert max(counts) == -(-layers // stages)  # the most balanced Megatron can express


def test_prime_layer_counts_pipeline_and_even_degrees_keep_only_the_even_split():
    assert pipeline_degrees(61, 2048) == (1, 2, 4, 8, 16, 61)  # DeepSeek-V3: 61 is prime
    assert stage_splits(61, 16) == ((3, 2), (2, 3))  # ends one layer apart at most
    assert stage_splits(126, 16) == ((7, 7),)
    assert stage_splits(80, 16) == ((0, 0),) and stage_splits(80, 32) == ()
    assert pipeline_degrees(80, 2048) == (1, 2, 4, 5, 8, 10, 16, 20, 40, 80)  # unchanged for 80 layers


@pytest.mark.parametrize(("stages", "first", "last", "message"), [
    (1, 7, 0, "need pipeline_parallel > 1"),
    (16, 120, 6, "at least one layer"),
    (16, 6, 6, "divide evenly"),
    (2, 30, 30, "must equal the layers"),
])
def test_megatrons_rules_on_the_assignment(stages, first, last, message):
    columns = _columns(stages, first, last)
    broken = [reason for reason, mask in uneven_invalid_reasons(126, columns).items() if bool(np.any(mask))]
    assert len(broken) == 1 and message in broken[0]
    assert not is_valid_split(126, stages, first, last)


def _columns(pp, first=0, last=0, checkpoint_kind=0, every=0, virtual=1, tp=8, dp=1):
    return PlanColumns.from_scalars(
        gpus=tp * pp * dp, tensor_parallel=tp, pipeline_parallel=pp, data_parallel=dp, sequence_parallel=1,
        virtual_stages=virtual, zero_stage=1, checkpoint_kind=checkpoint_kind, checkpoint_every=every, precision=BF16,
        grad_comm_precision=BF16, offload=0, flash_attention=1, micro_batch=1, first_stage_layers=first, last_stage_layers=last)


def test_the_slowest_stage_sets_the_compute_time():
    """Operator time is linear in a stage's layers plus the head on the last stage: two even
    plans give the per-layer and head times, from which the uneven plan's slowest stage
    follows without calling the uneven code path."""
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100")
    case = TrainingCase(model=model, gpu=gpu, seq_len=4096, global_batch=64)
    per_micro_batch = {}
    for pp, first, last in ((2, 0, 0), (4, 0, 0), (4, 0, 5), (4, 11, 0)):
        values = evaluate_training(case, _columns(pp, first, last))
        per_micro_batch[(pp, first, last)] = float(values["compute_s"][0]) / (values["micro_batches"][0] + pp - 1)
    per_layer = (per_micro_batch[(2, 0, 0)] - per_micro_batch[(4, 0, 0)]) / 8  # 16 vs 8 layers, same head
    head = per_micro_batch[(4, 0, 0)] - 8 * per_layer
    assert head > 0
    # 9 + 9 + 9 + 5: a middle stage of 9 layers against the last's 5 layers and the head.
    assert per_micro_batch[(4, 0, 5)] == pytest.approx(max(9 * per_layer, 5 * per_layer + head), rel=1e-9)
    # 11 + 7 + 7 + 7: the first stage's 11 layers against 7 and the head.
    assert per_micro_batch[(4, 11, 0)] == pytest.approx(max(11 * per_layer, 7 * per_layer + head), rel=1e-9)


def test_the_heaviest_stage_sets_weights_and_activations():
    model, gpu = load_model("llama-3.1-405b"), load_gpu("h100")
    case = TrainingCase(model=model, gpu=gpu, seq_len=8192, global_batch=64)
    per_layer = (model.parameters.total - model.parameters.embedding) / model.layers
    uneven = evaluate_training(case, _columns(16, 7, 7))
    # 8 layers on a middle stage weigh more than 7 and half the (untied) embedding.
    assert 8 * per_layer > 7 * per_layer + model.parameters.embedding / 2
    expected_weights = 8 * per_layer / 8 * 2  # / tp, bf16
    assert float(uneven["weights_bytes"][0]) == pytest.approx(expected_weights, rel=1e-12)
    # Activations (1F1B, m = 64 >= p): stage i keeps min(p - i, m) micro-batches of its layers.
    # 7 + 14 x 8 + 7: stage 0 holds 16 x 7 = 112 layer-micro-batches, stage 1 15 x 8 = 120;
    # 8 + 14 x 8 + 6 (written (0, 6)): stage 0 holds 16 x 8 = 128; 6 + 15 x 8: stage 1's 120 again.
    first_heavy = evaluate_training(case, _columns(16, 0, 6))
    first_light = evaluate_training(case, _columns(16, 6, 0))
    assert float(first_heavy["activations_bytes"][0]) == pytest.approx(float(uneven["activations_bytes"][0]) * 128 / 120, rel=1e-12)
    assert float(first_light["activations_bytes"][0]) == pytest.approx(float(uneven["activations_bytes"][0]), rel=1e-12)


def test_checkpoint_every_k_and_virtual_stages_must_divide_every_stage():
    workload = TrainingWorkload(model="405b", seq_len=8192, global_batch=64)
    plan = dict(gpu="h100", gpus=128, tensor_parallel=8, pipeline_parallel=16, sequence_parallel=True, zero_stage=1,
                first_stage_layers=7, last_stage_layers=7)
    estimate_training(workload, TrainingPlan(**plan, checkpointing="every:1"))
    # 7 is odd, but 7 + 14 x 8 + 7 is the embedding/loss-slot form (128 slots = 16 x 2 x 4):
    # Megatron runs 2 and 4 chunks with --account-for-*-in-pipeline-split, not 3 (8 % 3).
    estimate_training(workload, TrainingPlan(**plan, virtual_stages=2))
    with pytest.raises(InputError, match="virtual_stages > 1 needs"):
        estimate_training(workload, TrainingPlan(**plan, virtual_stages=3))
    with pytest.raises(InputError, match="virtual_stages > 1 needs"):  # 6 + 14 x 8 + 8: two short of 8
        estimate_training(workload, TrainingPlan(**dict(plan, first_stage_layers=6, last_stage_layers=0), virtual_stages=4))
    with pytest.raises(InputError, match="checkpointing every k"):
        estimate_training(workload, TrainingPlan(**plan, checkpointing="every:8"))  # above the 7-layer ends


def _llama3_405b_plan(**changes):
    plan = dict(gpu="h100", gpus=128, tensor_parallel=8, pipeline_parallel=16, sequence_parallel=True, zero_stage=1,
                first_stage_layers=7, last_stage_layers=7, checkpointing="full", grad_comm_precision="fp32")
    plan.update(changes)
    return TrainingWorkload(model="405b", seq_len=8192, global_batch=64), TrainingPlan(**plan)


def test_megatron_export_carries_the_first_and_last_stage_flags():
    workload, plan = _llama3_405b_plan()
    arguments = megatron_args(estimate_training(workload, plan, framework="megatron").to_dict()).content["arguments"]
    assert arguments[arguments.index("--decoder-first-pipeline-num-layers") + 1] == "7"
    assert arguments[arguments.index("--decoder-last-pipeline-num-layers") + 1] == "7"


def test_torchtitan_export_reproduces_the_split_with_its_less_layers_fields():
    workload, plan = _llama3_405b_plan(zero_stage=3, checkpointing="every:1")
    arguments = torchtitan_args(estimate_training(workload, plan, framework="torchtitan").to_dict()).content["arguments"]
    value = {name: arguments[arguments.index(name) + 1] for name in (
        "--parallelism.pipeline_parallel_layers_per_stage", "--parallelism.pipeline_parallel_first_stage_less_layers",
        "--parallelism.pipeline_parallel_last_stage_less_layers")}
    assert list(value.values()) == ["8", "1", "1"]
    pipeline = pytest.importorskip("torchtitan.distributed.pipeline_parallel", reason="torchtitan is not installed")
    # torchtitan 0.3.0's own split of 126 layers with those weights over 16 stages.
    stages = pipeline._generate_llm_fqn_per_model_part(16, 126, 1, 1)
    assert [sum(name.startswith("layers.") for name in stage) for stage in stages] == stage_counts(126, 16, 7, 7)


def test_deepspeed_cannot_run_uneven_stages():
    workload, plan = _llama3_405b_plan()
    with pytest.raises(InputError, match="PipelineModule splits the layers"):
        estimate_training(workload, plan, framework="deepspeed")


def test_estimate_accepts_and_displays_the_fields():
    result = invoke(["estimate", "--model", "405b", "--gpu", "h100", "--gpus", "128", "--tp", "8", "--pp", "16",
                     "--first-stage-layers", "7", "--last-stage-layers", "7", "--seq-len", "8192", "--global-batch", "64",
                     "--zero", "1", "--checkpoint", "full", "--format", "json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["plan"]
    assert plan["first_stage_layers"] == 7 and plan["last_stage_layers"] == 7
    table = invoke(["estimate", "--model", "405b", "--gpu", "h100", "--gpus", "128", "--tp", "8", "--pp", "16",
                    "--first-stage-layers", "7", "--last-stage-layers", "7", "--seq-len", "8192", "--global-batch", "64"])
    assert "pp=16 first_stage_layers=7 last_stage_layers=7 dp=1" in table.stdout


@pytest.mark.parametrize(("options", "message"), [
    (["--pp", "16", "--first-stage-layers", "120", "--last-stage-layers", "6"], "at least one layer"),
    (["--pp", "16", "--first-stage-layers", "6", "--last-stage-layers", "6"], "divide evenly"),
    (["--pp", "1", "--gpus", "8", "--first-stage-layers", "7"], "need pipeline_parallel > 1"),
    (["--pp", "16"], "pipeline_parallel must divide the layers"),
])
def test_bad_assignments_are_one_line_and_exit_2(options, message):
    arguments = ["estimate", "--model", "405b", "--gpu", "h100", "--tp", "8", "--seq-len", "8192", "--global-batch", "64"]
    if "--gpus" not in options:
        arguments += ["--gpus", "128"]
    result = invoke(arguments + options)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_solve_pins_a_split_outside_the_default_domain():
    from vramopt.optimizer.search import solve
    from vramopt.types import SearchSpace

    workload = TrainingWorkload(model="405b", seq_len=8192, global_batch=64)
    space = SearchSpace(gpus=("h100",), max_gpus=128, pin={"pipeline_parallel": "16", "tensor_parallel": "8",
                                                             "first_stage_layers": "5", "last_stage_layers": "9"}, workers=1)
    result = solve(workload, space, runner_up_count=0)
    assert result.estimate is not None
    assert (result.estimate.plan.first_stage_layers, result.estimate.plan.last_stage_layers) == (5, 9)


@pytest.mark.parametrize(("layers", "stages", "first", "last"), [
    (126, 16, 7, 7), (126, 16, 6, 6), (126, 16, 0, 6), (61, 16, 3, 2), (61, 16, 2, 2), (61, 2, 30, 0), (61, 4, 0, 13),
    (61, 4, 0, 14), (32, 4, 0, 0), (126, 16, 0, 0),
])
def test_the_rules_agree_with_megatron_cores_transformer_config(layers, stages, first, last):
    transformer = pytest.importorskip("megatron.core.transformer.transformer_config",
                                      reason="megatron-core is not installed (the 'frameworks' extra)")
    import torch

    def build():
        transformer.TransformerConfig(
            num_layers=layers, hidden_size=1024, num_attention_heads=8, pipeline_model_parallel_size=stages,
            pipeline_dtype=torch.bfloat16, num_layers_in_first_pipeline_stage=first or None,
            num_layers_in_last_pipeline_stage=last or None)

    if is_valid_split(layers, stages, first, last) or (first == last == 0):
        build()  # Megatron-Core accepts it (its even-split check is at model build, not here)
    else:
        with pytest.raises(ValueError):
            build()
