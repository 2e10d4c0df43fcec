"""--framework megatron counts the bytes per parameter of Megatron-LM's distributed-optimizer
table (issue 15 item 3; Megatron-LM core_v0.16.1 docs/user-guide/features/dist_optimizer.md:
'fp16 parameters, fp16 gradients 20 | 4 + 16/d'; 'bf16 parameters, fp32 gradients 18 |
6 + 12/d'; 'fp32 parameters, fp32 gradients 16 | 8 + 8/d'), exactly; the generic accounting
keeps bf16 gradients (16 | 4 + 12/d)."""

from __future__ import annotations

import pytest

from vramopt.estimate import estimate_training
from vramopt.models import load_model
from vramopt.types import TrainingPlan, TrainingWorkload

TABLE = [  # (precision, grad_comm_precision, non-distributed B/param, distributed B/param as a function of d)
    ("fp16", "fp16", 20, lambda d: 4 + 16 / d),
    ("bf16", "fp32", 18, lambda d: 6 + 12 / d),
    ("fp32", "fp32", 16, lambda d: 8 + 8 / d),
]


@pytest.mark.parametrize("precision, reduce, plain, distributed", TABLE)
@pytest.mark.parametrize("data_parallel", [2, 8])
def test_model_state_bytes_per_parameter_match_megatrons_table(precision, reduce, plain, distributed, data_parallel):
    model = load_model("llama-2-7b")
    workload = TrainingWorkload(model="llama-2-7b", seq_len=1024, global_batch=64)
    for zero, expected in ((0, plain), (1, distributed(data_parallel))):
        plan = TrainingPlan(gpu="a100-80gb", gpus=data_parallel, zero_stage=zero, precision=precision,
                            grad_comm_precision=reduce, checkpointing="full")
        values = estimate_training(workload, plan, framework="megatron").values
        states = values["weights_bytes"] + values["gradients_bytes"] + values["optimizer_bytes"]
        assert states / model.params_total == pytest.approx(expected, rel=1e-12), (precision, zero)


def test_grad_reduce_in_bf16_keeps_bf16_main_gradients():
    model = load_model("llama-2-7b")
    plan = TrainingPlan(gpu="a100-80gb", gpus=8, zero_stage=1, grad_comm_precision="bf16", checkpointing="full")
    values = estimate_training(TrainingWorkload(model="llama-2-7b", seq_len=1024, global_batch=64), plan, framework="megatron").values
    assert (values["weights_bytes"] + values["gradients_bytes"] + values["optimizer_bytes"]) / model.params_total == pytest.approx(4 + 12 / 8)
