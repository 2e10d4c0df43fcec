"""Framework memory accounting against the frameworks' own estimators and published
measurements (issue 15 item 3). Prints three tables; nothing here was fitted to them.

1. DeepSpeed's documented estimator examples (deepspeedai/DeepSpeed
   docs/code-docs/source/memory.rst: T5-3B, 2851M parameters, largest layer 32M, 1 node x 8
   GPUs; printed in GiB): the page's figure, DeepSpeed 0.19.8's estimator (when DeepSpeed is
   installed), vramopt --framework deepspeed, and the generic accounting with the same inputs.
2. Megatron-LM's analysis-tool peak memory for Llama-2-7B layouts (Megatron-LM PR #482,
   tools/get_training_info/README.md; ../shared/calibration/published-runs.csv rows
   megpr482_*): bf16, distributed optimizer, flash attention, no recompute. The source does
   not state the sequence length; both 2048 and 4096 are shown (an assumption either way).
   Compared without the framework reserve (torch.cuda.max_memory_allocated excludes the CUDA
   context and NCCL buffers), in GB (1e9) as printed.
3. torchtitan's published peak memory (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md
   Tables 1-6 and benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md; every torchtitan row of
   ../shared/calibration/published-runs.csv with a peak in GiB, copied with its source into
   benchmarks/data/torchtitan_peak_memory.csv with the plan each maps to), GiB.

Usage: python benchmarks/framework_memory_comparison.py
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np

from vramopt.costs.columns import OFFLOAD_CPU, OFFLOAD_NONE, OFFLOAD_NVME
from vramopt.costs.training import evaluate_training
from vramopt.errors import VramoptError
from vramopt.estimate import estimate_training, training_case
from vramopt.frameworks.memory import deepspeed_model_state_terms
from vramopt.plan import check_plan
from vramopt.types import TrainingPlan, TrainingWorkload

GIB, GB = 2**30, 1e9
PARAMS, LARGEST, GPUS = 2851e6, 32e6, 8
EXAMPLES = [  # zero, offload, page's GiB, DeepSpeed options
    (2, OFFLOAD_CPU, 5.31, "ZeRO-2 offload_optimizer=cpu"),
    (2, OFFLOAD_NONE, 15.93, "ZeRO-2 offload_optimizer=none"),
    (3, OFFLOAD_NONE, 6.09, "ZeRO-3 offload none"),
    (3, OFFLOAD_CPU, 0.78, "ZeRO-3 offload_optimizer=cpu"),
    (3, OFFLOAD_NVME, 0.12, "ZeRO-3 offload param+optimizer (vramopt nvme)"),
]
MEGATRON_ROWS = [  # name, dp, tp, pp, micro-batch, global batch, measured GB
    ("dp8 tp1 pp1 mbs2", 8, 1, 1, 2, 2048, 69.1),
    ("dp4 tp2 pp1 mbs4", 4, 2, 1, 4, 512, 55.7),
    ("dp4 tp1 pp2 mbs2", 4, 1, 2, 2, 2048, 49.8),
    ("dp1 tp8 pp1 mbs4", 1, 8, 1, 4, 128, 28.8),
]
TORCHTITAN_FILE = Path(__file__).parent / "data" / "torchtitan_peak_memory.csv"


def generic_states(zero: int, offload: int) -> float:
    """costs/memory.model_state_bytes with the same inputs: 2 B weights, 2 B gradients, 12 B
    Adam (ZeRO sharding), two largest layers gathered at ZeRO-3, offload moving the states."""
    weights = 2 * PARAMS / (GPUS if zero >= 3 else 1) + (2 * LARGEST * 2 if zero >= 3 else 0)
    gradients = 2 * PARAMS / (GPUS if zero >= 2 else 1)
    optimizer = 0 if offload != OFFLOAD_NONE else 12 * PARAMS / GPUS
    if offload == OFFLOAD_NVME:
        weights, gradients = 2 * LARGEST * 2, 2 * LARGEST * 2
    return weights + gradients + optimizer


def deepspeed_code(zero: int, offload: int) -> float | None:
    try:
        from deepspeed.runtime.zero import stage3, stage_1_and_2
    except ImportError:
        return None
    if zero == 2:
        return stage_1_and_2.estimate_zero2_model_states_mem_needs(PARAMS, GPUS, 1, cpu_offload=offload != OFFLOAD_NONE)[1]
    return stage3.estimate_zero3_model_states_mem_needs(PARAMS, LARGEST, GPUS, 1, cpu_offload=offload != OFFLOAD_NONE,
                                                        cpu_offload_params=offload == OFFLOAD_NVME)[1]


def states_total(values) -> float:
    return sum(values[name] for name in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "logits_bytes"))


def main() -> None:
    print("1. DeepSpeed estimator examples (T5-3B, 8 GPUs), GiB per GPU")
    print(f"{'case':<48}{'page':>7}{'DS 0.19.8':>11}{'vramopt ds':>12}{'generic':>9}{'ds err':>8}{'generic err':>12}")
    for zero, offload, page, name in EXAMPLES:
        ours = float(sum(np.asarray(term).item() for term in deepspeed_model_state_terms(PARAMS, GPUS, LARGEST, zero, offload).values()))
        code = deepspeed_code(zero, offload)
        reference = code if code is not None else page * GIB
        generic = generic_states(zero, offload)
        code_text = f"{code / GIB:.2f}" if code is not None else "n/a"
        print(f"{name:<48}{page:>7.2f}{code_text:>11}{ours / GIB:>12.2f}{generic / GIB:>9.2f}"
              f"{(ours - reference) / reference:>8.1%}{(generic - reference) / reference:>12.1%}")
    print("   (errors against DeepSpeed 0.19.8's estimator; its page's ZeRO-2 no-offload figure is an older formula)")
    print()
    print("2. Megatron-LM analysis tool, Llama-2-7B bf16, distributed optimizer, GB (1e9) per GPU without the reserve")
    print(f"{'layout':<20}{'measured':>9}" + "".join(f"{f'seq {s} {fw}':>22}" for s in (2048, 4096) for fw in ("generic", "megatron")))
    for name, dp, tp, pp, micro, global_batch, measured in MEGATRON_ROWS:
        cells = []
        for seq_len in (2048, 4096):
            for framework in ("generic", "megatron"):
                plan = TrainingPlan(gpu="h100", gpus=8, tensor_parallel=tp, pipeline_parallel=pp, zero_stage=1, micro_batch=micro,
                                    grad_comm_precision="fp32" if framework == "megatron" else "bf16")
                total = states_total(estimate_training(TrainingWorkload(model="llama-2-7b", seq_len=seq_len, global_batch=global_batch),
                                                       plan, framework=framework).values)
                cells.append(f"{total / GB:>13.1f} ({(total / GB - measured) / measured:+.0%})")
        print(f"{name:<20}{measured:>9.1f}" + "".join(f"{cell:>22}" for cell in cells))
    print()
    print("3. torchtitan peak memory (benchmarks/data/torchtitan_peak_memory.csv: every torchtitan row of the calibration set")
    print("   with a peak in GiB), GiB per GPU without the framework reserve; vramopt evaluates the plan each row maps to")
    print(f"{'case':<40}{'published':>10}{'generic':>16}{'torchtitan':>16}  expressible")
    errors = {"generic": [], "torchtitan": []}
    for row in torchtitan_rows():
        cells = []
        for framework in ("generic", "torchtitan"):
            total = torchtitan_row_gib(row, framework)
            if total is None:
                cells.append(f"{'n/a':>16}")
                continue
            error = total / float(row["published_gib"]) - 1.0
            errors[framework].append(abs(error))
            cells.append(f"{total:>9.1f} ({error:+.0%})")
        print(f"{row['case_id']:<40}{float(row['published_gib']):>10.1f}" + "".join(cells) + f"  {row['expressible']}: {row['note']}")
    for framework, values in errors.items():
        if values:
            print(f"   {framework}: mean |error| {np.mean(values):.1%}, max {np.max(values):.1%} over {len(values)} rows")
    print("   (tt24_mem_8b_* and tt24_mem_405b_* are the same runs as tt24_t1/t3/t5; fsdp2_vs_fsdp1_llama7b_8h100 is a relative figure)")


def torchtitan_rows() -> list[dict[str, str]]:
    with TORCHTITAN_FILE.open(newline="") as handle:
        return list(csv.DictReader(handle))


def torchtitan_row_gib(row: dict[str, str], framework: str) -> float | None:
    """vramopt's peak (total minus the framework reserve) for the plan the row maps to, or
    None where the plan is refused (not expressible)."""
    plan = TrainingPlan(
        gpu=row["gpu"], gpus=int(row["gpus"]), tensor_parallel=int(row["tensor_parallel"]),
        context_parallel=int(row["context_parallel"]), pipeline_parallel=int(row["pipeline_parallel"]),
        sequence_parallel=row["sequence_parallel"] == "true", virtual_stages=int(row["virtual_stages"]), zero_stage=3,
        checkpointing=row["checkpointing"], precision=row["precision"], grad_comm_precision="fp32",
        micro_batch=int(row["micro_batch"]), first_stage_layers=int(row["first_stage_layers"]),
        last_stage_layers=int(row["last_stage_layers"]),
    )
    workload = TrainingWorkload(model=row["model"], seq_len=int(row["seq_len"]), global_batch=int(row["global_batch"]))
    try:
        values = estimate_training(workload, plan, framework=framework).values
    except VramoptError:
        return None
    if framework == "torchtitan":
        # The published runs (Dec 2024, June 2025) predate 0.3.0's ChunkedLossWrapper: their loss saw
        # the whole micro-batch's logits (loss_chunks 1). The compiled loss is not a plan field
        # yet: the same plan, its case marked.
        case = dataclasses.replace(training_case(workload, plan.gpu, framework), compiled_loss=row["compiled_loss"] == "true",
                                   loss_chunks=1)
        values = {name: float(np.asarray(value).reshape(-1)[0]) for name, value in evaluate_training(case, check_plan(case, plan)).items()}
    return states_total(values) / GIB

if __name__ == "__main__":
    main()
