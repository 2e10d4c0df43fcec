"""MIG partitioning (NVIDIA Multi-Instance GPU): a replica per MIG instance, as many
instances of one profile per GPU as the profile allows, each with its slice's memory,
compute slices (of 7) and memory bandwidth (memory slices of 8). Only GPUs whose catalog
entry lists MIG profiles; tensor and pipeline parallelism stay 1 on MIG."""

from __future__ import annotations

from vramopt.constraints.technique import Technique

NO_MIG = "none"

MIG_PROFILE = Technique(
    field="mig_profile",
    group="key",
    description="MIG profile each replica runs on, or none (whole GPUs)",
    parse=lambda text: str(text).strip().lower(),
    default_values=lambda context: (NO_MIG,),
    columns=lambda value: {"mig_profile": value},
    decode=lambda codes: codes["mig_profile"],
    workloads=("infer",),
)

TECHNIQUES = (MIG_PROFILE,)
