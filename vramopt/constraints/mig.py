"""MIG partitioning (NVIDIA Multi-Instance GPU): a replica per MIG instance, as many
instances of one profile per GPU as the profile allows, each with its slice's memory,
compute slices (of 7) and memory bandwidth (memory slices of 8). Only GPUs whose catalog
entry lists MIG profiles; tensor and pipeline parallelism stay 1 on MIG.

Its memory and time terms are the instance's shares of the GPU (capacity, compute slices,
memory slices, instances per GPU, from the catalog's profiles), read in the serving
evaluation's one coupled place, ``costs/inference.evaluate_serving``: the capacity every
term is held against, the GEMM and HBM rates, and the replica count.
"""

from __future__ import annotations

from typing import Any

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft
from vramopt.constraints.technique import PlanField, Technique
from vramopt.costs.inference import evaluate_serving
from vramopt.errors import InputError

NO_MIG = "none"


def mig_invalid_reasons(case, columns) -> dict[str, Any]:
    on_mig = columns.mig_profile >= 0
    t, p = columns.tensor_parallel, columns.pipeline_parallel
    return {
        "a MIG instance serves one replica without tensor or pipeline parallelism": on_mig & ((t > 1) | (p > 1)),
        "the GPU has no MIG profiles": on_mig & (len(case.gpu.mig_profiles) == 0),
    }


def _vllm(draft: ExportDraft) -> list[str]:
    """How the instances are launched: one engine per instance (vLLM has no MIG argument)."""
    plan = draft.plan
    profile = plan["mig_profile"]
    if profile == NO_MIG:
        return []
    return [f"MIG {profile}: {plan['replicas']} instances ({plan['instances_per_gpu']} per GPU on {plan['gpus']} x {plan['gpu']}), "
            "each its own `vllm serve` with these arguments pinned with CUDA_VISIBLE_DEVICES=MIG-<uuid> (nvidia-smi -L lists "
            "the UUIDs), behind a load balancer"]


def _display(plan) -> str:
    if plan["mig_profile"] == NO_MIG:
        return ""
    return f"{plan['instances_per_gpu']} x MIG {plan['mig_profile']} per GPU"


def mig_profile_code(gpu, name: str) -> int:
    """-1 for whole GPUs, else the profile's index; an unknown or impossible profile is an error."""
    if name in (None, "none"):
        return -1
    if not gpu.mig_profiles:
        raise InputError(f"{gpu.name} has no MIG profiles (MIG runs on A100, H100, H200, B200 and GB200); got mig_profile '{name}'")
    for index, profile in enumerate(gpu.mig_profiles):
        if profile.name == name:
            return index
    from vramopt.catalog_files import suggest

    raise InputError(str(suggest(name, [profile.name for profile in gpu.mig_profiles], f"MIG profile of {gpu.name}")))


MIG_PROFILE = Technique(
    field="mig_profile",
    serving_columns=lambda value, gpu: {"mig_profile": mig_profile_code(gpu, value)},
    runner_up_rank=12,
    group="key",
    description="MIG profile each replica runs on, or none (whole GPUs)",
    parse=lambda text: str(text).strip().lower(),
    default_values=lambda context: (NO_MIG,),
    columns=lambda value: {"mig_profile": value},
    decode=lambda codes: codes["mig_profile"],
    workloads=("infer",),
    plan_field=PlanField(python_type=str, default="none", flags=("--mig-profile",),
                         doc="A MIG profile name (each instance serves one replica) or 'none' for whole GPUs.",
                         help="infer: MIG profile per replica (e.g. 1g.10gb) or none."),
    aliases=("mig",),
    contribution=Contribution(
        validity=mig_invalid_reasons,
        memory=evaluate_serving,  # the instance's capacity (GpuSpec.mig_profiles memory_bytes)
        time=evaluate_serving,  # its compute and memory slices scale the GEMM and HBM rates
        contract=ContractField(name="mig_profile", json_type="string",
                               description="MIG profile each replica runs on, or 'none' for whole GPUs"),
        display=_display,
        display_line="hardware",
        exports={"torchtitan": Export(not_exported="a serving technique; serving plans export to vLLM (--export vllm)"),
                 "megatron": Export(not_exported="a serving technique; serving plans export to vLLM (--export vllm)"),
                 "deepspeed": Export(not_exported="MIG partitions serve replicas; a serving plan has no DeepSpeed export"),
                 "vllm": Export(apply=_vllm, launch=True)},
        sources=("NVIDIA Multi-Instance GPU User Guide (profiles: compute slices of 7, memory slices of 8)",
                 "hardware/gpus/*.toml: each GPU's MIG profiles"),
    ),
)

TECHNIQUES = (MIG_PROFILE,)
