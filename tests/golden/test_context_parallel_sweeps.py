"""torchtitan's published context-parallel sweeps, predicted by vramopt (issue 12 item 4).

Source: pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Tables 2 and 6
(rows copied with their source into data/torchtitan_context_parallel_sweeps.csv from the
shared calibration set):
- Table 2: Llama 3.1 8B on 8 H100, FSDP x CP = 8, local batch 1, 32K to 256K tokens;
- Table 6: Llama 3.1 405B on 512 H100, TP 8, PP 8 (1F1B), FSDP x CP = 8, local batch 8.
Both with full activation checkpointing, torch.compile and Float8 linears.

How each run is mapped (assumptions named):
- FSDP = ZeRO-3 over dp x cp (torchtitan's ``dp_shard_cp`` mesh); one optimizer step of
  ``local batch x fsdp`` sequences (the tables give no global batch: no accumulation).
- Float8 linears = vramopt fp8; gradients reduced in bf16. Full AC = checkpointing every:1.
- The runs used H100 SXM 96 GB at 500 W (Grand Teton); vramopt's catalog H100 is the 80 GB
  DGX part. Memory is compared as a total, not as a fit.
- 405B: 126 layers do not split into 8 equal stages; torchtitan's heaviest stage holds 16,
  and that stage sets the step time and the peak memory, so the model is taken with 128
  layers (8 stages of 16). 1F1B with 1-sequence micro-batches: 8 micro-batches per step.
- 256K tokens exceed Llama 3.1's 131,072-token context; torchtitan ran them anyway, so the
  catalog's context limit is lifted for those rows.
- Peak memory is vramopt's total less the framework reserve (torch's peak counter excludes
  the CUDA context and NCCL buffers that the reserve stands for), as in the calibration set.

What is asserted: the shape. Peak memory roughly flat across each sweep (s/cp is constant)
and tokens/s per GPU falling as the sequence (and attention's share) grows, at every step.
The absolute error is printed per row and bounded only loosely: the accuracy target belongs
to the throughput-model issue (today's model charges the attention core at the fp8 rate
and at the GEMMs' utilization, which overestimates long-sequence throughput).
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from vramopt.costs.training import evaluate_training
from vramopt.estimate import training_case
from vramopt.models import count_parameters
from vramopt.plan import check_plan
from vramopt.types import TrainingPlan, TrainingWorkload
from vramopt.units import BYTES_PER_GIB

DATA = Path(__file__).resolve().parent / "data" / "torchtitan_context_parallel_sweeps.csv"
SHARED_CALIBRATION = Path(__file__).resolve().parents[3] / "shared" / "calibration" / "published-runs.csv"

FLAT_MEMORY_RATIO = 1.15
"""Largest / smallest predicted peak over a sweep. Published: 84.5 / 83.9 = 1.01 (8B) and
84.9 / 75.3 = 1.13 (405B)."""
LOOSE_THROUGHPUT_ERROR = 2.5
"""|predicted / published - 1| bound per row: a guard against a broken model, not an
accuracy claim (recorded errors +93% to +189% for 8B; see the module docstring)."""


def rows() -> list[dict[str, str]]:
    with DATA.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _model_for(row, base):
    model = replace(base, max_context=max(base.max_context, int(row["seq_len"])))
    pipeline = int(row["pipeline_parallel"])
    if model.layers % pipeline:
        layers = -(-model.layers // pipeline) * pipeline  # the heaviest stage, repeated on every stage
        dimensions = {name: getattr(model, name) for name in (
            "hidden_size", "heads", "kv_heads", "head_dim", "ffn_hidden_size", "vocab_size", "gated_mlp",
            "tied_embeddings", "attention_bias", "mlp_bias", "norm", "learned_positions")}
        model = replace(model, layers=layers, parameters=count_parameters(layers=layers, **dimensions))
    return model


def predict(row) -> dict[str, float]:
    fsdp, cp = int(row["fsdp"]), int(row["context_parallel"])
    gpus, tp, pp = int(row["gpus"]), int(row["tensor_parallel"]), int(row["pipeline_parallel"])
    seq_len, local_batch = int(row["seq_len"]), int(row["local_batch"])
    data_parallel = gpus // (tp * cp * pp)
    workload = TrainingWorkload(model=row["model"], seq_len=min(seq_len, 131072), global_batch=local_batch * data_parallel)
    case = training_case(workload, "h100")
    case = replace(case, model=_model_for(row, case.model), seq_len=seq_len)
    plan = TrainingPlan(
        gpu="h100", gpus=gpus, tensor_parallel=tp, context_parallel=cp, pipeline_parallel=pp,
        sequence_parallel=tp > 1, zero_stage=3, checkpointing="every:1", precision="fp8", grad_comm_precision="bf16",
        micro_batch=1,
    )
    assert data_parallel == fsdp, row["case_id"]  # torchtitan dp_shard = vramopt dp; ZeRO spans dp x cp
    values = {name: float(np.asarray(value).reshape(-1)[0]) for name, value in evaluate_training(case, check_plan(case, plan)).items()}
    return {
        "tokens_per_s_per_gpu": values["tokens_per_s"] / gpus,
        "peak_memory_gib": (values["total_bytes"] - values["reserve_bytes"]) / BYTES_PER_GIB,
        "context_parallel_s": values["context_parallel_s"],
        "context_parallel_transfer_s": values["context_parallel_transfer_s"],
    }


def sweeps() -> dict[str, list[dict[str, str]]]:
    grouped: dict[str, list[dict[str, str]]] = {}
    for row in rows():
        grouped.setdefault(row["model"], []).append(row)
    return {model: sorted(group, key=lambda row: int(row["seq_len"])) for model, group in grouped.items()}


def report() -> str:
    lines = [f"{'case':<38} {'tok/s/GPU pred':>14} {'published':>9} {'error':>7} {'GiB pred':>8} {'published':>9}"]
    for row in rows():
        predicted = predict(row)
        published = float(row["published_tokens_per_s_per_gpu"])
        error = predicted["tokens_per_s_per_gpu"] / published - 1
        lines.append(f"{row['case_id']:<38} {predicted['tokens_per_s_per_gpu']:>14,.1f} {published:>9,.1f} {error:>+7.0%} "
                     f"{predicted['peak_memory_gib']:>8.1f} {float(row['published_peak_memory_gib']):>9.1f}")
    return "\n".join(lines)


def test_the_sweeps_are_the_two_published_tables():
    assert {model: [int(row["context_parallel"]) for row in group] for model, group in sweeps().items()} == {
        "llama-3.1-8b": [1, 2, 4, 8], "llama-3.1-405b": [1, 2, 4, 8]}
    for row in rows():
        # FSDP x CP = 8 in every row; s / cp = 32K tokens per rank in every row.
        assert int(row["fsdp"]) * int(row["context_parallel"]) == 8
        assert int(row["seq_len"]) // int(row["context_parallel"]) == 32768


@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-3.1-405b"])
def test_peak_memory_is_roughly_flat_as_the_sequence_grows_with_cp(model):
    memory = [predict(row)["peak_memory_gib"] for row in sweeps()[model]]
    assert max(memory) / min(memory) <= FLAT_MEMORY_RATIO, (memory, report())


@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-3.1-405b"])
def test_tokens_per_gpu_fall_as_attention_grows(model):
    group = sweeps()[model]
    predicted = [predict(row)["tokens_per_s_per_gpu"] for row in group]
    published = [float(row["published_tokens_per_s_per_gpu"]) for row in group]
    assert all(later < earlier for earlier, later in zip(published, published[1:]))  # the data's own shape
    assert all(later < earlier for earlier, later in zip(predicted, predicted[1:])), (predicted, report())
    # Over the sweep (8x the sequence) at least half the throughput per GPU goes, as in the
    # data (to 0.14 and 0.21 of the 32K figure; vramopt 0.21 and 0.42: its attention is
    # charged at the GEMMs' rate, so the slope is too shallow -- the throughput-model issue).
    assert predicted[-1] / predicted[0] <= 0.5, (predicted, report())


def test_absolute_error_is_reported_and_loosely_bounded():
    for row in rows():
        error = predict(row)["tokens_per_s_per_gpu"] / float(row["published_tokens_per_s_per_gpu"]) - 1
        assert abs(error) <= LOOSE_THROUGHPUT_ERROR, report()


def test_the_ring_is_hidden_behind_attention_at_these_lengths():
    # 32K tokens per rank: each ring step's attention takes far longer than its KV chunk,
    # on NVLink (8B, one node) and across nodes (405B: tp 8 x cp spans more than a node).
    for row in rows():
        predicted = predict(row)
        if int(row["context_parallel"]) > 1:
            assert predicted["context_parallel_transfer_s"] > 0
        assert predicted["context_parallel_s"] == 0.0, row["case_id"]


@pytest.mark.skipif(not SHARED_CALIBRATION.is_file(), reason="the shared calibration set is outside this repository")
def test_copied_rows_match_the_shared_calibration_set():
    import json

    shared = {row["case_id"]: row for row in csv.DictReader(SHARED_CALIBRATION.open(newline=""))}
    for row in rows():
        source = shared[row["case_id"]]
        expected, inputs = json.loads(source["expected"]), json.loads(source["inputs"])
        assert float(row["published_tokens_per_s_per_gpu"]) == expected["tokens_per_sec_per_gpu"]
        assert float(row["published_peak_memory_gib"]) == expected["peak_memory_gib"]
        assert int(row["seq_len"]) == inputs["seq_len"] and int(row["context_parallel"]) == inputs["parallelism"]["cp"]
        assert row["source"] == source["source"]


if __name__ == "__main__":
    print(report())
