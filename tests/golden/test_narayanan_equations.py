"""Golden test: Narayanan et al. 2021 eq. 2 (parameters) and eq. 3 (FLOPs per iteration).

Narayanan et al. 2021, section 5.1:
  eq. 2  P = 12*l*h^2 * (1 + 13/(12h) + (V+s)/(12*l*h))
  eq. 3  F = 96*B*s*l*h^2 * (1 + s/(6h) + V/(16*l*h))   (with activation recomputation)
against ``count_parameters`` and ``compute.hardware_flops_per_token`` under full
recomputation, for the ten GPT models of Table 1 and GPT-3 175B. Tolerance 0.5% (the task's
bound): eq. 2 leaves out the final LayerNorm and eq. 3 the non-GEMM and bias FLOPs.
"""

from __future__ import annotations

import pytest

from megatron_gpt import SEQ_LEN, TABLE_1, VOCAB, gpt_model
from vramopt.costs.columns import CHECKPOINT_EVERY, CHECKPOINT_NONE
from vramopt.costs.compute import hardware_flops_per_token, model_flops_per_token, narayanan_flops_per_iteration

TOLERANCE = 0.005
SHAPES = [(row.layers, row.hidden, row.heads) for row in TABLE_1] + [(96, 12288, 96)]


def narayanan_parameters(layers, hidden, vocab=VOCAB, seq_len=SEQ_LEN):
    return 12 * layers * hidden**2 * (1 + 13 / (12 * hidden) + (vocab + seq_len) / (12 * layers * hidden))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: f"{shape[0]}x{shape[1]}")
def test_parameter_equation(shape):
    layers, hidden, heads = shape
    count = gpt_model(layers, hidden, heads).parameters.total
    assert count == pytest.approx(narayanan_parameters(layers, hidden), rel=TOLERANCE)
    # The only difference is the final LayerNorm's weight and bias.
    assert count - narayanan_parameters(layers, hidden) == pytest.approx(2 * hidden, abs=1)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: f"{shape[0]}x{shape[1]}")
def test_flops_equation_with_full_recomputation(shape):
    layers, hidden, heads = shape
    model = gpt_model(layers, hidden, heads)
    batch = 512
    per_iteration = narayanan_flops_per_iteration(batch, SEQ_LEN, layers, hidden, VOCAB)
    assert per_iteration == pytest.approx(
        96 * batch * SEQ_LEN * layers * hidden**2 * (1 + SEQ_LEN / (6 * hidden) + VOCAB / (16 * layers * hidden))
    )
    vramopt = float(hardware_flops_per_token(model, SEQ_LEN, CHECKPOINT_EVERY)) * batch * SEQ_LEN
    assert vramopt == pytest.approx(per_iteration, rel=TOLERANCE)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: f"{shape[0]}x{shape[1]}")
def test_model_flops_are_three_quarters_without_the_recomputed_forward(shape):
    # Without recomputation the transformer GEMMs cost 72 (3 passes x 24) instead of 96 per
    # l*h^2*B*s; the logit layer's 6*V*h per token is not recomputed either way.
    layers, hidden, heads = shape
    model = gpt_model(layers, hidden, heads)
    without = 72 * SEQ_LEN * layers * hidden**2 * (1 + SEQ_LEN / (6 * hidden)) + 6 * VOCAB * hidden * SEQ_LEN
    assert float(model_flops_per_token(model, SEQ_LEN)) * SEQ_LEN == pytest.approx(without, rel=TOLERANCE)
    assert float(hardware_flops_per_token(model, SEQ_LEN, CHECKPOINT_NONE)) == float(model_flops_per_token(model, SEQ_LEN))
