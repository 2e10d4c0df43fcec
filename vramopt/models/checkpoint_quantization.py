"""A checkpoint's ``quantization_config`` (config.json): its method and weight bits.

The keys are those each method's checkpoints carry (transformers
``utils/quantization_config.py``, 5.24.0: ``AwqConfig``, ``GPTQConfig``, ``FineGrainedFP8Config``,
``CompressedTensorsConfig``, ``BitsAndBytesConfig``, ``Mxfp4Config``, ``ModelOptConfig``) and
the vLLM ``--quantization`` name that loads it (vLLM ``model_executor/layers/quantization/__init__.py``
``QuantizationMethods``). A method not listed is refused with the list, never taken as 16-bit.
"""

from __future__ import annotations

from typing import Any

from vramopt.errors import InputError
from vramopt.models.hf_config_reader import ConfigReader
from vramopt.types import CheckpointQuantization

KEY = "quantization_config"

INTEGER_FORMATS = {4: "int4", 8: "int8"}
FLOAT_FORMATS = {4: "fp4", 8: "fp8"}

SUPPORTED_METHODS = ("awq", "bitsandbytes", "compressed-tensors", "fbgemm_fp8", "fp8", "gptq", "modelopt", "mxfp4")


def read_quantization(config: ConfigReader) -> CheckpointQuantization | None:
    """The checkpoint's weight quantization, or None when config.json has no quantization_config."""
    if not config.present(KEY):
        return None
    table = config.data[KEY]
    if not isinstance(table, dict):
        raise config.error(KEY, f"must be a JSON object, got {type(table).__name__}")
    method = table.get("quant_method")
    if not isinstance(method, str):
        raise config.error(KEY, "has no 'quant_method' string")
    method = method.lower()
    reader = _READERS.get(method)
    if reader is None:
        raise config.error(KEY, f"quant_method '{method}' is not supported (supported: {', '.join(SUPPORTED_METHODS)})")
    return reader(config, table, method)


def _fail(config: ConfigReader, detail: str) -> Exception:
    return config.error(KEY, detail)


def _bits(config: ConfigReader, table: dict[str, Any], key: str, default: int | None) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(config, f"'{key}' must be an integer, got {value!r}")
    return value


def _group_size(table: dict[str, Any]) -> int | None:
    value = table.get("group_size")
    # GPTQ writes -1 for per-channel scales.
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _integer(config: ConfigReader, method: str, bits: int, group_size: int | None, vllm: str) -> CheckpointQuantization:
    weight_format = INTEGER_FORMATS.get(bits)
    if weight_format is None:
        raise _fail(config, f"{method} with {bits}-bit weights is not supported (supported: 4 or 8 bits)")
    return CheckpointQuantization(
        method=method, weight_bits=bits, weight_format=weight_format, group_size=group_size, vllm_quantization=vllm
    )


def _awq(config: ConfigReader, table: dict[str, Any], method: str) -> CheckpointQuantization:
    return _integer(config, method, _bits(config, table, "bits", 4), _group_size(table), "awq")


def _gptq(config: ConfigReader, table: dict[str, Any], method: str) -> CheckpointQuantization:
    return _integer(config, method, _bits(config, table, "bits", None), _group_size(table), "gptq")


def _fp8(config: ConfigReader, table: dict[str, Any], method: str) -> CheckpointQuantization:
    block = table.get("weight_block_size")
    group = block[0] * block[1] if isinstance(block, list) and len(block) == 2 and all(
        isinstance(side, int) and side > 0 for side in block) else None
    return CheckpointQuantization(method=method, weight_bits=8, weight_format="fp8", group_size=group,
                                  vllm_quantization=method)


def _mxfp4(config: ConfigReader, table: dict[str, Any], method: str) -> CheckpointQuantization:
    # OCP MX: 32 FP4 (E2M1) values share one 8-bit scale.
    return CheckpointQuantization(method=method, weight_bits=4, weight_format="fp4", group_size=32,
                                  vllm_quantization="mxfp4")


def _modelopt(config: ConfigReader, table: dict[str, Any], method: str) -> CheckpointQuantization:
    algorithm = table.get("quant_algo") or (table.get("quantization") or {}).get("quant_algo")
    if algorithm == "FP8":
        return CheckpointQuantization(method=method, weight_bits=8, weight_format="fp8", group_size=None,
                                      vllm_quantization="modelopt")
    if algorithm == "NVFP4":
        # NVFP4: 16 FP4 values share one FP8 scale.
        return CheckpointQuantization(method=method, weight_bits=4, weight_format="fp4", group_size=16,
                                      vllm_quantization="modelopt_fp4")
    raise _fail(config, f"modelopt quant_algo {algorithm!r} is not supported (supported: 'FP8', 'NVFP4')")


def _bitsandbytes(config: ConfigReader, table: dict[str, Any], method: str) -> CheckpointQuantization:
    if table.get("load_in_4bit") is True:
        bits = 4
    elif table.get("load_in_8bit") is True:
        bits = 8
    else:
        raise _fail(config, "bitsandbytes sets neither load_in_4bit nor load_in_8bit")
    # bitsandbytes 4-bit (NF4/FP4) stores blocks of 64 weights per scale.
    return _integer(config, method, bits, 64 if bits == 4 else None, "bitsandbytes")


def _compressed_tensors(config: ConfigReader, table: dict[str, Any], method: str) -> CheckpointQuantization:
    groups = table.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise _fail(config, "compressed-tensors has no 'config_groups'")
    schemes = set()
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            raise _fail(config, "a compressed-tensors config group has no 'weights' scheme")
        schemes.add((weights.get("type"), weights.get("num_bits"), weights.get("group_size")))
    if len(schemes) != 1:
        raise _fail(config, f"compressed-tensors with mixed weight schemes {sorted(map(str, schemes))} is not supported")
    kind, bits, group_size = schemes.pop()
    if kind == "float" and bits in FLOAT_FORMATS:
        return CheckpointQuantization(method=method, weight_bits=bits, weight_format=FLOAT_FORMATS[bits],
                                      group_size=group_size, vllm_quantization="compressed-tensors")
    if kind == "int" and isinstance(bits, int):
        return _integer(config, method, bits, group_size, "compressed-tensors")
    raise _fail(config, f"compressed-tensors weights of type {kind!r} with {bits!r} bits are not supported")


_READERS = {
    "awq": _awq,
    "gptq": _gptq,
    "fp8": _fp8,
    "fbgemm_fp8": _fp8,
    "mxfp4": _mxfp4,
    "modelopt": _modelopt,
    "bitsandbytes": _bitsandbytes,
    "compressed-tensors": _compressed_tensors,
}


def checkpoint_format(model: Any) -> str:
    """The serving weight format a model's checkpoint is stored in; '' for 16-bit weights."""
    quantization = getattr(model, "checkpoint_quantization", None)
    return quantization.weight_format if quantization is not None else ""


def check_checkpoint_format(model: Any, choices: Any, gpus: Any = ()) -> None:
    """A quantized checkpoint is served as stored: a pin or allow of another format is refused,
    and so is a search on GPUs none of which runs the format (fp8 / fp4 tensor cores)."""
    from vramopt.costs.inference import QUANTIZATION_NEEDS, QUANTIZATIONS

    quantization = getattr(model, "checkpoint_quantization", None)
    if quantization is None:
        return
    needs = QUANTIZATION_NEEDS[QUANTIZATIONS.index(quantization.weight_format)]
    if gpus and not any(gpu.supports(needs) for gpu in gpus):
        names = ", ".join(gpu.name for gpu in gpus)
        raise InputError(
            f"the checkpoint of {model.name} stores {quantization.method} {quantization.weight_bits}-bit weights (its "
            f"quantization_config), served as quantization={quantization.weight_format}, which needs {needs} tensor cores; "
            f"{names} {'has' if len(gpus) == 1 else 'have'} none (a weight-only {quantization.method} kernel on other GPUs "
            "is not modelled)"
        )
    for kind in ("pin", "allow"):
        other = [name for name in choices[kind].get("quantization", ()) if name != quantization.weight_format]
        if other:
            raise InputError(
                f"--{kind} quantization={','.join(other)}: the checkpoint of {model.name} stores "
                f"{quantization.method} {quantization.weight_bits}-bit weights (its quantization_config), which "
                f"serve as quantization={quantization.weight_format} only"
            )


def check_plan_format(model: Any, quantization: str) -> None:
    """A serving plan of a quantized checkpoint must use the checkpoint's weight format."""
    stored = getattr(model, "checkpoint_quantization", None)
    if stored is not None and quantization != stored.weight_format:
        raise InputError(
            f"quantization {quantization}: the checkpoint of {model.name} stores {stored.method} {stored.weight_bits}-bit "
            f"weights (its quantization_config), which serve as quantization={stored.weight_format} only"
        )
