"""Serving weight format: bf16, fp8, weight-only int8/int4 (GPTQ/AWQ layouts), fp4 (NVFP4).

fp8 and fp4 need the GPU's tensor cores for them (an fp8 plan on an A100 is refused);
int8/int4 are weight-only and dequantize to bf16, so any GPU runs them.

Default domain: bf16 and fp8 where the GPU runs it (the seed's serving baseline is vLLM
with FP8). int8, int4 and fp4 trade accuracy that vramopt does not price, so they are
searched only when asked (``--allow quantization=bf16,fp8,int4``).

Its memory term is the bytes per weight of each layout (``costs/kv_cache.quantized_weight_bytes``),
its time term the GEMM rate of the precision it computes in (``costs/serving_operators.serving_gemm_flops_per_s``);
both enter the serving evaluation's one coupled place, ``costs/inference.evaluate_serving``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft
from vramopt.constraints.technique import PlanField, Technique, parse_choice
from vramopt.costs.inference import QUANTIZATION_NEEDS, QUANTIZATIONS
from vramopt.costs.serving_operators import serving_gemm_flops_per_s
from vramopt.costs.kv_cache import quantized_weight_bytes

QUANTIZATION_METHODS: dict[str, str | None] = {
    "bf16": None,
    "fp8": "fp8",
    "int8": "gptq",
    "int4": "awq",
    "fp4": "modelopt_fp4",
}
"""vLLM's --quantization for each weight format of the plan (None: unquantized). int8 and
int4 are weight-only with group scales in the cost model (GPTQ/AWQ layout); fp4 is NVFP4."""


def quantization_invalid_reasons(case, columns) -> dict[str, Any]:
    needs = np.array([case.gpu.supports(name) for name in QUANTIZATION_NEEDS])[columns.quantization]
    return {"the GPU cannot run this quantization": ~needs}


def _quantization_note(quantization: str) -> str:
    if quantization == "fp8":
        return (
            "quantization fp8: vLLM quantizes a bf16 checkpoint to FP8 when loading it (dynamic scales) or loads an FP8 "
            "checkpoint, whose own quantization_config then decides the method"
        )
    if quantization == "int4":
        return (
            "quantization int4 -> 'awq': the checkpoint must be AWQ-quantized (4-bit weights, group scales); for a GPTQ "
            "checkpoint use 'gptq' (vLLM picks its Marlin kernels where the GPU has them)"
        )
    if quantization == "int8":
        return (
            "quantization int8 (weight-only, group scales) -> 'gptq': the checkpoint must be GPTQ-quantized to 8 bits; "
            "a W8A8 int8 checkpoint loads with 'compressed-tensors' and computes in int8, which the plan does not assume, "
            "and 'bitsandbytes' quantizes a bf16 checkpoint at load time but runs slower"
        )
    return (
        "quantization fp4 (NVFP4) -> 'modelopt_fp4': the checkpoint must be quantized to NVFP4 with NVIDIA TensorRT "
        "Model Optimizer, and the GPU needs FP4 tensor cores"
    )


def _vllm(draft: ExportDraft) -> list[str]:
    quantization = draft.plan["quantization"]
    method = QUANTIZATION_METHODS[quantization]
    stored = draft.model.get("checkpoint_quantization")
    if isinstance(stored, dict) and stored.get("weight_format") == quantization:
        # A quantized checkpoint (its config.json's quantization_config) names its own method.
        method = str(stored["vllm_quantization"])
        draft.content["quantization"] = method
        return [f"quantization '{method}': the checkpoint's quantization_config ({stored['method']}, "
                f"{stored['weight_bits']}-bit weights)"]
    if method is None:
        return []
    draft.content["quantization"] = method
    return [_quantization_note(quantization)]


QUANTIZATION = Technique(
    field="quantization",
    serving_columns=lambda value, gpu: {"quantization": QUANTIZATIONS.index(value)},
    runner_up_rank=5,
    group="key",
    description="serving weight format (bytes per weight; fp8/fp4 also set the compute precision)",
    parse=parse_choice("quantization", QUANTIZATIONS),
    # A quantized checkpoint is served in its own format (vLLM loads it as stored).
    default_values=lambda context: (context.checkpoint_format,) if context.checkpoint_format else
    ("bf16",) + (("fp8",) if "fp8" in context.supported_precisions else ()),
    columns=lambda value: {"quantization": value},
    decode=lambda codes: codes["quantization"],
    workloads=("infer",),
    plan_field=PlanField(
        python_type=str, default="bf16", choices=QUANTIZATIONS, flags=("--quantization",),
        doc="Weight format: bf16, fp8, int8, int4 (weight-only, GPTQ/AWQ) or fp4 (NVFP4).",
        help="infer: weight format (int8/int4 weight-only; fp8/fp4 need those tensor cores).",
    ),
    aliases=("quant",),
    contribution=Contribution(
        validity=quantization_invalid_reasons,
        memory=quantized_weight_bytes,
        time=serving_gemm_flops_per_s,
        contract=ContractField(name="quantization", json_type="string", enum=QUANTIZATIONS,
                               description="weight format: int8/int4 weight-only (group-128 fp16 scales), fp4 NVFP4 (fp8 scale per 16)"),
        display=lambda plan: str(plan["quantization"]),
        display_line="weights",
        exports={"torchtitan": Export(not_exported="a serving technique; serving plans export to vLLM (--export vllm)"),
                 "megatron": Export(not_exported="a serving technique; serving plans export to vLLM (--export vllm)"),
                 "deepspeed": Export(not_exported="a serving weight format; a serving plan has no DeepSpeed export"),
                 "vllm": Export(apply=_vllm)},
        sources=("Frantar et al. 2023, GPTQ", "Lin et al. 2024, AWQ", "NVIDIA NVFP4 (TensorRT Model Optimizer)",
                 "vLLM vllm/engine/arg_utils.py: quantization"),
    ),
)

TECHNIQUES = (QUANTIZATION,)
