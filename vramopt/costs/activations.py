"""Activation memory per transformer layer (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", section 4 and Table 2).

Korthikanti et al. count, per layer and per micro-batch, with 16-bit activations:
attention 11*s*b*h + 5*a*s^2*b, MLP 19*s*b*h, two layer norms 4*s*b*h, i.e.
``s*b*h*(34 + 5*a*s/h)``; with tensor parallelism ``10 + 24/t`` of the ``34`` is
replicated/sharded; sequence parallelism shards the rest (``34/t``); selective
recomputation drops the ``5*a*s/h`` term; full recomputation keeps ``2*s*b*h``.

vramopt generalizes the two constants to any architecture while reducing *exactly* to
the paper's 10 and 24 for a GPT layer (multi-head attention, plain 4h MLP):
- replicated part (10): layer-norm inputs 4, QKV input 2, MLP input 2, two dropout masks 2;
- sharded part (24): Q 2q, K and V 2r each, attention-output input 2q (q = heads*head_dim/h,
  r = kv_heads*head_dim/h; 8 for GPT) plus the MLP's inner activations (plain: 2f/h in and
  2f/h out = 16 for f = 4h; gated SwiGLU: gate, up and their product, 6f/h; MoE: the same
  for the top-k routed plus shared experts a token passes through).
Dropout masks are kept (the paper's assumption; an upper bound for dropout-free models).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vramopt.models.parameters import moe_layer_count
from vramopt.types import ModelSpec

REPLICATED_SBH = 10.0
"""Korthikanti et al. 2022 section 4.2.1: the 10*s*b*h not split by tensor parallelism."""
ATTENTION_SCORE_COEFFICIENT = 5.0
"""Korthikanti et al. 2022 eq. 1: softmax output 2as^2b + dropout mask as^2b + dropout output 2as^2b."""
FULL_RECOMPUTE_SBH = 2.0
"""Korthikanti et al. 2022 Table 2: full recomputation stores the 2*s*b*h layer input."""


@dataclass(frozen=True, slots=True)
class ActivationShape:
    """Per-layer activation coefficients of one model, in units of s*b*h bytes."""

    replicated_sbh: float
    sharded_sbh: float
    heads: int
    hidden_size: int

    @property
    def total_sbh(self) -> float:
        return self.replicated_sbh + self.sharded_sbh


def activation_shape(model: ModelSpec) -> ActivationShape:
    h = model.hidden_size
    q_ratio = model.heads * model.head_dim / h
    kv_ratio = model.kv_heads * model.head_dim / h
    attention = 4.0 * q_ratio + 4.0 * kv_ratio
    matrices_per_inner = 3.0 if model.gated_mlp else 2.0
    dense_mlp = 2.0 * matrices_per_inner * model.ffn_hidden_size / h
    mlp = dense_mlp
    if model.moe is not None:
        moe = model.moe
        routed_width = moe.experts_per_token * moe.expert_ffn_hidden_size
        shared_width = moe.shared_experts * moe.shared_expert_ffn_hidden_size
        moe_mlp = 2.0 * matrices_per_inner * (routed_width + shared_width) / h
        moe_layers = moe_layer_count(model.layers, moe)
        mlp = (moe_layers * moe_mlp + (model.layers - moe_layers) * dense_mlp) / model.layers
    return ActivationShape(REPLICATED_SBH, attention + mlp, model.heads, h)


def layer_bytes(
    shape: ActivationShape,
    seq_len,
    micro_batch,
    tensor_parallel,
    sequence_parallel,
    keep_attention_scores,
):
    """Bytes of saved activations of one layer for one micro-batch (16-bit activations).

    ``keep_attention_scores`` is false under flash attention or selective recomputation,
    both of which never keep the s^2 score matrices. Arguments may be numpy arrays.
    """
    s = np.asarray(seq_len, dtype=float)
    b = np.asarray(micro_batch, dtype=float)
    t = np.asarray(tensor_parallel, dtype=float)
    sbh = s * b * shape.hidden_size
    replicated = np.where(sequence_parallel, shape.replicated_sbh / t, shape.replicated_sbh)
    linear = sbh * (replicated + shape.sharded_sbh / t)
    scores = ATTENTION_SCORE_COEFFICIENT * shape.heads * s * s * b / t
    return linear + np.where(keep_attention_scores, scores, 0.0)


def checkpoint_bytes(shape: ActivationShape, seq_len, micro_batch, tensor_parallel=1, sequence_parallel=0):
    """Bytes kept per checkpointed layer input under full recomputation (Table 2: 2sbh).

    Under sequence parallelism the layer input is the tensor-parallel rank's sequence shard,
    [s/t, b, h], so each rank keeps 2sbh/t: Megatron-Core 0.16.1 refuses
    ``distribute_saved_activations`` (splitting the saved input over tp) together with
    ``sequence_parallel`` because the input is split already
    (megatron/core/transformer/transformer_config.py ``TransformerConfig.__post_init__``), and
    torchtitan's full AC keeps the same sharded input (frameworks/torchtitan_activations.py)."""
    split = np.where(np.asarray(sequence_parallel) == 1, np.asarray(tensor_parallel, dtype=float), 1.0)
    return (FULL_RECOMPUTE_SBH * np.asarray(seq_len, dtype=float) * np.asarray(micro_batch, dtype=float) * shape.hidden_size
            / split)
