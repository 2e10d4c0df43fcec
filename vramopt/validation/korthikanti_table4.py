"""Korthikanti et al. 2022 Table 4 as data: the time of one transformer layer, per recomputation mode.

Source: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
(arXiv 2205.05198), Table 4: forward and backward time of a single transformer layer of the 22B
model (h = 6,144, 64 heads, s = 2,048, micro-batch 4 from Table 3, tensor parallel 8 on A100
80GB, the Megatron-LM of that paper, no flash attention). Forward / backward / combined ms:
baseline without recomputation 7.7 / 11.9 / 19.6; sequence parallelism 7.2 / 11.8 / 19.0;
baseline with recomputation 7.7 / 19.5 / 27.2; selective recomputation 7.7 / 13.2 / 20.9;
selective recomputation + sequence parallelism 7.2 / 13.1 / 20.3. The combined time is what is
checked (the forward/backward split of the tensor-parallel time is not an output).

vramopt's layer time is read from two evaluations of the same plan at 48 and 24 layers:
(compute + exposed tensor-parallel time) / 24, which cancels the head, the loss and the
optimizer step. No fit uses these rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.hardware import load_gpu
from vramopt.plan import check_plan
from vramopt.types import TrainingPlan
from vramopt.validation.narayanan import gpt_model

GPU = "a100-80gb"


@dataclass(frozen=True, slots=True)
class LayerTimeRow:
    case_id: str
    checkpointing: str
    sequence_parallel: bool
    published_ms: float
    """Table 4 'combined' (forward + backward) time of one layer."""


TABLE_4 = (
    LayerTimeRow("k22_t4_baseline", "none", False, 19.6),
    LayerTimeRow("k22_t4_sequence_parallel", "none", True, 19.0),
    LayerTimeRow("k22_t4_full_recompute", "every:1", False, 27.2),
    LayerTimeRow("k22_t4_selective", "selective", False, 20.9),
    LayerTimeRow("k22_t4_selective_sequence_parallel", "selective", True, 20.3),
)


def layer_ms(checkpointing: str, sequence_parallel: bool, backward_overlap: bool = True) -> float:
    """vramopt's time of one 22B layer (compute + exposed tensor-parallel time), in ms."""
    totals = []
    for layers in (48, 24):
        case = TrainingCase(model=gpt_model(layers, 6144, 64), gpu=load_gpu(GPU), seq_len=2048, global_batch=4,
                            data_parallel_overlap=False, tensor_parallel_backward_overlap=backward_overlap)
        plan = TrainingPlan(gpu=GPU, gpus=8, tensor_parallel=8, pipeline_parallel=1, virtual_stages=1, zero_stage=0,
                            checkpointing=checkpointing, precision="bf16", grad_comm_precision="bf16", offload="none",
                            flash_attention=False, sequence_parallel=sequence_parallel, micro_batch=4)
        values = evaluate_training(case, check_plan(case, plan))
        totals.append(float(np.asarray(values["compute_s"] + values["tensor_parallel_s"]).reshape(-1)[0]))
    return (totals[0] - totals[1]) / 24 * 1e3


def table4_errors() -> dict[str, float]:
    """Relative error of vramopt's layer time per Table 4 row."""
    return {row.case_id: layer_ms(row.checkpointing, row.sequence_parallel) / row.published_ms - 1.0 for row in TABLE_4}
