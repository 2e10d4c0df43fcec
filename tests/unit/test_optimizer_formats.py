"""Optimizer-state formats (issue 12 item 5): bytes per trainable parameter from their
sources, ZeRO sharding of every format, the optimizer-step term, the validity rules, the
plan field end to end (estimate, JSON, display, DeepSpeed export notes)."""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.costs.columns import OFFLOAD_CPU, PlanColumns
from vramopt.costs.optimizer_states import (
    OPTIMIZER_NAMES,
    optimizer_bytes_per_parameter,
    step_bytes_per_parameter,
)
from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.errors import InputError
from vramopt.estimate import estimate_training
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.types import PRECISIONS, TrainingPlan, TrainingWorkload

ADAM, ADAM8BIT, ADAFACTOR, SGD = range(4)
BF16, FP32 = PRECISIONS.index("bf16"), PRECISIONS.index("fp32")


def test_bytes_per_parameter_from_the_sources():
    hidden = 4096
    mixed = optimizer_bytes_per_parameter(hidden, np.arange(4), True)
    # ZeRO section 3.1: K = 12 (fp32 master + momentum + variance).
    assert mixed[ADAM] == 12.0
    # Dettmers et al. 2022: two 1-byte states + one fp32 absmax per 2,048-value block each.
    assert mixed[ADAM8BIT] == pytest.approx(4 + 2 + 2 * 4 / 2048, abs=1e-12)
    # Shazeer & Stern 2018: row + column fp32 vectors per matrix, at most 8/h per parameter.
    assert mixed[ADAFACTOR] == pytest.approx(4 + 8 / 4096, abs=1e-12)
    # SGD with momentum: one fp32 buffer.
    assert mixed[SGD] == 8.0
    # Pure fp32: the weights are the master copy.
    assert optimizer_bytes_per_parameter(hidden, ADAM, False) == 8.0


def test_step_bytes_streamed_per_parameter():
    """bf16 Adam: read grad 2 + master 4 + m 4 + v 4, write master 4 + m 4 + v 4 + bf16 copy 2 = 28."""
    assert step_bytes_per_parameter(4096, ADAM, 2.0, 2.0, True) == 28.0
    assert step_bytes_per_parameter(4096, SGD, 2.0, 2.0, True) == 20.0
    assert step_bytes_per_parameter(4096, ADAM8BIT, 2.0, 2.0, True) == pytest.approx(16.0 + 4 * 4 / 2048)
    # fp32: grad 4 + weight read/write 8 + states 16, no separate copy.
    assert step_bytes_per_parameter(4096, ADAM, 4.0, 4.0, False) == 28.0


def _case(kind_fraction=1.0):
    return TrainingCase(model=load_model("llama-3.1-8b"), gpu=load_gpu("h100"), seq_len=4096, global_batch=64,
                        trainable_fraction=kind_fraction)


def _columns(zero_stage, optimizer, offload=0, precision=BF16):
    return PlanColumns.from_scalars(
        gpus=8, tensor_parallel=1, pipeline_parallel=1, data_parallel=8, sequence_parallel=0, virtual_stages=1,
        zero_stage=zero_stage, checkpoint_kind=0, checkpoint_every=0, precision=precision, grad_comm_precision=precision,
        offload=offload, flash_attention=1, micro_batch=1, optimizer=optimizer,
    )


def test_zero_shards_every_format_over_data_parallel():
    case = _case()
    params = case.model.parameters.total
    for optimizer, k in ((ADAM, 12.0), (ADAM8BIT, 6.00390625), (SGD, 8.0)):
        unsharded = evaluate_training(case, _columns(0, optimizer))["optimizer_bytes"][0]
        sharded = evaluate_training(case, _columns(1, optimizer))["optimizer_bytes"][0]
        assert unsharded == pytest.approx(params * k, rel=1e-12), OPTIMIZER_NAMES[optimizer]
        assert sharded == pytest.approx(params * k / 8, rel=1e-12), OPTIMIZER_NAMES[optimizer]


def test_adam_adds_no_step_time_and_leaner_formats_save_hbm_time():
    """Adam's bf16 step streams 30 bytes per parameter (gradient-norm read 2, gradient 2, fp32
    master 4 + 4, momentum and variance 8 + 8, bf16 copy 2); 8-bit Adam 12 fewer."""
    case = _case()
    values = evaluate_training(case, _columns(1, np.array([ADAM, ADAM8BIT, ADAFACTOR, SGD])))
    step = values["optimizer_step_s"]
    shard = case.model.parameters.total / 8
    bandwidth = case.gpu.hbm_bandwidth_bytes_per_s * 0.80  # coefficient hbm_bandwidth_efficiency
    assert step[ADAM] == pytest.approx(30.0 * shard / bandwidth, rel=1e-9)
    assert step[ADAM] - step[ADAM8BIT] == pytest.approx((12.0 - 4 * 4 / 2048) * shard / bandwidth, rel=1e-9)
    assert step[ADAM] - step[SGD] == pytest.approx(8.0 * shard / bandwidth, rel=1e-9)
    assert 0.0 < step[ADAFACTOR] < step[ADAM8BIT] < step[SGD] < step[ADAM]
    assert np.all(values["step_time_s"] > 0)


def test_offload_needs_adam_and_lora_refuses_adafactor():
    from vramopt.constraints.validity import training_invalid_reasons as invalid_reasons

    offload_reason = "offload cpu or nvme needs optimizer adam (DeepSpeed's offloaded step runs DeepSpeedCPUAdam on the host)"
    masks = invalid_reasons(_case(), _columns(1, np.arange(4), offload=OFFLOAD_CPU))
    assert masks[offload_reason].tolist() == [False, True, True, True]
    lora = invalid_reasons(_case(0.01), _columns(1, np.arange(4)))
    assert [key for key, mask in lora.items() if np.asarray(mask).any()] == [
        "optimizer adafactor is not modelled for LoRA/QLoRA adapters (its factored estimate assumes matrices at least "
        "the hidden size wide)"
    ]


def test_estimate_carries_the_field_into_json_and_display():
    from vramopt.display import render_plan

    workload = TrainingWorkload(model="llama-3.1-8b", global_batch=64, kind="finetune")
    estimate = estimate_training(workload, TrainingPlan(gpu="h100", gpus=8, zero_stage=1, optimizer="adam8bit"))
    body = estimate.to_dict()
    assert body["plan"]["optimizer"] == "adam8bit"
    adam = estimate_training(workload, TrainingPlan(gpu="h100", gpus=8, zero_stage=1)).to_dict()
    assert 0 < body["throughput"]["optimizer_step_s"] < adam["throughput"]["optimizer_step_s"]
    assert "optimizer 8-bit Adam" in render_plan(body)
    from vramopt.display import render_training

    table = render_training(body)
    assert "optimizer states (adam8bit)" in table and "optimizer step" in table
    assert "optimizer states (Adam)" in render_training(estimate_training(
        workload, TrainingPlan(gpu="h100", gpus=8, zero_stage=1)).to_dict())
    plain = estimate_training(workload, TrainingPlan(gpu="h100", gpus=8, zero_stage=1)).to_dict()
    assert plain["plan"]["optimizer"] == "adam" and "optimizer" not in render_plan(plain).split("memory", 1)[1].split("\n")[0]
    with pytest.raises(InputError, match="optimizer 'lion' is not one of adam, adam8bit, adafactor, sgd"):
        estimate_training(workload, TrainingPlan(gpu="h100", gpus=8, optimizer="lion"))


def test_deepspeed_export_notes_name_the_client_optimizer():
    from vramopt.exporters.deepspeed import deepspeed_config

    workload = TrainingWorkload(model="llama-3.1-8b", global_batch=64, kind="finetune")
    for name, phrase in (("adam", "assumes Adam/AdamW"), ("adam8bit", "not a DeepSpeed built-in"),
                         ("adafactor", "transformers.Adafactor"), ("sgd", "torch.optim.SGD")):
        response = estimate_training(workload, TrainingPlan(gpu="h100", gpus=8, zero_stage=1, optimizer=name)).to_dict()
        notes = deepspeed_config(response).notes
        assert any(phrase in note for note in notes), name


def test_the_optimizer_technique_is_complete_and_registered():
    from vramopt.constraints import registry
    from vramopt.constraints.contribution import missing_parts
    from vramopt.constraints.optimizer_format import OPTIMIZER

    assert registry.technique("optimizer") is OPTIMIZER and "optimizer" in registry.STATE_FIELDS
    assert "optimizer" not in registry.NOT_MIGRATED
    assert missing_parts(OPTIMIZER) == []


def test_the_cli_spells_the_same_optimizer_names():
    from vramopt.cli import main
    from vramopt.constraints.optimizer_format import OPTIMIZER

    option = next(param for param in main.commands["estimate"].params if param.name == "optimizer")
    assert tuple(option.type.choices) == OPTIMIZER_NAMES
    assert tuple(OPTIMIZER.contribution.contract.enum) == OPTIMIZER_NAMES
