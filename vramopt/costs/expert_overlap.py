"""Expert-parallel all-to-all overlapped with another micro-batch's compute (Megatron-Core's
"combined 1F1B", ``--overlap-moe-expert-parallel-comm``): the terms.

Without it a MoE layer's dispatch and combine all-to-alls sit on the critical path of their
own micro-batch (attention/router -> dispatch -> experts -> combine -> next layer). Combined
1F1B runs the forward of one micro-batch and the backward of another together, module by
module, so each one's all-to-all runs while the other computes (Megatron-Core 0.16.1
``pipeline_parallel/combined_1f1b.py``; docs "Combined 1F1B: Expert-Parallel All-to-All
Overlap"). What is modelled:

- time: in the paired steady state the all-to-all is hidden up to the pair's compute, so
  ``max(0, all-to-all - compute)`` stays exposed; the passes that run unpaired (the warm-up
  forwards and cool-down backwards: one forward and one backward without pipelining, about
  the micro-batches a stage holds at once with it, out of the step's micro-batches) keep their
  whole all-to-all. Assumption: the pairing is perfect at module granularity; the measured
  speed-up of the Qwen3-235B ModelZoo layout (245 -> 276 TFLOP/s per GPU) is the check, not a
  fit.
- memory: the schedule runs one micro-batch's forward ahead of the 1F1B steady state
  (``schedules.py``: "we schedule one extra micro-batch forward step before the 1f1b
  stages"), so one more micro-batch of one model chunk (a stage's layers / virtual stages)
  is held.
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.columns import CHECKPOINT_EVERY
from vramopt.costs.memory import in_flight_micro_batches
from vramopt.types import PRECISIONS

FP32 = PRECISIONS.index("fp32")


def overlap_column(columns) -> np.ndarray:
    """The overlap codes of ``columns`` (0 where the columns carry none)."""
    return np.asarray(getattr(columns, "expert_comm_overlap", 0))


def overlap_invalid_reasons(columns) -> dict[str, np.ndarray]:
    """Megatron-Core 0.16.1 ``TransformerConfig.__post_init__``'s asserts on
    ``overlap_moe_expert_parallel_comm``."""
    on = overlap_column(columns) == 1
    return {
        "expert_comm_overlap needs expert_parallel > 1": on & (np.asarray(columns.expert_parallel) <= 1),
        "expert_comm_overlap with pipeline_parallel > 1 needs virtual_stages > 1 (Megatron-Core: "
        "virtual_pipeline_model_parallel_size must be set)": (
            on & (np.asarray(columns.pipeline_parallel) > 1) & (np.asarray(columns.virtual_stages) <= 1)
        ),
        "expert_comm_overlap needs checkpointing none or selective (Megatron-Core: disable full recomputation)": (
            on & (np.asarray(columns.checkpoint_kind) == CHECKPOINT_EVERY)
        ),
        "expert_comm_overlap needs bf16 or fp16 weights (Megatron-Core: bf16 or fp16 model)": (
            on & (np.asarray(columns.precision) == FP32)
        ),
    }


def extra_activation_bytes(activations_bytes: np.ndarray, columns, micro_batches: np.ndarray) -> np.ndarray:
    """Memory term: one more micro-batch of one model chunk in flight on the heaviest stage."""
    in_flight = np.maximum(in_flight_micro_batches(columns, micro_batches), 1.0)
    per_chunk = activations_bytes / in_flight / np.maximum(np.asarray(columns.virtual_stages, dtype=float), 1.0)
    return np.where(overlap_column(columns) == 1, per_chunk, 0.0)


def exposed_all_to_all_seconds(all_to_all_s: np.ndarray, compute_s: np.ndarray, columns, micro_batches: np.ndarray) -> np.ndarray:
    """Time term: the all-to-all of one micro-batch that stays on the critical path."""
    unpaired = np.minimum(1.0, np.maximum(in_flight_micro_batches(columns, micro_batches), 1.0) / np.maximum(micro_batches, 1.0))
    paired_exposed = np.maximum(all_to_all_s - compute_s, 0.0)
    overlapped = unpaired * all_to_all_s + (1.0 - unpaired) * paired_exposed
    return np.where(overlap_column(columns) == 1, overlapped, all_to_all_s)
