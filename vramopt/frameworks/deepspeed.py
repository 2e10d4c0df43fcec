"""DeepSpeed (release 0.19.8, deepspeedai/DeepSpeed): the plans DeepSpeed itself can run.

DeepSpeed gives ZeRO 0-3, ZeRO-Offload/Infinity, its 1F1B ``PipelineModule`` and AutoTP
tensor parallelism. What its code refuses or has no mechanism for becomes a rule below;
each cites the file (paths inside the ``deepspeed`` package of that release).

Memory: DeepSpeed keeps the generic accounting (fp32 master weights and Adam moments,
gradients in the training dtype, ZeRO sharding over the data-parallel group); see
docs/frameworks.md for the comparison with DeepSpeed's own estimators.
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.columns import CHECKPOINT_SELECTIVE
from vramopt.frameworks.rule import Framework, Rule
from vramopt.types import PRECISIONS

VERSION = "0.19.8"

COMMUNICATION_DATA_TYPES = ("fp16", "bf16", "fp32")
"""What communication_data_type accepts (runtime/config.py get_communication_data_type)."""
_COMMUNICATION_CODES = np.array([PRECISIONS.index(name) for name in COMMUNICATION_DATA_TYPES])

RULES = (
    Rule(
        message="DeepSpeed: gradients travel in fp16, bf16 or fp32 (communication_data_type)",
        group="state",
        refuses=lambda columns: ~np.isin(columns.grad_comm_precision, _COMMUNICATION_CODES),
        source=f"deepspeed {VERSION} runtime/config.py get_communication_data_type",
    ),
    Rule(
        message="DeepSpeed: pipeline parallelism needs zero_stage <= 1 ('ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism')",
        group="state",
        refuses=lambda columns: (columns.pipeline_parallel > 1) & (columns.zero_stage >= 2),
        source=f"deepspeed {VERSION} runtime/pipe/engine.py, PipelineEngine.__init__ assert",
        enforced=True,
    ),
    Rule(
        message="DeepSpeed: the pipeline runs plain 1F1B (one stage per rank), so virtual_stages must be 1",
        group="activation",
        refuses=lambda columns: columns.virtual_stages > 1,
        source=f"deepspeed {VERSION} runtime/pipe/schedule.py TrainSchedule (2 x (micro-batches + stages - 1) steps) and runtime/pipe/module.py PipelineModule",
    ),
    Rule(
        message="DeepSpeed: PipelineModule splits the layers by partition_method ('parameters', 'uniform' or 'type:<regex>') and takes no per-stage layer counts, so first_stage_layers and last_stage_layers must be 0",
        group="key",
        refuses=lambda columns: (columns.first_stage_layers > 0) | (columns.last_stage_layers > 0),
        source=f"deepspeed {VERSION} runtime/pipe/module.py PipelineModule._partition_layers",
    ),
    Rule(
        message="DeepSpeed: AutoTP tensor parallelism has no Megatron-style sequence parallelism, so sequence_parallel must be off",
        group="activation",
        refuses=lambda columns: columns.sequence_parallel == 1,
        source=f"deepspeed {VERSION} module_inject/auto_tp.py and runtime/tensor_parallel (AutoTP shards linear layers only)",
    ),
    Rule(
        message="DeepSpeed: activation checkpointing wraps whole blocks (deepspeed.checkpointing.checkpoint); selective recomputation of the attention core is Megatron-LM's",
        group="activation",
        refuses=lambda columns: columns.checkpoint_kind == CHECKPOINT_SELECTIVE,
        source=f"deepspeed {VERSION} runtime/activation_checkpointing/checkpointing.py (checkpoint(function, *args))",
    ),
)

DEEPSPEED = Framework(
    name="deepspeed",
    display_name="DeepSpeed",
    version=VERSION,
    description="ZeRO 0-3 with ZeRO-Offload/Infinity, 1F1B PipelineModule (ZeRO <= 1), AutoTP tensor parallelism",
    rules=RULES,
    sources=(
        f"deepspeed {VERSION} runtime/pipe/engine.py",
        f"deepspeed {VERSION} runtime/zero/config.py (offload_param 'Valid only with stage 3')",
        f"deepspeed {VERSION} runtime/zero/stage_1_and_2.py (offload_optimizer: ZeRO-Offload from stage 1)",
    ),
)
