"""Serving weight format: bf16, fp8, weight-only int8/int4 (GPTQ/AWQ layouts), fp4 (NVFP4).

fp8 and fp4 need the GPU's tensor cores for them (an fp8 plan on an A100 is refused);
int8/int4 are weight-only and dequantize to bf16, so any GPU runs them.

Default domain: bf16 and fp8 where the GPU runs it (the seed's serving baseline is vLLM
with FP8). int8, int4 and fp4 trade accuracy that vramopt does not price, so they are
searched only when asked (``--allow quantization=bf16,fp8,int4``).
"""

from __future__ import annotations

from vramopt.constraints.technique import Technique, parse_choice
from vramopt.costs.inference import QUANTIZATIONS

QUANTIZATION = Technique(
    field="quantization",
    group="key",
    description="serving weight format (bytes per weight; fp8/fp4 also set the compute precision)",
    parse=parse_choice("quantization", QUANTIZATIONS),
    # A quantized checkpoint is served in its own format (vLLM loads it as stored).
    default_values=lambda context: (context.checkpoint_format,) if context.checkpoint_format else
    ("bf16",) + (("fp8",) if "fp8" in context.supported_precisions else ()),
    columns=lambda value: {"quantization": value},
    decode=lambda codes: codes["quantization"],
    workloads=("infer",),
)

TECHNIQUES = (QUANTIZATION,)
