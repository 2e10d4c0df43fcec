"""torchtitan (release 0.3.0 on the package index, pytorch/torchtitan): the plans its
trainer can run.

torchtitan composes FSDP2 (``data_parallel_shard_degree``; ZeRO-3 with
``fsdp_reshard_after_forward`` 'default'/'always', ZeRO-2-like with 'never'), DDP
(``data_parallel_replicate_degree`` alone: ZeRO-0), TP with sequence parallelism, PP with
single and looped (interleaved) schedules, CP, float8/NVFP4 converters, full or selective
activation checkpointing. The rules below are what its config and components offer no
setting for (paths inside the ``torchtitan`` package of that release).
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.columns import CHECKPOINT_EVERY, OFFLOAD_NONE
from vramopt.frameworks.rule import Framework, Rule
from vramopt.types import PRECISIONS

VERSION = "0.3.0"
CONFIGS = f"torchtitan {VERSION} config/configs.py"

def _experts_split_otherwise(columns) -> np.ndarray:
    """torchtitan's MoE layers: with ep > 1 the experts are whole on their ranks (EP borrows
    the ranks of FSDP and TP, efsdp x ep = dp_shard x cp x tp); with ep = 1 they are split
    like the dense layers (tp). Any other expert tensor-parallel degree has no setting."""
    tp = np.asarray(columns.tensor_parallel)
    etp = np.asarray(columns.expert_tensor_parallel)
    etp = np.where(etp == 0, tp, etp)
    ep = np.asarray(columns.expert_parallel)
    return np.where(ep > 1, etp != 1, etp != tp)


RULES = (
    Rule(
        message="torchtitan: with expert parallelism the experts are whole on their ranks (expert_tensor_parallel 1: EP borrows the FSDP and TP ranks), without it they are split like the dense layers (tp); there is no other expert tensor-parallel degree",
        group="key",
        refuses=_experts_split_otherwise,
        source=f"{CONFIGS} ParallelismConfig.expert_parallel_degree (dp_shard * cp * tp == efsdp * ep)",
    ),
    Rule(
        message="torchtitan: FSDP2 shards parameters, gradients and optimizer states together (ZeRO-3, or ZeRO-2 with fsdp_reshard_after_forward 'never'); there is no ZeRO-1",
        group="state",
        refuses=lambda columns: columns.zero_stage == 1,
        source=f"{CONFIGS} ParallelismConfig (data_parallel_shard_degree, fsdp_reshard_after_forward)",
    ),
    Rule(
        message="torchtitan: FSDP reduces gradients in fp32 (training.mixed_precision_reduce accepts only 'float32'), so grad_comm_precision must be fp32",
        group="state",
        refuses=lambda columns: columns.grad_comm_precision != PRECISIONS.index("fp32"),
        source=f"{CONFIGS} TrainingConfig.mixed_precision_reduce: Literal['float32']",
    ),
    Rule(
        message="torchtitan: training.enable_cpu_offload offloads parameters, gradients and optimizer states (FSDP2 CPUOffloadPolicy), not the optimizer states alone, and there is no NVMe offload",
        group="state",
        refuses=lambda columns: columns.offload != OFFLOAD_NONE,
        source=f"{CONFIGS} TrainingConfig.enable_cpu_offload",
    ),
    Rule(
        message="torchtitan: mixed precision is bfloat16 or float32 (training.mixed_precision_param), float8/NVFP4 through converters; there is no fp16",
        group="key",
        refuses=lambda columns: columns.precision == PRECISIONS.index("fp16"),
        source=f"{CONFIGS} TrainingConfig.mixed_precision_param: Literal['bfloat16', 'float32']",
    ),
    Rule(
        message="torchtitan: full activation checkpointing wraps every block (FullAC); a checkpoint every K > 1 layers has no setting",
        group="activation",
        refuses=lambda columns: (columns.checkpoint_kind == CHECKPOINT_EVERY) & (columns.checkpoint_every != 1),
        source=f"torchtitan {VERSION} distributed/activation_checkpoint.py FullAC, SelectiveAC",
    ),
    Rule(
        message="torchtitan: pipeline_parallel_first/last_stage_less_layers shorten the first and last model chunk, not a rank's whole share, so uneven stages (first_stage_layers, last_stage_layers) need virtual_stages 1",
        group="activation",
        refuses=lambda columns: ((columns.first_stage_layers > 0) | (columns.last_stage_layers > 0)) & (columns.virtual_stages > 1),
        source=f"torchtitan {VERSION} distributed/pipeline_parallel.py _generate_llm_fqn_per_model_part (input_weight, output_weight)",
    ),
    Rule(
        message="torchtitan: attention runs through SDPA (flash or memory-efficient kernels) or FlexAttention, which never store the s x s scores, so flash_attention must be on",
        group="activation",
        refuses=lambda columns: columns.flash_attention == 0,
        source=f"torchtitan {VERSION} models/common/attention.py (ScaledDotProductAttention, FlexAttention, VarlenAttention)",
    ),
)

DEFAULT_ALLOW = {"grad_comm_precision": ("fp32",)}
"""Domains torchtitan fixes where vramopt's default would be refused (the user's --allow or
--pin of the same field replaces it)."""

TORCHTITAN = Framework(
    name="torchtitan",
    display_name="torchtitan",
    version=VERSION,
    description="FSDP2 (ZeRO-2/3) or DDP, TP with sequence parallelism, PP schedules with virtual stages, CP, float8, full/selective AC",
    rules=RULES,
    sources=(CONFIGS, f"torchtitan {VERSION} distributed/parallel_dims.py",
             f"torchtitan {VERSION} models/llama3/config_registry.py, models/deepseek_v3/config_registry.py "
             "(loss=ChunkedLossWrapper.Config(...), num_chunks 8 in components/loss.py)"),
    # The configs chunk the loss in 8; --export torchtitan writes --compile.enable (model and loss:
    # config/configs.py CompileConfig.components), which the fused-kernel time model assumes.
    case_options=(("loss_chunks", 8), ("compiled_loss", True)),
)
