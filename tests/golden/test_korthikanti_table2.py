"""Golden test: activation memory per transformer layer, Korthikanti et al. 2022 Table 2.

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
section 4, Table 2 (bytes per layer, 16-bit activations, s sequence, b micro-batch,
h hidden, a heads, t tensor-parallel size):

  no parallelism                      sbh (34 + 5as/h)
  tensor parallel (baseline)          sbh (10 + 24/t + 5as/(ht))
  tensor + sequence parallel          sbh (34/t + 5as/(ht))
  tensor parallel + selective         sbh (10 + 24/t)
  tensor + sequence + selective       sbh (34/t)
  full activation recomputation       sbh (2)

through ``vramopt.costs.activations`` for GPT-3 175B from the catalog (multi-head attention,
plain 4h MLP: the architecture the table assumes) with s = 2048, b = 1, t = 8, and for the
same layer through ``memory.activation_bytes`` (96 layers, no pipeline). Exact: relative 1e-9.
The paper's section-5 per-model memory figures are bars in a figure and are not tested.
"""

from __future__ import annotations

import numpy as np
import pytest

from golden_synthetic import columns, scalar
from vramopt.costs.activations import activation_shape, checkpoint_bytes, layer_bytes
from vramopt.costs.columns import CHECKPOINT_EVERY, CHECKPOINT_NONE, CHECKPOINT_SELECTIVE
from vramopt.costs.memory import activation_bytes
from vramopt.models import load_model

EXACT = 1e-9
S, B, T = 2048, 1, 8


@pytest.fixture(scope="module")
def gpt3():
    return load_model("gpt3-175b")


def table_2(model, t):
    s, b, h, a = S, B, model.hidden_size, model.heads
    sbh = s * b * h
    return {
        "no parallelism": sbh * (34 + 5 * a * s / h),
        "tensor parallel": sbh * (10 + 24 / t + 5 * a * s / (h * t)),
        "tensor + sequence parallel": sbh * (34 / t + 5 * a * s / (h * t)),
        "tensor parallel + selective": sbh * (10 + 24 / t),
        "tensor + sequence parallel + selective": sbh * (34 / t),
        "full recomputation": sbh * 2,
    }


def test_gpt3_layer_splits_into_the_papers_10_and_24(gpt3):
    shape = activation_shape(gpt3)
    assert shape.replicated_sbh == 10.0
    assert shape.sharded_sbh == 24.0
    assert 5 * gpt3.heads * S / gpt3.hidden_size == pytest.approx(80.0)  # the s^2 term dominates 34


@pytest.mark.parametrize(
    ("row", "tensor_parallel", "sequence_parallel", "keep_scores"),
    [
        ("no parallelism", 1, False, True),
        ("tensor parallel", T, False, True),
        ("tensor + sequence parallel", T, True, True),
        ("tensor parallel + selective", T, False, False),
        ("tensor + sequence parallel + selective", T, True, False),
    ],
)
def test_table_2_rows(gpt3, row, tensor_parallel, sequence_parallel, keep_scores):
    expected = table_2(gpt3, T)[row]
    computed = layer_bytes(activation_shape(gpt3), S, B, tensor_parallel, sequence_parallel, keep_scores)
    assert float(computed) == pytest.approx(expected, rel=EXACT)


def test_full_recomputation_row(gpt3):
    assert float(checkpoint_bytes(activation_shape(gpt3), S, B)) == pytest.approx(table_2(gpt3, T)["full recomputation"], rel=EXACT)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_rows_hold_for_every_tensor_parallel_size(gpt3, t):
    shape = activation_shape(gpt3)
    rows = table_2(gpt3, t)
    assert float(layer_bytes(shape, S, B, t, False, True)) == pytest.approx(rows["tensor parallel"], rel=EXACT)
    if t > 1:
        assert float(layer_bytes(shape, S, B, t, True, False)) == pytest.approx(
            rows["tensor + sequence parallel + selective"], rel=EXACT
        )


@pytest.mark.parametrize(
    ("kind", "flash", "sequence_parallel", "row"),
    [
        (CHECKPOINT_NONE, 0, 0, "tensor parallel"),
        (CHECKPOINT_NONE, 0, 1, "tensor + sequence parallel"),
        (CHECKPOINT_SELECTIVE, 0, 0, "tensor parallel + selective"),
        (CHECKPOINT_SELECTIVE, 0, 1, "tensor + sequence parallel + selective"),
        # flash attention never keeps the score matrices either (Dao et al. 2022)
        (CHECKPOINT_NONE, 1, 1, "tensor + sequence parallel + selective"),
    ],
)
def test_model_activation_memory_is_layers_times_the_row(gpt3, kind, flash, sequence_parallel, row):
    plan = columns(tensor_parallel=T, sequence_parallel=sequence_parallel, checkpoint_kind=kind, flash_attention=flash)
    computed = scalar(activation_bytes(gpt3, activation_shape(gpt3), plan, S, np.array([1.0])))
    assert computed == pytest.approx(gpt3.layers * table_2(gpt3, T)[row], rel=EXACT)


def test_model_memory_under_full_recomputation(gpt3):
    # Every layer keeps its 2sbh input; one layer at a time is rebuilt for the backward.
    plan = columns(tensor_parallel=T, checkpoint_kind=CHECKPOINT_EVERY, checkpoint_every=1, flash_attention=0)
    computed = scalar(activation_bytes(gpt3, activation_shape(gpt3), plan, S, np.array([1.0])))
    rows = table_2(gpt3, T)
    assert computed == pytest.approx(gpt3.layers * rows["full recomputation"] + rows["tensor parallel"], rel=EXACT)
