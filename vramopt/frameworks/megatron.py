"""Megatron-LM / Megatron-Core (release core_v0.16.1, NVIDIA/Megatron-LM): the plans
``pretrain_gpt.py`` can run.

Megatron runs every layout vramopt searches (TP with sequence parallelism, CP, PP with the
interleaved schedule), ZeRO-1 as its distributed optimizer (ZeRO-2/3 exist as Megatron-FSDP, not modelled here),
full and selective recomputation, fp8 and NVFP4 through Transformer Engine. The rules below
are what its argument parser and ``validate_args`` refuse (megatron/training/arguments.py of
that tag; the optimizer-format rule (``--optimizer`` choices adam, sgd, muon, dist_muon) is the
optimizer technique's, constraints/optimizer_format.py).
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.columns import OFFLOAD_NVME
from vramopt.frameworks.rule import Framework, Rule
from vramopt.types import PRECISIONS

VERSION = "core_v0.16.1"
ARGUMENTS = f"Megatron-LM {VERSION} megatron/training/arguments.py"

GRADIENT_REDUCE_PRECISIONS = ("fp32", "bf16")
"""fp32 main gradients reduced in fp32 (the default: bf16 training sets
accumulate_allreduce_grads_in_fp32) or in bf16 with ``--grad-reduce-in-bf16``."""

_REDUCE_CODES = np.array([PRECISIONS.index(name) for name in GRADIENT_REDUCE_PRECISIONS])
_FP16 = PRECISIONS.index("fp16")

RULES = (
    Rule(
        message="Megatron-LM: ZeRO-1 is its distributed optimizer (--use-distributed-optimizer); ZeRO-2/3 would be Megatron-FSDP, whose buffers and pipeline/offload compatibility vramopt does not model, so zero_stage must be 0 or 1",
        group="state",
        refuses=lambda columns: columns.zero_stage >= 2,
        source=f"{ARGUMENTS}, '--use-distributed-optimizer' and '--use-megatron-fsdp' / '--data-parallel-sharding-strategy'",
    ),
    Rule(
        message="Megatron-LM: --optimizer-cpu-offload moves optimizer states to host RAM; there is no NVMe offload",
        group="state",
        refuses=lambda columns: columns.offload == OFFLOAD_NVME,
        source=f"{ARGUMENTS}, '--optimizer-cpu-offload' (the only offload argument)",
    ),
    Rule(
        message="Megatron-LM: gradients are reduced in fp32 (main gradients) or in bf16 with --grad-reduce-in-bf16 (fp16 training: also fp16)",
        group="state",
        refuses=lambda columns: ~np.isin(columns.grad_comm_precision, _REDUCE_CODES)
        & ~((columns.precision == _FP16) & (columns.grad_comm_precision == _FP16)),
        source=f"{ARGUMENTS}, '--grad-reduce-in-bf16' and accumulate_allreduce_grads_in_fp32",
    ),
)

MEGATRON = Framework(
    name="megatron",
    display_name="Megatron-LM",
    version=VERSION,
    description="TP/SP/CP/PP with virtual stages, distributed optimizer (ZeRO-1), optimizer CPU offload, recompute, fp8/fp4 via TE",
    rules=RULES,
    sources=(ARGUMENTS, f"Megatron-LM {VERSION} megatron/core/distributed/param_and_grad_buffer.py (fp32 main gradients)"),
    # overlap_p2p_comm is on unless --no-overlap-p2p-communication (store_false in arguments.py):
    # the interleaved schedule's transfers run under the next chunk's compute (costs/pipeline_p2p.py).
    case_options=(("pipeline_p2p_overlap", True),),
)
