"""--export megatron (issue 15 item 2): the arguments parse with Megatron-LM core_v0.16.1's
parser (its record in tests/fixtures/exporters/megatron_lm_arguments.json, written from the
real parser by benchmarks/megatron_arguments_fixture.py; the real parser too when MEGATRON_LM
names a checkout), and build megatron.core's TransformerConfig where megatron-core installs."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from vramopt.errors import InputError
from vramopt.estimate import estimate_training
from vramopt.exporters.megatron import RELEASE, megatron_args
from vramopt.optimizer.search import solve
from vramopt.types import SearchSpace, TrainingPlan, TrainingWorkload

FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "exporters" / "megatron_lm_arguments.json").read_text())
TYPES = {"int": int, "float": float, "str": str}

PLANS = {
    "tp2-sp-pp2-vpp2-distopt-selective": (TrainingWorkload(model="8b", global_batch=64),
                                          TrainingPlan(gpu="h100", gpus=8, tensor_parallel=2, sequence_parallel=True, pipeline_parallel=2,
                                                       virtual_stages=2, zero_stage=1, checkpointing="selective")),
    "cp2-fp8-every2": (TrainingWorkload(model="8b", seq_len=16384, global_batch=16),
                       TrainingPlan(gpu="h100", gpus=8, tensor_parallel=2, context_parallel=2, zero_stage=1, precision="fp8",
                                    grad_comm_precision="bf16", checkpointing="every:2")),
    "offload-fp32-reduce-no-flash": (TrainingWorkload(model="8b", seq_len=2048, global_batch=32),
                                     TrainingPlan(gpu="h100", gpus=4, zero_stage=1, offload="cpu", grad_comm_precision="fp32",
                                                  flash_attention=False, checkpointing="full")),
    # Llama 3 405B's uneven stages (issue 14 item 3): 7 + 14 x 8 + 7 layers.
    "405b-tp8-pp16-uneven": (TrainingWorkload(model="405b", seq_len=8192, global_batch=64),
                             TrainingPlan(gpu="h100", gpus=128, tensor_parallel=8, sequence_parallel=True, pipeline_parallel=16,
                                          first_stage_layers=7, last_stage_layers=7, zero_stage=1, checkpointing="full")),
    "mixtral-moe": (TrainingWorkload(model="mixtral-8x7b", global_batch=64),
                    TrainingPlan(gpu="h100", gpus=16, tensor_parallel=8, sequence_parallel=True, zero_stage=1, checkpointing="full")),
}


def fixture_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for argument in FIXTURE["arguments"]:
        options = argument["options"]
        if argument["kind"] in ("store_true", "store_false"):
            parser.add_argument(*options, dest=argument["dest"], action=argument["kind"])
            continue
        if argument["kind"] == "store_const" or argument["nargs"] == 0:  # a flag (custom actions take no value)
            parser.add_argument(*options, dest=argument["dest"], action="store_const", const=True)
            continue
        kwargs = {"dest": argument["dest"], "type": TYPES.get(argument["type"] or "str", str)}
        if argument["nargs"] is not None:
            kwargs["nargs"] = argument["nargs"]
        if argument["choices"] is not None:
            # Enum choices are recorded as 'AttnBackend.flash'; the command line gives 'flash'.
            kwargs["choices"] = [choice.split(".")[-1] if argument["type"] == "enum_type_handler" else choice for choice in argument["choices"]]
        if argument["kind"] == "append":
            kwargs["action"] = "append"
        parser.add_argument(*options, **kwargs)
    return parser


def test_the_fixture_is_the_release_the_exporter_targets():
    assert FIXTURE["release"] == RELEASE and len(FIXTURE["arguments"]) > 600


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_arguments_parse_with_megatrons_parser(name):
    workload, plan = PLANS[name]
    result = megatron_args(estimate_training(workload, plan, framework="megatron").to_dict())
    arguments = result.content["arguments"]
    parsed = fixture_parser().parse_args(arguments)
    assert parsed.tensor_model_parallel_size == plan.tensor_parallel
    assert parsed.pipeline_model_parallel_size == plan.pipeline_parallel
    assert parsed.context_parallel_size == plan.context_parallel
    assert parsed.micro_batch_size == plan.micro_batch and parsed.global_batch_size == workload.global_batch
    assert parsed.use_distributed_optimizer == (plan.zero_stage == 1)
    # The step time overlaps the data-parallel reduction with the backward: Megatron does so only
    # with --overlap-grad-reduce (off by default), which a plan with dp > 1 must ask for.
    data_parallel = estimate_training(workload, plan, framework="megatron").to_dict()["plan"]["data_parallel"]
    assert parsed.overlap_grad_reduce == (data_parallel > 1)
    assert shlex.split(result.content["launch"])[:5] == ["torchrun", "--nnodes", str(max(1, plan.gpus // 8)), "--nproc-per-node",
                                                         str(min(plan.gpus, 8))]
    if "MEGATRON_LM" in os.environ:  # the real parser of a checkout at the release
        sys.path.insert(0, os.environ["MEGATRON_LM"])
        from megatron.training.arguments import add_megatron_arguments

        add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False)).parse_args(arguments)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_arguments_build_megatron_cores_transformer_config(name):
    transformer = pytest.importorskip("megatron.core.transformer.transformer_config",
                                      reason="megatron-core is not installed (the 'frameworks' extra)")
    import torch

    workload, plan = PLANS[name]
    parsed = fixture_parser().parse_args(megatron_args(estimate_training(workload, plan, framework="megatron").to_dict()).content["arguments"])
    # As Megatron-LM's core_transformer_config_from_args maps them (megatron/training/arguments.py).
    transformer.TransformerConfig(
        num_layers=parsed.num_layers, hidden_size=parsed.hidden_size, num_attention_heads=parsed.num_attention_heads,
        ffn_hidden_size=parsed.ffn_hidden_size, kv_channels=parsed.kv_channels, num_query_groups=parsed.num_query_groups,
        tensor_model_parallel_size=parsed.tensor_model_parallel_size, pipeline_model_parallel_size=parsed.pipeline_model_parallel_size,
        context_parallel_size=parsed.context_parallel_size, sequence_parallel=parsed.sequence_parallel,
        virtual_pipeline_model_parallel_size=parsed.num_virtual_stages_per_pipeline_rank,
        num_layers_in_first_pipeline_stage=parsed.decoder_first_pipeline_num_layers,
        num_layers_in_last_pipeline_stage=parsed.decoder_last_pipeline_num_layers,
        pipeline_dtype=torch.bfloat16 if parsed.bf16 else (torch.float16 if parsed.fp16 else torch.float32),
        bf16=parsed.bf16, fp16=parsed.fp16, fp8=parsed.fp8,
        recompute_granularity=parsed.recompute_granularity, recompute_method=parsed.recompute_method,
        recompute_num_layers=parsed.recompute_num_layers, gated_linear_unit=parsed.swiglu,
        normalization=parsed.normalization, add_bias_linear=parsed.add_bias_linear,
        num_moe_experts=parsed.num_experts, moe_router_topk=parsed.moe_router_topk or 2,
        moe_ffn_hidden_size=parsed.moe_ffn_hidden_size,
    )


def test_a_plan_megatron_cannot_run_is_refused_not_exported():
    response = estimate_training(TrainingWorkload(model="8b", global_batch=64), TrainingPlan(gpu="h100", gpus=8, zero_stage=3)).to_dict()
    with pytest.raises(InputError, match="cannot run under --framework megatron.*zero_stage must be 0 or 1"):
        megatron_args(response)


def test_a_solved_megatron_plan_exports_and_parses():
    response = solve(TrainingWorkload(model="70b"), SearchSpace(max_gpus=16, framework="megatron")).to_dict()
    fixture_parser().parse_args(megatron_args(response).content["arguments"])
