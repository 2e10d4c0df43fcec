"""Offload of model states: none, optimizer states to host RAM (cpu, ZeRO-Offload), or all
states to NVMe (nvme, ZeRO-Infinity). Host RAM and NVMe capacity per node are checked by
the cost model (``fits_host``, ``fits_nvme``) when the candidate tables are built."""

from __future__ import annotations

from vramopt.constraints.technique import Technique, parse_choice
from vramopt.costs.columns import OFFLOAD_NAMES

OFFLOAD = Technique(
    field="offload",
    group="state",
    description="offload of model states (none, cpu: optimizer to host RAM, nvme: all states)",
    parse=parse_choice("offload", OFFLOAD_NAMES),
    default_values=lambda context: OFFLOAD_NAMES,
    columns=lambda value: {"offload": OFFLOAD_NAMES.index(value)},
    decode=lambda codes: OFFLOAD_NAMES[int(codes["offload"])],
)

TECHNIQUES = (OFFLOAD,)
