"""Expert-parallel serving (issue 14 item 2): the routed experts spread over ``ep`` GPUs, the
attention in tensor parallel inside groups of ``tp`` GPUs and data parallel across them.

Layout (vLLM ``enable_expert_parallel``: vllm/model_executor/layers/fused_moe/config.py
``FusedMoEParallelConfig.make``, vLLM main at commit 002d6073, flattens the attention's tp
ranks over the data-parallel engines, ``flatten_tp_across_dp``: ``ep_size = tp_size x
dp_size``, and each GPU owns whole experts, no tensor split of them): an expert-parallel
replica is ``ep`` GPUs holding ``d = ep / tp`` attention groups of ``tp`` GPUs each, which
step together (every MoE layer's all-to-all joins them). SGLang writes the same replica as
``--tp-size ep --dp-size d --enable-dp-attention --ep-size ep`` (sglang 0.5.23 server_args).
Assumption: no pipeline parallelism with ep > 1 (DeepSeek-V3's deployment, report section
3.4, and SGLang's dp attention run none). ``ep = 1`` is today's replica of ``tp x pp`` GPUs,
with its experts split by tp.

Per GPU: the dense weights (attention, shared experts, dense layers, embeddings) / tp; the
routed experts / ep (1/tp at ep 1); the KV cache of its group's sequences only, 1/d of the
replica's (so MLA's latent cache, which every tp rank keeps whole, is divided by d: the
reason DeepSeek serves with data-parallel attention); the GEMMs, attention and elementwise
kernels of its group's tokens, 1/d of the replica's.

Expert weights read per step (decode reads only the experts its tokens are routed to: a
fused-MoE kernel launches no tile for an expert without tokens, vLLM's
``moe_align_block_size`` pads each expert's tokens to whole blocks and skips empty ones).
Assumption: uniform routing, each of the B tokens of the replica's step picking top-k of
the E routed experts (the auxiliary-loss or bias balancing of the router aims at it,
DeepSeek-V3 report section 2.1.2); then an expert is untouched with probability
``(1 - k/E)^B`` and the expected experts touched per layer are

    E x (1 - (1 - k/E)^B)

(the occupancy expectation of k-subsets drawn without replacement within a token:
P(expert not among one token's k) = 1 - k/E exactly). Real routers are skewed, so this
over-counts the bytes of a small batch a little. Each GPU reads that share of its E/ep
experts' bytes.

All-to-all per MoE layer (dispatch and combine, DeepEP's kernels as SGLang's
``--moe-a2a-backend deepep`` and vLLM's ``VLLM_ALL2ALL_BACKEND=deepep_*`` run them): each GPU
sends every token's hidden vector to each of its top-k experts, ``tokens x k x hidden``
elements, dispatched in fp8 with one fp32 scale per 128 channels (1 + 4/128 bytes per
element) when the weights are fp8 or fp4 and in bf16 otherwise, and combined in bf16
(DeepEP README: "FP8 dispatching and BF16 combining", the DeepSeek-V3 production setting;
DeepSeek-V3 report section 3.3.2, 1 x 128 activation tiles). The ``(e - n) / e`` share for
experts on other nodes (n GPUs per node) crosses the network at the per-GPU NIC bandwidth,
the ``(min(e, n) - 1) / e`` share for the other GPUs of the node crosses NVLink at the
same time, so each all-to-all takes the longer of the two (``group_bandwidth``'s links and
collective efficiency), plus the collective latency (``all_reduce_latency_s``, the same
10 us assumption as the tensor-parallel all-reduces). Against DeepEP's measured
low-latency kernels (README table: H800, CX7 400 Gb/s, 128 tokens per GPU, 7168 hidden,
top-8) this gives dispatch + combine within 5% at EP16 to EP256
(tests/regression/test_expert_parallel_serving.py).
With tp > 1 attention each tp rank dispatches 1/tp of its group's tokens (sequence-split,
as DeepSeek-V3's deployment runs attention TP with SP, report section 3.4). The combine
replaces the MoE layer's tensor-parallel all-reduce of the MLP output: a MoE layer keeps
one all-reduce (attention's) instead of two.
"""

from __future__ import annotations

import numpy as np

from vramopt.models.parameters import moe_layer_count
from vramopt.parallel_layout import ParallelLayout

ALL_TO_ALLS_PER_MOE_LAYER = 2
"""Dispatch and combine of one forward pass (serving has no backward)."""

FP8_DISPATCH_BYTES_PER_ELEMENT = 1.0 + 4.0 / 128.0
"""An fp8 element and its share of the fp32 scale of each 128 channels (DeepEP's fp8 cast)."""
BF16_BYTES_PER_ELEMENT = 2.0
FP8_DISPATCH_FORMATS = (1, 4)
"""Weight formats (costs/inference.py QUANTIZATIONS: fp8, fp4) whose experts take fp8
inputs, so the dispatch is fp8; the others dispatch bf16."""

COVERAGE_TANGENT_TOKENS = tuple(2.0 ** power for power in range(0, 18))
"""Token counts where the step's fixed point takes a tangent of the concave coverage
``1 - (1 - k/E)^B`` (costs/serving_step.py): 1 to 131,072 tokens, a factor of 2 apart; the
tangent at the fixed point's own B would be exact, the nearest grid tangent over-counts the
expert bytes by at most the gap between the curve and that tangent."""


def attention_groups(tensor_parallel, expert_parallel) -> np.ndarray:
    """Attention data-parallel groups of an expert-parallel replica: ep / tp (1 at ep 1)."""
    t = np.asarray(tensor_parallel, dtype=float)
    e = np.asarray(expert_parallel, dtype=float)
    return np.where(e > 1, np.maximum(e / t, 1.0), 1.0)


def serving_replica_layout(tensor_parallel, pipeline_parallel, expert_parallel) -> ParallelLayout:
    """The GPUs one serving replica spans as a ``ParallelLayout``: tp x pp, or the ep group of
    ep / tp attention groups (``world_size`` is the replica's GPUs)."""
    groups = attention_groups(tensor_parallel, expert_parallel)
    return ParallelLayout(tensor_parallel=tensor_parallel, pipeline_parallel=pipeline_parallel,
                          data_parallel=groups.astype(np.int64) if np.ndim(groups) else int(groups),
                          expert_parallel=expert_parallel, expert_tensor_parallel=1)


def expert_coverage(tokens, experts: int, top_k: int) -> np.ndarray:
    """Expected share of the routed experts that ``tokens`` tokens touch (module docstring)."""
    tokens = np.maximum(np.asarray(tokens, dtype=float), 0.0)
    return 1.0 - (1.0 - top_k / experts) ** tokens


def coverage_tangent(tokens0: float, experts: int, top_k: int) -> tuple[float, float]:
    """(intercept, slope) of the coverage's tangent at ``tokens0``: an upper bound of the
    concave coverage at every token count, equal to it at ``tokens0`` (inf: the constant 1)."""
    if np.isinf(tokens0):  # every expert touched: the all-experts bound
        return 1.0, 0.0
    keep = 1.0 - top_k / experts
    value = 1.0 - keep**tokens0
    slope = -np.log(keep) * keep**tokens0
    return value - slope * tokens0, slope


def all_to_all_seconds_per_token(gpu, expert_parallel, bytes_per_token) -> np.ndarray:
    """Seconds one GPU's token of ``bytes_per_token`` (every top-k copy, one all-to-all)
    spends in the all-to-all of an ep group of consecutive GPUs: the longer of the
    off-node share over the network and the on-node share over NVLink (module docstring)."""
    from vramopt.costs.communication import group_bandwidth

    e = np.asarray(expert_parallel, dtype=float)
    node = float(gpu.node.gpus_per_node)
    with np.errstate(divide="ignore", invalid="ignore"):
        local = np.minimum(e, node)
        on_node = (local - 1.0) / e * bytes_per_token / group_bandwidth(gpu, local, local)
        off_node = np.maximum(e - node, 0.0) / e * bytes_per_token / group_bandwidth(gpu, e, np.maximum(e, node + 1.0))
        return np.where(e > 1, np.maximum(on_node, off_node), 0.0)


def serving_expert_terms(model, gpu, tensor_parallel, pipeline_parallel, expert_parallel, routed_bytes_total,
                         link_latency_s: float, quantization=0) -> dict[str, np.ndarray]:
    """Per plan row: the attention groups, the routed experts' bytes one GPU holds, the bytes
    a step reads when every expert is touched (one GPU of each pipeline stage in turn), the
    all-to-all seconds per token of the replica and per step, and the tensor-parallel
    all-reduces per step."""
    t = np.asarray(tensor_parallel, dtype=float)
    p = np.asarray(pipeline_parallel, dtype=float)
    e = np.asarray(expert_parallel, dtype=float)
    groups = attention_groups(t, e)
    moe_layers = float(moe_layer_count(model.layers, model.moe)) if model.moe is not None else 0.0
    # A step runs every stage in turn: it reads the experts of all stages held by one GPU per stage.
    experts_read = np.asarray(routed_bytes_total, dtype=float) / np.where(e > 1, e, t)
    fp8 = np.isin(np.asarray(quantization), FP8_DISPATCH_FORMATS)
    dispatch = np.where(fp8, FP8_DISPATCH_BYTES_PER_ELEMENT, BF16_BYTES_PER_ELEMENT)
    copies = (model.moe.experts_per_token if model.moe else 0.0) * model.hidden_size
    # A replica token is on t GPUs of its group, each dispatching 1/t of the group's tokens.
    with np.errstate(divide="ignore", invalid="ignore"):
        per_token = moe_layers * all_to_all_seconds_per_token(gpu, e, copies * (dispatch + BF16_BYTES_PER_ELEMENT)) / (groups * t)
    all_to_all = e > 1
    all_reduces = np.where(t > 1, 2.0 * model.layers - np.where(all_to_all, moe_layers, 0.0), 0.0)
    return {
        "attention_groups": groups,
        "local_expert_bytes": experts_read / p,
        "expert_read_bytes": experts_read,
        "all_to_all_s_per_token": np.where(all_to_all, np.nan_to_num(per_token, nan=np.inf), 0.0),
        "all_to_all_latency_s": np.where(all_to_all, moe_layers * ALL_TO_ALLS_PER_MOE_LAYER * link_latency_s, 0.0),
        "all_reduces_per_step": all_reduces,
    }

