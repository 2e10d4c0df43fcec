"""Micro-batch size; gradient accumulation follows as global_batch / (micro_batch * dp).

Default domain: divisors of the global batch up to 64 sequences (Narayanan et al. 2021
Fig. 7: per-GPU throughput saturates by micro-batch 4-8; larger micro-batches only add
activation memory). ``--allow micro_batch=...`` widens it.
"""

from __future__ import annotations

from vramopt.constraints.parallelism import divisors
from vramopt.constraints.technique import Technique, parse_int

DEFAULT_MAX_MICRO_BATCH = 64

MICRO_BATCH = Technique(
    field="micro_batch",
    group="key",
    description="sequences per micro-batch (gradient accumulation = global_batch / (micro_batch * dp))",
    parse=parse_int("micro_batch", 1),
    default_values=lambda context: tuple(
        value for value in divisors(context.global_batch) if value <= DEFAULT_MAX_MICRO_BATCH
    ),
    columns=lambda value: {"micro_batch": value},
    decode=lambda codes: int(codes["micro_batch"]),
)

TECHNIQUES = (MICRO_BATCH,)
