"""The time of one serving step of a replica (the request-level model's building block).

A step of ``n`` decodes and ``q`` prompt tokens (``costs/request_serving.py`` explains the
engine and its sources):

    step(n, q) = max(weights / t / bandwidth, wave + (n + q) GEMM s per token + logits x head s per token)
               + max(KV bytes / bandwidth, attention FLOPs / attention rate)
               + memory-bound kernels' bytes / bandwidth
               + tensor-parallel all-reduces (+ draft steps under speculative decoding)

Every operator group is a maximum of pieces affine in a scale (``pieces``): with the counts
given, the pieces of one step; with rates (counts per second of step), the slopes of a
step whose counts grow with its length T, whose fixed point T = step(T) is exact
(``affine_fixed_point``). ``STEP_INPUTS`` names the per-row arrays the step reads, so a
caller can evaluate it once per distinct row (``costs/row_groups.py``).
"""

from __future__ import annotations

import itertools

import numpy as np

from vramopt.costs.gemm import TILE_M
from vramopt.costs.serving_experts import COVERAGE_TANGENT_TOKENS, coverage_tangent, expert_coverage

STEP_INPUTS = (
    "tensor_parallel", "speculative", "hbm_bytes_per_s", "weights_read_bytes", "kv_read_bytes_per_token",
    "link_bytes_per_s", "gemm_body_s_per_token", "gemm_head_s_per_token", "gemm_wave_s", "attention_flops_per_s",
    "elementwise_bytes_per_token", "logit_bytes_per_token", "all_reduce_latency_s", "draft_weights_read_bytes",
    "attention_groups", "expert_read_bytes", "all_to_all_s_per_token", "all_to_all_latency_s", "all_reduces_per_step",
)
"""Per-row arrays of a plan's evaluated values (``costs/inference.py``) the step depends on;
``tensor_parallel`` and ``speculative`` (1 or 0) come from the plan's columns."""


def affine_fixed_point(groups):
    """T* = step(T) for step(T) = sum over groups of max over (a, b) pieces of a + b T.

    The sum of maxima is the maximum over one piece per group, so the fixed point is the
    largest a / (1 - b) over those combinations; inf where a combination has b >= 1, even
    with a = 0: the step always has a positive part (the weights), so a piece growing as
    fast as T leaves no positive fixed point (no steady state: the replica falls behind)."""
    best = None
    for combination in itertools.product(*groups):
        a = sum(piece[0] for piece in combination)
        b = sum(piece[1] for piece in combination)
        with np.errstate(divide="ignore", invalid="ignore"):
            point = np.where(b < 1.0, a / (1.0 - b), np.inf)
        best = point if best is None else np.maximum(best, point)
    return best


def step_inputs(columns, values) -> dict[str, np.ndarray]:
    """The step's inputs of every plan row, from its columns and evaluated values."""
    inputs = {name: values[name] for name in STEP_INPUTS[2:]}
    inputs["tensor_parallel"] = columns.tensor_parallel
    inputs["speculative"] = columns.speculative
    return inputs


class StepModel:
    """The step time of the rows of ``inputs`` (arrays of equal length, ``STEP_INPUTS``)."""

    def __init__(self, case, inputs, input_tokens: float, decode_context: float, prefill_context: float):
        model = case.model
        self.input_tokens = input_tokens
        self.decode_context, self.prefill_context = decode_context, prefill_context
        t = np.asarray(inputs["tensor_parallel"], dtype=float)
        self.speculative = np.asarray(inputs["speculative"]) == 1
        self.gamma = float(case.speculative_tokens)
        self.verified = np.where(self.speculative, self.gamma + 1.0, 1.0)
        self.bandwidth = inputs["hbm_bytes_per_s"]
        # Counts are the replica's; a GPU runs the tokens of its attention group, 1/d of them
        # (expert-parallel replicas, costs/serving_experts.py; d = 1 otherwise).
        groups = np.asarray(inputs["attention_groups"], dtype=float)
        self.groups = groups
        self.weights_read = inputs["weights_read_bytes"]
        self.expert_bytes = inputs["expert_read_bytes"]
        self.moe = model.moe
        self.kv_token = inputs["kv_read_bytes_per_token"] / groups
        link = inputs["link_bytes_per_s"]
        self.body, self.head = inputs["gemm_body_s_per_token"] / groups, inputs["gemm_head_s_per_token"] / groups
        self.wave = inputs["gemm_wave_s"]
        self.attention_rate = inputs["attention_flops_per_s"]
        self.elementwise = inputs["elementwise_bytes_per_token"] / groups
        self.logit_bytes = inputs["logit_bytes_per_token"] / groups
        self.attention = 4.0 * model.layers * model.heads * model.head_dim / t / groups
        all_reduces = inputs["all_reduces_per_step"]
        self.latency = all_reduces * inputs["all_reduce_latency_s"] + inputs["all_to_all_latency_s"]
        with np.errstate(divide="ignore", invalid="ignore"):
            self.per_token_comm = np.where(t > 1, all_reduces * 2.0 * (t - 1.0) / t * model.hidden_size * 2.0 / link / groups, 0.0) \
                + inputs["all_to_all_s_per_token"]
        self.draft_weights = inputs["draft_weights_read_bytes"]
        self.draft_linear = (self.body + self.head) * case.draft_params_fraction
        self.draft_kv_fraction = case.draft_kv_fraction

    def pieces(self, decodes, prompt_tokens, constant, tangent=None):
        """The step's operator groups as (a, b) pieces of a + b x scale: with ``constant`` 1
        the pieces of one step (decodes and prompt_tokens are counts), with 0 the slopes of
        a step whose counts grow as decodes x T and prompt_tokens x T (rates). Returns the
        GEMM group twice, with the constant wave term and with the wave per token (steps
        under TILE_M tokens; the step is the smaller of the two, costs/serving_operators.py),
        and the other groups once. The routed experts' bytes streamed are their coverage of
        the step's tokens (costs/serving_experts.py): exact for counts (``tangent`` None),
        and for rates the tangent of the coverage at ``tangent`` tokens, an upper bound
        affine in the scale."""
        verified, speculative, bandwidth, kv_token = self.verified, self.speculative, self.bandwidth, self.kv_token
        tokens = decodes * verified + prompt_tokens
        # Logits: every verified decode token and the last token of each prompt.
        logits = decodes * verified + prompt_tokens / self.input_tokens
        with np.errstate(divide="ignore", invalid="ignore"):
            # The GEMMs: the weights streamed from HBM, or their FLOPs plus the wave term, whichever is longer.
            if self.moe is None:
                streaming = (constant * self.weights_read / bandwidth, 0.0)
            elif tangent is None:
                covered = expert_coverage(tokens, self.moe.experts, self.moe.experts_per_token)
                streaming = ((self.weights_read + self.expert_bytes * covered) / bandwidth, 0.0)
            else:
                intercept, slope = coverage_tangent(tangent, self.moe.experts, self.moe.experts_per_token)
                streaming = ((self.weights_read + self.expert_bytes * intercept) / bandwidth,
                             self.expert_bytes * slope * tokens / bandwidth)
            flops = tokens * self.body + logits * self.head
            # A GPU's GEMMs see its group's tokens: the thin-wave share grows with tokens / d.
            gemm_full_waves = [streaming, (constant * self.wave, flops)]
            gemm_thin_waves = [streaming, (0.0, flops + tokens / self.groups * self.wave / TILE_M)]
            # Attention over the KV cache in use: its bytes or its FLOPs.
            attention_group = [(0.0, (decodes * self.decode_context + prompt_tokens) * kv_token / bandwidth),
                               (0.0, (decodes * verified * self.decode_context + prompt_tokens * self.prefill_context)
                                * self.attention / self.attention_rate)]
            # The memory-bound kernels and the tensor-parallel all-reduces: no other resource bounds them.
            serial = [(constant * self.latency,
                       tokens * self.per_token_comm + (tokens * self.elementwise + logits * self.logit_bytes) / bandwidth)]
            draft = [(np.where(speculative, constant * self.gamma * self.draft_weights / bandwidth, 0.0),
                      np.where(speculative, self.gamma * decodes * self.decode_context * kv_token * self.draft_kv_fraction / bandwidth, 0.0)),
                     (0.0, np.where(speculative, self.gamma * decodes * self.draft_linear, 0.0))]
        return gemm_full_waves, gemm_thin_waves, [attention_group, serial, draft]

    def step(self, decodes, prompt_tokens):
        """Step time of one replica with ``decodes`` sequences and ``prompt_tokens`` prompt tokens:
        the operator groups run one after another, each as long as its slower resource."""
        full_waves, thin_waves, rest = self.pieces(decodes, prompt_tokens, 1.0)
        shape = np.shape(decodes)
        return sum(_group_time(group, shape) for group in rest) + np.minimum(_group_time(full_waves, shape), _group_time(thin_waves, shape))

    def fixed_point(self, decodes_per_s, prompt_per_s):
        """The step length T at which n = decodes_per_s x T and q = prompt_per_s x T. For a
        mixture of experts the smallest fixed point over the coverage's tangents
        (``COVERAGE_TANGENT_TOKENS``, and the all-experts bound): each is an upper bound
        of the step, so each fixed point bounds the true one from above."""
        best = None
        for tangent in (None,) if self.moe is None else COVERAGE_TANGENT_TOKENS + (np.inf,):
            full_waves, thin_waves, rest = self.pieces(decodes_per_s, prompt_per_s, 1.0, tangent)
            point = np.minimum(affine_fixed_point([full_waves] + rest), affine_fixed_point([thin_waves] + rest))
            best = point if best is None else np.minimum(best, point)
        return best


def _group_time(group, shape):
    return np.maximum.reduce([np.broadcast_to(a + b, shape) for a, b in group]) if len(group) > 1 else group[0][0] + group[0][1]
