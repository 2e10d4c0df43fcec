"""Uneven pipeline stages with virtual stages (issue 14 item 3, "uneven stages together with
interleaving"): Megatron-Core's ``--account-for-embedding-in-pipeline-split`` /
``--account-for-loss-in-pipeline-split`` form, where the embedding and the loss each take a
layer slot, so the ends hold one layer fewer than the chunks divide (Llama 3 405B: 126 + 2 =
128 slots = 16 stages x 2 chunks x 4 layers). Before, vramopt required every stage's count
to be divisible by the chunks, so Llama 3's 7 + 14 x 8 + 7 could only run plain 1F1B.
"""

from __future__ import annotations

import itertools

import pytest

from tests.cli_runner import invoke
from vramopt.costs.pipeline_stages import is_valid_split, stage_counts, stage_splits
from vramopt.estimate import estimate_training
from vramopt.errors import InputError
from vramopt.exporters.megatron import megatron_args
from vramopt.types import TrainingPlan, TrainingWorkload

LLAMA3_405B = dict(gpu="h100", gpus=128, tensor_parallel=8, pipeline_parallel=16, sequence_parallel=True, zero_stage=1,
                   first_stage_layers=7, last_stage_layers=7, checkpointing="every:1")
WORKLOAD = TrainingWorkload(model="405b", seq_len=8192, global_batch=64)


def test_llama3_405b_split_runs_two_and_four_chunks_and_refuses_three():
    """issue 14 item 3: 7 + 14 x 8 + 7 with 2 (or 4) chunks is Megatron's account-for form."""
    for chunks in (2, 4):
        estimate = estimate_training(WORKLOAD, TrainingPlan(**LLAMA3_405B, virtual_stages=chunks))
        assert estimate.values["tokens_per_s"] > 0
    with pytest.raises(InputError, match="virtual_stages > 1 needs"):
        estimate_training(WORKLOAD, TrainingPlan(**LLAMA3_405B, virtual_stages=3))


def test_interleaving_shrinks_the_bubble_of_the_uneven_split():
    """issue 14 item 3: the interleaved uneven plan is timed with the (p - 1) / v bubble."""
    plain = estimate_training(WORKLOAD, TrainingPlan(**LLAMA3_405B, virtual_stages=1)).values["tokens_per_s"]
    interleaved = estimate_training(WORKLOAD, TrainingPlan(**LLAMA3_405B, virtual_stages=2)).values["tokens_per_s"]
    assert interleaved > plain * 1.05


def _megatron_arguments(**changes) -> list[str]:
    plan = TrainingPlan(**dict(LLAMA3_405B, **changes))
    return megatron_args(estimate_training(WORKLOAD, plan, framework="megatron").to_dict()).content["arguments"]


def test_megatron_export_writes_the_account_for_flags_instead_of_the_stage_counts():
    """issue 14 item 3: Megatron-Core refuses --decoder-first/last-pipeline-num-layers with the
    account-for flags (TransformerConfig.__post_init__), and 7 % 2 refuses the counts form."""
    arguments = _megatron_arguments(virtual_stages=2)
    assert arguments[arguments.index("--num-virtual-stages-per-pipeline-rank") + 1] == "2"
    assert "--account-for-embedding-in-pipeline-split" in arguments and "--account-for-loss-in-pipeline-split" in arguments
    assert "--decoder-first-pipeline-num-layers" not in arguments and "--decoder-last-pipeline-num-layers" not in arguments


def test_megatron_export_keeps_the_stage_counts_when_the_chunks_divide_them():
    """issue 14 item 3: 6 + 14 x 8 + 8 with 2 chunks is the counts form (6 and 8 even)."""
    arguments = _megatron_arguments(first_stage_layers=6, last_stage_layers=0, virtual_stages=2)
    assert arguments[arguments.index("--decoder-first-pipeline-num-layers") + 1] == "6"
    assert not any(argument.startswith("--account-for") for argument in arguments)


def test_the_default_search_takes_four_chunks_on_llama3_405b():
    """issue 14 item 3: the default interleaving domain (1, 2, 4 where they split the stages)
    reaches 4 on 126 layers, which 4 does not divide; the solver picks an interleaved plan."""
    from vramopt.optimizer.search import solve
    from vramopt.types import SearchSpace

    space = SearchSpace(gpus=("h100",), max_gpus=128, pin={"pipeline_parallel": "16", "tensor_parallel": "8",
                                                           "first_stage_layers": "7", "last_stage_layers": "7"}, workers=1)
    result = solve(WORKLOAD, space, runner_up_count=0)
    assert result.estimate is not None and result.estimate.plan.virtual_stages in (2, 4)


def test_bad_interleaving_of_an_uneven_split_is_one_line_and_exit_2():
    """issue 14 item 3: 3 chunks do not split 8-layer stages: one error line, exit 2."""
    result = invoke(["estimate", "--model", "405b", "--seq-len", "8192", "--global-batch", "64", "--gpu", "h100",
                     "--gpus", "128", "--tp", "8", "--pp", "16", "--first-stage-layers", "7", "--last-stage-layers", "7",
                     "--virtual-stages", "3"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "virtual_stages" in lines[0]


def _megatron_cases():
    """(layers, stages, first, last, chunks) valid in vramopt at some chunk count > 1."""
    from vramopt.costs.pipeline_stages import interleaves_every_stage

    cases = []
    for layers, stages in ((126, 16), (126, 8), (61, 16), (94, 8), (94, 32), (32, 4), (30, 2), (31, 2)):
        pairs = set(stage_splits(layers, stages)) | {(0, 0)}
        pairs |= {(first, last) for first, last in itertools.product(range(0, 12), range(0, 12))
                  if is_valid_split(layers, stages, first, last)}
        for (first, last), chunks in itertools.product(sorted(pairs), (2, 3, 4)):
            if is_valid_split(layers, stages, first, last):
                cases.append((layers, stages, first, last, chunks, bool(interleaves_every_stage(layers, stages, first, last, chunks))))
    return cases


def test_the_interleaving_rule_agrees_with_megatron_cores_layer_builder():
    """issue 14 item 3: for every valid split of a few layer counts and 2-4 chunks, vramopt
    accepts the chunks exactly when Megatron-Core 0.16.1 builds them in one of its two forms
    (TransformerConfig with the stage counts, or with the account-for flags), and then
    get_num_layers_to_build gives each rank vramopt's layer count."""
    transformer = pytest.importorskip("megatron.core.transformer.transformer_config",
                                      reason="megatron-core is not installed (the 'frameworks' extra)")
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    import torch

    def megatron_counts(layers, stages, chunks, **pipeline):
        try:
            config = transformer.TransformerConfig(
                num_layers=layers, hidden_size=1024, num_attention_heads=8, pipeline_model_parallel_size=stages,
                virtual_pipeline_model_parallel_size=chunks, pipeline_dtype=torch.bfloat16, **pipeline)
            return [sum(get_num_layers_to_build(config, vp_stage=chunk, pp_rank=rank) for chunk in range(chunks))
                    for rank in range(stages)]
        except (ValueError, AssertionError):
            return None

    checked = 0
    for layers, stages, first, last, chunks, accepted in _megatron_cases():
        counts = stage_counts(layers, stages, first, last)
        forms = []
        if first or last:
            forms.append(megatron_counts(layers, stages, chunks, num_layers_in_first_pipeline_stage=first or None,
                                         num_layers_in_last_pipeline_stage=last or None))
        full = max(counts)
        embedding, loss = counts[0] == full - 1, counts[-1] == full - 1
        forms.append(megatron_counts(layers, stages, chunks, account_for_embedding_in_pipeline_split=embedding,
                                     account_for_loss_in_pipeline_split=loss))
        megatron_runs = any(form == counts for form in forms)
        assert megatron_runs == accepted, (layers, stages, first, last, chunks, counts, forms)
        checked += 1
    assert checked > 50


def test_deepspeed_note_names_the_megatron_flags_that_run_the_plan():
    """issue 14 item 3: DeepSpeed cannot run uneven stages (no per-stage counts, plain 1F1B);
    its export's note points to the Megatron-LM flags that do, the account-for form here."""
    from vramopt.exporters.deepspeed import deepspeed_config

    response = estimate_training(WORKLOAD, TrainingPlan(**LLAMA3_405B, virtual_stages=2)).to_dict()
    notes = " ".join(deepspeed_config(response).notes)
    assert "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split" in notes
    assert "--decoder-first-pipeline-num-layers" not in notes
