"""Narayanan et al. 2021 Table 2 as data: ZeRO-3 without model parallelism against PTD-P.

Source: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM" (SC '21), section 5.2 and Table 2 ("Comparison of PTD
Parallelism to ZeRO-3 (without model parallelism)"): the 174.6B GPT (96 layers, h 12,288,
96 heads) and the 529.6B one (105 layers, h 20,480, 128 heads), s = 2,048, V = 51,200, A100
80GB DGX nodes with 8 x 200 Gb/s HDR InfiniBand, achieved TFLOP/s per GPU by eq. 3 (which
counts full recomputation). The figures are the paper's; the project's copy was checked
against two independent transcriptions of the table (the 174.6B rows against both, the
529.6B rows against one).

Mapping to vramopt plans (assumptions, each stated):

- ZeRO-3 rows: DeepSpeed ZeRO-3 at data parallelism = GPUs, the table's micro-batch,
  global batch / (GPUs x micro-batch) = 1 micro-batch per step, full recomputation (eq. 3
  assumes it), no flash attention (2021), 16-bit, collectives overlapped with compute
  (DeepSpeed ``overlap_comm`` and parameter prefetch); the recomputed forward gathers again
  the parameters DeepSpeed's release rule frees, two thirds of each layer of both models
  (costs/recompute_regather.py).
- PTD-P rows: Megatron-LM with the model-parallel size split as tp 8 x pp 12 (174.6B) and
  tp 8 x pp 35 (529.6B, Table 1's layout), micro-batch 1, full recomputation, local DDP
  (all-reduce after the backward, not overlapped). The table does not give the pipeline
  schedule: plain 1F1B is assumed (v = 1).
- The starred 529.6B ZeRO-3 row ran on 640 GPUs at batch 2,560 because it did not fit on
  560 at micro-batch 4; vramopt's memory model puts it above 80 GB (reported, not fitted).

Nothing is fitted on this table: every row is out of sample.
"""

from __future__ import annotations

import csv

from vramopt.validation.narayanan import GPU, SEQ_LEN, gpt_model
from vramopt.validation.published import DATA, PublishedRun
from vramopt.types import TrainingPlan

TABLE2_FILE = DATA / "narayanan_2021_table2.csv"


def table2_rows() -> list[dict[str, str]]:
    with TABLE2_FILE.open(newline="") as handle:
        return list(csv.DictReader(handle))


def table2_runs() -> tuple[PublishedRun, ...]:
    runs = []
    for row in table2_rows():
        zero3 = row["scheme"] == "zero3"
        plan = TrainingPlan(
            gpu=GPU, gpus=int(row["gpus"]), tensor_parallel=int(row["tensor_parallel"]),
            pipeline_parallel=int(row["pipeline_parallel"]), virtual_stages=1, zero_stage=3 if zero3 else 0,
            checkpointing="every:1", precision="bf16", grad_comm_precision="bf16", offload="none",
            flash_attention=False, sequence_parallel=False, micro_batch=int(row["micro_batch"]),
        )
        runs.append(PublishedRun(
            case_id=row["case_id"], metric="achieved_tflops_per_gpu", published=float(row["published_tflops_per_gpu"]),
            model=gpt_model(int(row["layers"]), int(row["hidden"]), int(row["heads"])), gpu=GPU, seq_len=SEQ_LEN,
            global_batch=int(row["global_batch"]), plan=plan, tolerance=None, tolerance_kind="", source=row["source"],
            # DeepSpeed overlaps ZeRO-3's gathers and reductions; Megatron-LM 2021's local DDP does not.
            data_parallel_overlap=zero3,
            # Megatron-LM 2021 (fp16) adds each micro-batch's gradients in a separate pass.
            unfused_gradient_accumulation=not zero3,
            # DeepSpeed's ZeRO-3 gathers the released parameters again for the recomputed forward.
            recompute_regathers_parameters=zero3,
        ))
    return tuple(runs)


def zero3_slowdowns(runs: tuple[PublishedRun, ...] | None = None) -> dict[str, tuple[float, float]]:
    """Per model size and GPU count where both schemes ran: (published, predicted) ratio of
    ZeRO-3's TFLOP/s per GPU to PTD-P's (below 1: ZeRO-3 is slower)."""
    runs = table2_runs() if runs is None else runs
    by_key = {}
    for run in runs:
        scheme, size, gpus = run.case_id.split("_")[2:5]
        by_key[(size, gpus, scheme)] = (run.published, run.predicted())
    ratios = {}
    for (size, gpus, scheme), (published, predicted) in by_key.items():
        if scheme == "zero3" and (size, gpus, "ptdp") in by_key:
            other_published, other_predicted = by_key[(size, gpus, "ptdp")]
            ratios[f"n21_t2_ratio_{size}_{gpus}"] = (published / other_published, predicted / other_predicted)
    return ratios
