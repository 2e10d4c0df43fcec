"""Synthetic ModelSpecs for golden tests that state a parameter count, not an architecture."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from vramopt.costs.columns import PlanColumns
from vramopt.models import load_model
from vramopt.types import PRECISIONS, ParameterCount


def model_with_parameters(total: float, largest_layer: int = 0):
    """A copy of a catalog dense model whose ParameterCount is exactly ``total``.

    Every parameter counts as a layer parameter (no embedding), and ``largest_layer`` is 0
    by default so ZeRO-3's prefetch buffer of the two largest layers adds nothing. Only the
    memory formulas read the count; the architecture fields are Llama 3.1 70B's.
    """
    base = load_model("llama-3.1-70b")
    count = ParameterCount(total=int(total), active=int(total), embedding=0, largest_layer=largest_layer)
    return replace(base, name=f"synthetic-{total:.4g}", parameters=count)


def columns(**values) -> PlanColumns:
    """One plan as PlanColumns, with defaults for every column (bf16, nothing enabled)."""
    defaults = dict(
        gpus=1, tensor_parallel=1, pipeline_parallel=1, data_parallel=1, sequence_parallel=0, virtual_stages=1,
        zero_stage=0, checkpoint_kind=0, checkpoint_every=0, precision=PRECISIONS.index("bf16"),
        grad_comm_precision=PRECISIONS.index("bf16"), offload=0, flash_attention=1, micro_batch=1,
    )
    defaults.update(values)
    if "gpus" not in values:
        defaults["gpus"] = defaults["tensor_parallel"] * defaults["pipeline_parallel"] * defaults["data_parallel"]
    for name in ("precision", "grad_comm_precision"):
        if isinstance(defaults[name], str):
            defaults[name] = PRECISIONS.index(defaults[name])
    return PlanColumns.from_scalars(**defaults)


def scalar(array) -> float:
    return float(np.asarray(array).reshape(-1)[0])
