"""Training precision and the precision of gradients on the wire.

Default domain: for pretraining bf16 and, where the GPU's tensor cores run it, fp8 (the
seed recommends FP8 for pretraining and BF16 as the safe default); for fine-tuning, LoRA
and QLoRA bf16 only (the seed: BF16 for fine-tuning). fp16 and fp32 are available with
``--allow precision=...``; fp4 only with ``--allow-fp4`` (the seed: not production-ready).
Gradient communication defaults to the training precision; ``--allow
grad_comm_precision=fp8`` lets the search quantize gradients on the wire (an accuracy risk
vramopt does not price, so it is opt-in).
"""

from __future__ import annotations

from vramopt.constraints.contribution import Contribution, ContractField, Export, ExportDraft, no_rules, no_term
from vramopt.constraints.technique import DomainContext, PlanField, Technique, parse_choice
from vramopt.constraints.key_domain import KeyDomain
from vramopt.costs.communication import data_parallel_seconds_per_step
from vramopt.costs.compute import peak_flops_per_s
from vramopt.costs.operators import linear_peak
from vramopt.costs.memory import weight_bytes_per_parameter
from vramopt.types import PRECISIONS

COMMUNICATION_DATA_TYPES = ("fp16", "bf16", "fp32")
"""What DeepSpeed's communication_data_type accepts (deepspeed/runtime/config.py, get_communication_data_type)."""
TRAINING_ONLY_VLLM = "a training plan has no vLLM export (serving's weight format is the quantization field)"

PREFERENCE = ("bf16", "fp8", "fp16", "fp32", "fp4")
"""Tie-break order among precisions: the safe default first."""


def _default_precisions(context: DomainContext) -> tuple[str, ...]:
    if context.kind != "train":
        # The seed: "use BF16 for fine-tuning where every quality point matters".
        return ("bf16",)
    wanted = ["bf16", "fp8"] + (["fp4"] if context.allow_fp4 else [])
    return tuple(value for value in wanted if value in context.supported_precisions)


def precision_invalid_reasons(case, columns) -> dict:
    return {"the GPU does not support this precision": peak_flops_per_s(case.gpu, columns.precision) <= 0}


def _invalid_detail(case, plan, reason: str) -> str | None:
    """The precision rule's message naming what the GPU's tensor cores do run."""
    if "precision" not in reason:
        return None
    return f"{case.gpu.name} does not support {plan.precision} (its tensor cores run: {', '.join(case.gpu.peak_flops_per_s)})"


def _deepspeed_precision(draft: ExportDraft) -> list[str]:
    precision, setting = draft.plan["precision"], draft.setting
    if precision == "bf16":
        draft.content["bf16"] = {"enabled": True}
        return []
    if precision == "fp16":
        draft.content["fp16"] = {
            "enabled": True,
            "loss_scale": setting("loss_scale"),
            "initial_scale_power": setting("initial_scale_power"),
            "loss_scale_window": setting("loss_scale_window"),
            "hysteresis": setting("hysteresis"),
            "min_loss_scale": setting("min_loss_scale"),
        }
        return []
    if precision == "fp32":
        return []  # neither fp16 nor bf16 enabled: DeepSpeed trains in fp32
    # fp8 and fp4: the config has no switch; bf16 is the precision around the low-precision GEMMs.
    draft.content["bf16"] = {"enabled": True}
    library = "Transformer Engine (te.fp8_autocast) or MS-AMP" if precision == "fp8" else "Transformer Engine's NVFP4 recipe"
    return [f"precision {precision}: the DeepSpeed config has no {precision} switch; bf16 is enabled and the "
            f"{precision} matrix multiplications come from {library} in the model code"]


def _deepspeed_communication(draft: ExportDraft) -> list[str]:
    """communication_data_type when the wire precision differs from DeepSpeed's default (the
    training dtype)."""
    precision, wire = draft.plan["precision"], draft.plan["grad_comm_precision"]
    regime = "bf16" if precision in ("fp8", "fp4") else precision
    if wire == regime:
        return []
    if wire in COMMUNICATION_DATA_TYPES:
        draft.content["communication_data_type"] = wire
        return []
    return [f"grad_comm_precision {wire}: DeepSpeed's communication_data_type takes only "
            f"{', '.join(COMMUNICATION_DATA_TYPES)}; gradients travel in {regime}, twice or more the bytes the plan "
            "assumed, so the data-parallel time is optimistic (ZeRO++ zero_quantized_gradients is a different, int4 scheme)"]


MEGATRON_PRECISION_ARGUMENTS = {
    "fp32": (),
    "fp16": (("--fp16",),),
    "bf16": (("--bf16",),),
    # Transformer Engine: e4m3 forward / e5m2 backward ('hybrid'), the recipe of Micikevicius et al. 2022.
    "fp8": (("--bf16",), ("--fp8-format", "hybrid")),
    # NVFP4 (e2m1 elements) through Transformer Engine >= 2.7, bf16 around it.
    "fp4": (("--bf16",), ("--fp4-format", "e2m1")),
}
"""Megatron-LM arguments.py precision flags ('--fp8-format' choices e4m3, hybrid; '--fp4-format' e2m1)."""


def _megatron_precision(draft: ExportDraft) -> list[str]:
    for flag, *values in MEGATRON_PRECISION_ARGUMENTS[draft.plan["precision"]]:
        draft.argument(flag, *values)
    return []


def _megatron_communication(draft: ExportDraft) -> list[str]:
    wire, compute = draft.plan.get("grad_comm_precision"), draft.plan["precision"]
    if wire == "bf16" and compute != "fp32":
        draft.argument("--grad-reduce-in-bf16")
    if wire == "fp32" and compute == "fp16":
        draft.argument("--accumulate-allreduce-grads-in-fp32")  # bf16 sets it by itself (validate_args)
    return []


def _torchtitan_precision(draft: ExportDraft) -> list[str]:
    precision = draft.plan["precision"]
    draft.argument("--training.mixed_precision_param", "float32" if precision == "fp32" else "bfloat16")
    config = draft.model["config"]
    if draft.model.get("float8_config"):
        if precision == "fp8":
            return []
        return [f"precision {precision}: {config} converts every linear but lm_head to float8 (a model converter of the "
                f"config function, not an override); a {precision} run needs a config function without it"]
    if precision not in ("fp8", "fp4"):
        return []
    return [f"precision {precision}: torchtitan's float8/NVFP4 linears are model converters set in a config_registry "
            f"function (as {config}'s _mxfp8/_nvfp4 variants do); {config} itself trains in bf16"]


PRECISION = Technique(
    field="precision",
    runner_up_rank=1,
    group="key",
    description="compute precision of weights, gradients and activations (Adam states stay fp32)",
    parse=parse_choice("precision", PRECISIONS),
    default_values=_default_precisions,
    columns=lambda value: {"precision": PRECISIONS.index(value)},
    decode=lambda codes: PRECISIONS[int(codes["precision"])],
    plan_field=PlanField(
        python_type=str, default="bf16", choices=PRECISIONS, flags=("--precision",),
        help="Compute precision (fp32 master weights and Adam states stay fp32).",
    ),
    contribution=Contribution(
        validity=precision_invalid_reasons,
        invalid_detail=_invalid_detail,
        memory=weight_bytes_per_parameter,
        time=linear_peak,  # the GEMMs' peak at this precision (attention stays bf16)
        contract=ContractField(name="precision", json_type="string", enum=PRECISIONS,
                               description="compute precision (fp32 master weights and optimizer states stay fp32)"),
        display=lambda plan: f"{plan['precision']} compute",
        display_line="precision",
        exports={"torchtitan": Export(apply=_torchtitan_precision), "megatron": Export(apply=_megatron_precision), "deepspeed": Export(apply=_deepspeed_precision), "vllm": Export(not_exported=TRAINING_ONLY_VLLM)},
        sources=("Micikevicius et al. 2018, Mixed Precision Training; Micikevicius et al. 2022, FP8 Formats for Deep Learning",
                 "GPU datasheets: dense tensor-core peak per precision (hardware/gpus/*.toml)"),
    ),
    key_domain=KeyDomain(values=lambda request: tuple(
        name for name in sorted(request.resolve("precision"), key=PREFERENCE.index) if request.gpu.supports(name))),
)

SAME_AS_PRECISION = "same"

GRAD_COMM_PRECISION = Technique(
    field="grad_comm_precision",
    group="state",
    description="precision of gradients in data-parallel communication",
    parse=parse_choice("grad_comm_precision", PRECISIONS),
    default_values=lambda context: (SAME_AS_PRECISION,),
    # 'same' writes no code: the table takes the key's training precision.
    columns=lambda value: {} if value == SAME_AS_PRECISION else {"grad_comm_precision": PRECISIONS.index(value)},
    decode=lambda codes: PRECISIONS[int(codes["grad_comm_precision"])],
    neutral=SAME_AS_PRECISION,
    plan_field=PlanField(
        python_type=str, default="bf16", choices=PRECISIONS, flags=("--grad-comm-precision",), follows="precision",
        help="Precision of gradients on the wire.  [default: same as --precision]",
    ),
    contribution=Contribution(
        validity=no_rules,
        memory=no_term,  # the gradients are held at the training precision; only the wire changes
        time=data_parallel_seconds_per_step,
        contract=ContractField(name="grad_comm_precision", json_type="string", enum=PRECISIONS,
                               description="precision of gradients in data-parallel communication"),
        display=lambda plan: f"{plan['grad_comm_precision']} gradient communication",
        display_line="precision",
        exports={"torchtitan": Export(not_exported="torchtitan reduces gradients in float32 (training.mixed_precision_reduce), which its rule requires"),
                 "megatron": Export(apply=_megatron_communication), "deepspeed": Export(apply=_deepspeed_communication), "vllm": Export(not_exported=TRAINING_ONLY_VLLM)},
        sources=("DeepSpeed config-json: communication_data_type", "Peng et al. 2023, FP8-LM (fp8 gradient all-reduce)"),
    ),
)

TECHNIQUES = (PRECISION, GRAD_COMM_PRECISION)
