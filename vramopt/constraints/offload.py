"""Offload of model states: none, optimizer states to host RAM (cpu, ZeRO-Offload), or all
states to NVMe (nvme, ZeRO-Infinity). Host RAM and NVMe capacity per node are checked by
the cost model (``fits_host``, ``fits_nvme``) when the candidate tables are built; the
rules that tie offload to a ZeRO stage are ``costs/offload.OFFLOAD_RULES``."""

from __future__ import annotations

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft
from vramopt.constraints.technique import PlanField, Technique, parse_choice
from vramopt.costs.columns import OFFLOAD_NAMES
from vramopt.costs.memory import offloaded_bytes_per_gpu
from vramopt.costs.offload import offload_invalid_reasons, offload_seconds_per_step

NVME_PATH_PLACEHOLDER = "/local_nvme"
"""DeepSpeed's documented default nvme_path; a placeholder the user must point at a local NVMe mount."""


def _deepspeed(draft: ExportDraft) -> list[str]:
    """offload_optimizer / offload_param inside the zero_optimization section the ZeRO field
    wrote (it comes first in registry.PLAN_ORDER), and the aio section for NVMe."""
    offload, setting = draft.plan["offload"], draft.setting
    section = draft.content["zero_optimization"]
    if offload == "cpu":
        section["offload_optimizer"] = {"device": "cpu", "pin_memory": setting("pin_memory")}
        return ["offload cpu: optimizer states and the optimizer step move to host RAM (ZeRO-Offload), "
                "which runs DeepSpeedCPUAdam; use the Adam or AdamW optimizer type"]
    if offload != "nvme":
        return []
    section["offload_optimizer"] = {
        "device": "nvme",
        "nvme_path": NVME_PATH_PLACEHOLDER,
        "pin_memory": setting("pin_memory"),
        "buffer_count": setting("optimizer_buffer_count"),
        "fast_init": False,
    }
    section["offload_param"] = {
        "device": "nvme",
        "nvme_path": NVME_PATH_PLACEHOLDER,
        "pin_memory": setting("pin_memory"),
        "buffer_count": setting("param_buffer_count"),
        "buffer_size": setting("param_buffer_size"),
        "max_in_cpu": setting("max_in_cpu"),
    }
    draft.content["aio"] = {
        "block_size": setting("aio_block_size"),
        "queue_depth": setting("aio_queue_depth"),
        "thread_count": setting("aio_thread_count"),
        "single_submit": False,
        "overlap_events": True,
    }
    return [f"offload nvme: set nvme_path (placeholder '{NVME_PATH_PLACEHOLDER}', in offload_optimizer and "
            "offload_param) to a local NVMe mount on every node, and tune the 'aio' section for it "
            "(ZeRO-Infinity; the optimizer step runs on the CPU with DeepSpeedCPUAdam)"]


def _megatron(draft: ExportDraft) -> list[str]:
    if draft.plan.get("offload") != "cpu":
        return []
    # arguments.py validate_args: --optimizer-cpu-offload needs --use-precision-aware-optimizer.
    draft.argument("--optimizer-cpu-offload")
    draft.argument("--use-precision-aware-optimizer")
    draft.argument("--optimizer-offload-fraction", "1.0")
    return ["offload cpu: Megatron's HybridDeviceOptimizer runs the Adam step on the host for the whole "
            "(--optimizer-offload-fraction 1.0) distributed-optimizer shard"]


OFFLOAD = Technique(
    field="offload",
    runner_up_rank=3,
    group="state",
    description="offload of model states (none, cpu: optimizer to host RAM, nvme: all states)",
    parse=parse_choice("offload", OFFLOAD_NAMES),
    default_values=lambda context: OFFLOAD_NAMES,
    columns=lambda value: {"offload": OFFLOAD_NAMES.index(value)},
    decode=lambda codes: OFFLOAD_NAMES[int(codes["offload"])],
    neutral="none",
    plan_field=PlanField(
        python_type=str, default="none", choices=OFFLOAD_NAMES, flags=("--offload",),
        doc="'none', 'cpu' (optimizer states to host RAM), 'nvme' (all model states to NVMe).",
        help="cpu: optimizer states to host RAM (ZeRO >= 1); nvme: all model states to NVMe (ZeRO 3).",
    ),
    contribution=Contribution(
        validity=lambda case, columns: offload_invalid_reasons(columns.offload, columns.zero_stage),
        memory=offloaded_bytes_per_gpu,
        time=offload_seconds_per_step,
        contract=ContractField(name="offload", json_type="string", enum=OFFLOAD_NAMES,
                               description="none, cpu (optimizer states and step in host RAM), nvme (all model states on NVMe)"),
        display=lambda plan: f"offload {plan['offload']}",
        display_line="memory",
        exports={"torchtitan": Export(not_exported="torchtitan's training.enable_cpu_offload moves every model state, which its rule refuses; the plans it runs have no offload"),
                 "megatron": Export(apply=_megatron), "deepspeed": Export(apply=_deepspeed),
                 "vllm": Export(not_exported="a training plan has no vLLM export (vLLM's --cpu-offload-gb is a serving option)")},
        sources=("Ren et al. 2021, ZeRO-Offload", "Rajbhandari et al. 2021, ZeRO-Infinity",
                 "DeepSpeed config-json: offload_optimizer, offload_param, aio"),
    ),
)

TECHNIQUES = (OFFLOAD,)
