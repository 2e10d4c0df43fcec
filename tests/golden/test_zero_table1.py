"""Golden test: ZeRO model-state memory per device, Rajbhandari et al. 2020 Table 1.

Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", section 5, Table 1: per-device memory of model states with mixed-precision Adam
(K = 12: 2 bytes of fp16 weights + 2 of gradients + 12 of fp32 master, momentum and
variance), for Psi = 7.5B, 128B and 1T, DP degree N_d = 1 ... 1024, and the three stages
P_os (ZeRO-1: 4Psi + 12Psi/N_d), P_os+g (ZeRO-2: 2Psi + 14Psi/N_d) and P_os+g+p (ZeRO-3:
16Psi/N_d). The values are the table's, in decimal GB.

Computed through ``vramopt.costs.memory.model_state_bytes`` with tp = pp = 1, dp = N_d, bf16,
for a synthetic model of exactly Psi parameters whose largest layer is 0, so ZeRO-3's
prefetch buffer (two full layers, which the paper's table does not count) adds nothing; a
separate test checks that buffer on a real GPT model.

Tolerance: the table's rounding. It prints three significant figures for the 7.5B model and
truncates the larger models to whole GB (1T at N_d = 1024: 4011.7 printed as 4011), so a
value passes within 1% relative or 0.05 GB absolute.
"""

from __future__ import annotations

import pytest

from golden_synthetic import columns, model_with_parameters, scalar
from megatron_gpt import gpt_model
from vramopt.costs.memory import PREFETCH_LAYERS, model_state_bytes

DEGREES = (1, 4, 16, 64, 256, 1024)
# model -> (Psi, {N_d: (P_os, P_os+g, P_os+g+p)}) in GB, as printed in Table 1.
TABLE_1 = {
    "7.5B": (7.5e9, {
        1: (120, 120, 120), 4: (52.5, 41.3, 30), 16: (35.6, 21.6, 7.5),
        64: (31.4, 16.6, 1.88), 256: (30.4, 15.4, 0.47), 1024: (30.1, 15.1, 0.12),
    }),
    "128B": (128e9, {
        1: (2048, 2048, 2048), 4: (896, 704, 512), 16: (608, 368, 128),
        64: (536, 284, 32), 256: (518, 263, 8), 1024: (513, 257, 2),
    }),
    "1T": (1e12, {
        1: (16000, 16000, 16000), 4: (7000, 5500, 4000), 16: (4750, 2875, 1000),
        64: (4187, 2218, 250), 256: (4046, 2054, 62.5), 1024: (4011, 2013, 15.6),
    }),
}
CASES = [
    (name, degree, stage, TABLE_1[name][1][degree][stage - 1])
    for name in TABLE_1 for degree in DEGREES for stage in (1, 2, 3)
]


def model_states_gb(psi: float, dp: int, zero_stage: int) -> float:
    memory = model_state_bytes(model_with_parameters(psi), columns(data_parallel=dp, zero_stage=zero_stage))
    return sum(scalar(memory[name]) for name in ("weights_bytes", "gradients_bytes", "optimizer_bytes")) / 1e9


@pytest.mark.parametrize(("model", "dp", "stage", "published_gb"), CASES, ids=lambda value: str(value))
def test_zero_table_1(model, dp, stage, published_gb):
    computed = model_states_gb(TABLE_1[model][0], dp, stage)
    assert abs(computed - published_gb) <= max(0.01 * published_gb, 0.05), (model, dp, stage, computed)


@pytest.mark.parametrize("model", TABLE_1)
def test_baseline_is_16_bytes_per_parameter(model):
    psi = TABLE_1[model][0]
    assert model_states_gb(psi, 1, 0) == pytest.approx(16 * psi / 1e9, rel=1e-12)
    for stage in (1, 2, 3):
        assert model_states_gb(psi, 1, stage) == pytest.approx(16 * psi / 1e9, rel=1e-12)


def test_zero3_prefetch_buffer_is_two_largest_layers_on_top_of_the_table():
    # vramopt adds what the table leaves out: ZeRO-3 gathers the full parameters of the
    # layers it computes (two in flight, DESIGN.md section 3). On the 7.5B GPT of
    # Narayanan et al. Table 1, subtracting 2 * largest_layer * 2 bytes gives 16 Psi / N_d.
    # At N_d = 1 nothing is gathered, so there is no buffer.
    model = gpt_model(36, 4096, 32)
    psi = model.parameters.total
    for dp in DEGREES:
        memory = model_state_bytes(model, columns(data_parallel=dp, zero_stage=3))
        total = sum(scalar(memory[name]) for name in ("weights_bytes", "gradients_bytes", "optimizer_bytes"))
        buffer = PREFETCH_LAYERS * model.parameters.largest_layer * 2.0 if dp > 1 else 0.0
        assert total - buffer == pytest.approx(16 * psi / dp, rel=1e-12)
