"""The H100 that torchtitan's published runs used: Meta's Grand Teton part, not a DGX H100.

torchtitan's Dec 2024 benchmarks (benchmarks/llama3_h100_202412_torchtitan.md, "Hardware"
and footnote 2) and docs/performance.md (footnote 1, the 405B rows) ran on Grand Teton hosts
whose H100 SXM carries 96 GB of HBM2e at 2.4 TB/s and runs at "the default 500W power
limit" ("HBM2e-based SXM H100 with lower TDP, the actual peak TFLOPs number is between SXM
and NVL, and we don't know its exact value"). The catalog ``h100`` is the DGX H100 part
(80 GB HBM3, 3.35 TB/s, 700 W), on which the Hopper large-GEMM fraction is fitted
(Megatron-LM's README runs). Mapping torchtitan's rows to it made every torchtitan H100 row
about 60% fast.

Two differences are published and taken as they are: the memory (96 GB HBM2e) and its
bandwidth (2.4 TB/s). The third is not: how fast the tensor cores run under the 500 W cap.
A power cap lowers the SM clock while the tensor cores are busy (dynamic power rises with
clock and voltage), so every tensor-core and CUDA-core rate scales by the ratio of the
sustained clocks; the HBM rate does not (its clock is separate). That ratio is one
coefficient, ``SUSTAINED_RATE_FRACTION``, fitted on the Dec 2024 benchmark's four Llama 3.1
8B FSDP rows (Tables 1 and 3, bf16, with and without torch.compile) and reported
leave-one-out; every other Grand Teton row (the 405B rows of the same file and of
docs/performance.md, the fp8 rows) is predicted at the fitted value, out of sample
(``calibration.py``).
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

from vramopt.hardware import load_gpu
from vramopt.hardware.catalog import FrozenDict
from vramopt.types import GpuSpec

NAME = "h100-grand-teton"

HBM_BANDWIDTH_BYTES_PER_S = 2.4e12
"""torchtitan benchmarks/llama3_h100_202412_torchtitan.md, "Hardware": "Each H100 GPU is
equipped with 96GB HBM2e with 2.4 TB/sec peak memory bandwidth"."""
MEMORY_BYTES = 96_000_000_000
"""The same line: 96 GB (decimal, as datasheets write it; assumption: the runtime reports
slightly less, which no validated quantity reads: the peak-memory rows compare allocations)."""

SUSTAINED_RATE_FRACTION = 0.7075
"""Fitted (``calibration.py``, grid step 0.0025): compute rate of the 500 W Grand Teton H100
over the 700 W DGX H100's, on torchtitan's Dec 2024 Llama 3.1 8B FSDP rows (4). Physical
range, for reading it: a 500/700 cap at dynamic power ~ f V^2 with V rising with f gives
clock ratios from (5/7)^(1/3) = 0.89 down to 5/7 = 0.71 where the voltage is at its floor."""

_fraction = [SUSTAINED_RATE_FRACTION]


@contextmanager
def sustained_rate_fraction_set_to(value: float):
    """Calibration only: inside the block the Grand Teton GPU runs at ``value``."""
    original = _fraction[0]
    _fraction[0] = float(value)
    try:
        yield
    finally:
        _fraction[0] = original


def grand_teton_h100() -> GpuSpec:
    """The catalog H100 with the Grand Teton part's memory, bandwidth and power-capped rates."""
    base = load_gpu("h100")
    fraction = _fraction[0]
    sources = dict(base.sources)
    sources.update({
        "hbm_bandwidth_bytes_per_s": "torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Hardware: 2.4 TB/sec",
        "memory_bytes": "torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Hardware: 96GB HBM2e",
    })
    for precision in base.peak_flops_per_s:
        sources[f"peak_flops_per_s.{precision}"] = (
            f"catalog h100 x {fraction} (fitted sustained rate under the 500 W cap: vramopt/validation/grand_teton.py)")
    return dataclasses.replace(
        base, name=NAME, display_name="NVIDIA H100 SXM 96GB HBM2e, 500 W (Grand Teton)", aliases=(),
        memory_bytes=MEMORY_BYTES, datasheet_memory_bytes=MEMORY_BYTES, hbm_bandwidth_bytes_per_s=HBM_BANDWIDTH_BYTES_PER_S,
        peak_flops_per_s=FrozenDict({name: value * fraction for name, value in base.peak_flops_per_s.items()}),
        sources=FrozenDict(sources), mig_profiles=(),
        notes="torchtitan's published H100 runs (Meta Grand Teton): vramopt/validation/grand_teton.py",
    )
