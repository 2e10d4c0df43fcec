"""``pack`` with prices per GPU-hour (issue 17 item 5): among the assignments of the most
admitted value (weight x normalized throughput, unchanged), the one that costs least per
hour; the response reports each admitted job's and the whole assignment's dollars per hour.
Objective 'cost' (``pack_value.Values(admit_all=True)``): every option of a job counts its
full weight, so the first stage admits the most job weight (all jobs when they fit) and
the second takes the least money per hour: "admit everything at least cost".

An option's money per hour: its whole GPUs x the price, or, for a MIG option, its share of
the GPU -- instances x memory slices of the profile / the GPU's 8 memory slices (NVIDIA MIG
User Guide: an A100/H100 has 8 memory slices; the catalog's profiles hold their slices) --
x the price. In integers (one unit = 1/8 GPU at the integer price of
``cost_objective.price_units``, which CP-SAT, the greedy floor and the brute force share):
whole GPUs cost 8 x gpus x units, MIG options instances x memory slices x units.
"""

from __future__ import annotations

import math
from typing import Mapping

from vramopt.errors import InputError
from vramopt.hardware import load_gpu
from vramopt.hardware.catalog import MIG_MEMORY_SLICES as MEMORY_SLICES_PER_GPU
from vramopt.optimizer.cost_objective import price_units


def _memory_slices(option) -> int:
    gpu = load_gpu(option.gpu)
    profile = next(profile for profile in gpu.mig_profiles if profile.name == option.mig_profile)
    return int(profile.memory_slices)


def option_cost_units(option, units: Mapping[str, int]) -> int:
    if option.mig_profile is None:
        return MEMORY_SLICES_PER_GPU * option.gpus * units[option.gpu]
    return option.instances * _memory_slices(option) * units[option.gpu]


def option_usd_per_hour(option, usd_per_gpu_hour: Mapping[str, float]) -> float:
    price = usd_per_gpu_hour[option.gpu]
    if option.mig_profile is None:
        return option.gpus * price
    return option.instances * _memory_slices(option) / MEMORY_SLICES_PER_GPU * price


def _with_builtin(usd_per_gpu_hour: Mapping[str, float]) -> dict[str, float]:
    from vramopt.prices import BUILTIN_PRICES

    given = {load_gpu(name).name: float(price) for name, price in usd_per_gpu_hour.items()}
    return {**{name: price.usd_per_gpu_hour for name, price in BUILTIN_PRICES.items()}, **given}


def pack_price_units(nodes, options, usd_per_gpu_hour: Mapping[str, float]) -> dict[str, int]:
    """Integer prices of the cluster's GPU types (every one must have a price)."""
    canonical = _with_builtin(usd_per_gpu_hour)
    for name, price in canonical.items():
        if not math.isfinite(price) or price < 0:
            raise InputError(f"the price of {name} must be a finite number of US dollars per GPU-hour at least 0, got {price!r}")
    types = sorted({node.gpu.name for node in nodes})
    missing = [name for name in types if name not in canonical]
    if missing:
        raise InputError(f"pack with prices needs a price for every GPU type of the cluster: none for {', '.join(missing)} "
                         f"(give --prices FILE or --price {missing[0]}=USD)")
    # The tie-break's coefficients add up to at most this (every option admitted at once).
    biggest = sum(MEMORY_SLICES_PER_GPU * max(option.gpus, option.instances) for job_options in options for option in job_options)
    units = price_units([canonical[name] for name in types], biggest)
    return dict(zip(types, units))


def add_money(response: dict, assignment: dict, options, usd_per_gpu_hour: Mapping[str, float], jobs,
              objective: str = "throughput") -> None:
    """Each admitted placement's ``usd_per_hour`` and the summary's total (and the
    objective's second stage named)."""
    canonical = _with_builtin(usd_per_gpu_hour)
    by_job = {jobs[job].id: option_usd_per_hour(options[job][option], canonical) for job, (option, _) in assignment.items()}
    for placement in response["placements"]:
        placement["usd_per_hour"] = by_job.get(placement["job"]) if placement["admitted"] else None
    response["summary"]["usd_per_hour"] = sum(by_job.values())
    response["summary"]["tie_break"] = (
        "least money per hour among the assignments of the most weighted normalized throughput" if objective == "throughput"
        else "objective cost: the most job weight admitted, then the least money per hour")
