"""torchtitan's activation memory, loss buffers and selective-recomputation time
(release 0.3.0 on the package index; paths inside its ``torchtitan`` package).

Op-level selective activation checkpointing (``distributed/activation_checkpoint.py``
``SelectiveAC``, the ``activation_checkpoint: selective`` default of the Llama 3 configs)
wraps every transformer block in ``torch.utils.checkpoint`` with a policy that keeps
(``CheckpointPolicy.MUST_SAVE``) the outputs of the ops of ``_get_default_save_ops``: the
matmuls (``aten.mm``/``aten.linear``, ``compute_intensive_ops`` of torch's partitioner), the
SDPA kernels, FlexAttention, ``reduce_scatter_tensor`` and ``all_to_all_single``, ``aten.max``, ``topk`` —
"except every second mm/linear": a per-block counter of mm/linear calls recomputes the
even-numbered ones (``meta[mm_count_key] % 2 == 0``). Everything else (norms, rotary,
SiLU, the SwiGLU product, residual adds, the all-gathers of sequence parallelism) is
recomputed in the backward. The block input stays too: the checkpoint keeps its arguments
for the recomputation.

A dense Llama-family block of that release (``models/llama3/__init__.py``: ``fuse_qkv=True``;
``models/common/attention.py`` ``FusedQKVLinear``, ``GQAttention``;
``models/common/feed_forward.py`` ``w2(silu(w1(x)) * w3(x))``) calls five matmuls in this
order: wqkv (1, kept), wo (2, recomputed), w1 (3, kept), w3 (4, recomputed), w2 (5, kept).
Per layer and per micro-batch, for T tokens on a rank (s x b / cp), tp ranks t, 16-bit:

- kept: block input 2 T h (/t under sequence parallelism: the block's input is sharded on
  the sequence), wqkv output 2 T (a + 2 kv) d / t, attention output 2 T a d / t and its
  log-sum-exp 4 T a / t (fp32), w1 output 2 T f / t, w2 output 2 T h (its local partial
  sum before the reduce-scatter, not sharded), and under tensor parallelism with sequence
  parallelism the two reduce-scatter outputs after wo and w2, 2 T h / t each;
- recomputed: the wo and w3 GEMMs (2 T h a d / t and 2 T h f / t FLOPs forward), and the
  memory-bound kernels' forward.

(The Dec 2024 runs of torchtitan's benchmarks, commit 9dec370, built separate wq, wk, wv
projections: seven matmuls, wq/wv/w1/w2 kept and wk/wo/w3 recomputed: the kept set differs
by the K projection, 2 T kv d / t.) The recomputation of a block rebuilds all its saved
tensors at once: one layer's full activations less the kept part, on top of the kept sets.

Loss (``components/loss.py`` ``cross_entropy_loss``; ``trainer.py`` ``del pred`` before
``loss.backward()``; the Dec 2024 runs' ``train.py`` at 9dec370 likewise, with its loss never
compiled): without tensor parallelism torch's cross-entropy runs on ``pred.float()``; its
backward holds three fp32 tensors of s x b x V at once (the saved log-softmax output,
nll_loss_backward's gradient, _log_softmax_backward_data's gradient): 12 B per logit. With
tensor parallelism ``_LossParallelCrossEntropy`` (and torch's ``loss_parallel()``,
``distributed/tensor/parallel/loss.py`` ``_nll_loss_and_log_softmax_backward``, which the Dec
2024 runs used) peaks in its backward at 16 B per local logit (V / t): the saved fp32
log-probabilities, the zeros-and-scatter gradient, ``exp(log_probs)`` and their sum, before
the product with the upstream gradient replaces the last two (its forward holds 14: the bf16
logits, their fp32 copy, the shifted copy and the log-probabilities).

torchtitan prints the caching allocator's ``reserved_bytes.all.peak`` (``DeviceMemoryMonitor``
in ``components/metrics.py``; ``torchtitan/metrics.py`` at 9dec370), with
``expandable_segments:True`` (its run script): freed memory stays reserved, and a free range
is reused best-fit. The bf16 logits (2 B per local logit) and the fp32 copy are freed side by
side after the forward; the backward's first gradient of 4 B per logit takes the start of
that range and leaves the bf16 part free but too small for the next 4 B tensor, which is
mapped past the end: 2 B per local logit stay reserved beside the backward's peak
(a derivation from the allocator's best-fit rule, assuming no other free range of that
size; tests/regression/test_torchtitan_loss_peak.py replays the loss's own allocations
through a model of that rule). A compiled loss (torchtitan's ``compile.components`` with "loss", the June 2025 H200
runs) saves only the bf16 logits and writes a bf16 gradient: 4 B per logit, nothing freed
beside it (torch 2.13 Inductor's generated code for ``cross_entropy(pred.float())``: per-row
fp32 statistics only). The output projection keeps its input, all-gathered to the full
sequence under sequence parallelism (the ``lm_head``'s input is replicated over the tp
group: ``models/common/decoder_sharding.py``; ``"output": ColwiseParallel(input_layouts=
Shard(1))`` at 9dec370): 2 T h, and the final norm its input, 2 T h (/t under sequence
parallelism).

Release 0.3.0 wraps that loss in ``ChunkedLossWrapper`` (``components/loss.py``; the ``loss`` of
the Llama 3 and DeepSeek-V3 configs, ``num_chunks`` 8): the output projection and the loss run
over 8 sequence chunks, each chunk's backward inside the forward, so one chunk's buffers are
live at a time, its bf16 logits beside them (the 2 B per logit that the unchunked loss leaves
reserved); beside them the fp32 gradient accumulator of the projection's input, the chunks'
contiguous copies (``chunked_loss_extra_bytes``), and under FSDP the projection's unsharded
gradient summed over the chunks (``chunked_loss_head_gradient_bytes``, counted with the
gradients: it reads the ZeRO stage); tests/regression/test_torchtitan_chunked_loss.py measures
the wrapper. The published runs predate it and keep one chunk (``TrainingCase.loss_chunks``).

Full checkpointing (``FullAC``) keeps each block's input, 2 T h (/t under sequence
parallelism). Models with experts or latent attention (other block layouts, the router's
forced recomputation) keep vramopt's generic activation count.
"""

from __future__ import annotations

import numpy as np

from vramopt.costs.activations import activation_shape, layer_bytes
from vramopt.costs.coefficients import coefficient
from vramopt.costs.columns import CHECKPOINT_EVERY, CHECKPOINT_SELECTIVE, PlanColumns
from vramopt.costs.gemm import gemm_seconds
from vramopt.costs.operators import CROSS_ENTROPY_BYTES_PER_LOGIT, elementwise_seconds, linear_peak
from vramopt.costs.pipeline_stages import stage_activation_loads, timed_stage_layers
from vramopt.costs.precision import PRECISION_ACTIVATION_SCALE
from vramopt.parallel_layout import ParallelLayout
from vramopt.types import GpuSpec, ModelSpec

HALF_BYTES = 2.0
ATTENTION_AUX_BYTES = 8.0
"""Per query and head, fp32: the log-sum-exp and the row maxima that the FlexAttention
operator returns beside its output (torch _higher_order_ops/flex_attention.py: ``out,
logsumexp, max_scores``); the Llama 3 configs of 0.3.0 build FlexAttention
(``attn_backend="flex"``). SDPA's flash kernel returns the log-sum-exp only (4 B)."""
LOSS_BYTES_PER_LOGIT = 12.0
"""Plain cross-entropy on fp32 logits: three fp32 s x b x V tensors in its backward."""
LOSS_PARALLEL_BYTES_PER_LOGIT = 16.0
"""_LossParallelCrossEntropy.backward (and torch's loss_parallel backward): saved fp32
log-probabilities, the one-hot gradient, exp(log_probs) and their sum."""
FREED_LOGITS_BYTES_PER_LOGIT = 2.0
"""The bf16 logits' range, freed before the backward and left reserved beside its peak."""
COMPILED_LOSS_BYTES_PER_LOGIT = 4.0
"""A compiled loss: the saved bf16 logits and their bf16 gradient."""
GRADIENT_ACCUMULATOR_BYTES = 4.0
"""``ChunkedLossWrapper``'s ``GradAccumulator(..., dtype=torch.float32)`` (components/loss.py)."""


def applies(model: ModelSpec) -> bool:
    """The per-op rule models torchtitan's dense Llama-family block (no experts, no MLA)."""
    return model.moe is None and model.mla is None


def block_matmuls(model: ModelSpec) -> list[tuple[str, float, float, bool]]:
    """The block's matmuls in call order: (name, output width n, input width k, row-parallel)."""
    h, d = float(model.hidden_size), float(model.head_dim)
    attention = [("wqkv", (model.heads + 2 * model.kv_heads) * d, h, False), ("wo", h, model.heads * d, True)]
    f = float(model.ffn_hidden_size)
    if model.gated_mlp:
        return attention + [("w1", f, h, False), ("w3", f, h, False), ("w2", h, f, True)]
    return attention + [("w1", f, h, False), ("w2", h, f, True)]


def kept_matmuls(model: ModelSpec) -> list[tuple[str, float, float, bool]]:
    """The odd-numbered ones (1st, 3rd, ...): SelectiveAC keeps their outputs."""
    return block_matmuls(model)[0::2]


def recomputed_matmuls(model: ModelSpec) -> list[tuple[str, float, float, bool]]:
    """The even-numbered ones: SelectiveAC recomputes them in the backward."""
    return block_matmuls(model)[1::2]


def selective_kept_bytes_per_layer(model: ModelSpec, tokens, tensor_parallel, sequence_parallel) -> np.ndarray:
    """Bytes SelectiveAC keeps for one block and one micro-batch of ``tokens`` tokens per rank."""
    tokens = np.asarray(tokens, dtype=float)
    t = np.asarray(tensor_parallel, dtype=float)
    sp = np.asarray(sequence_parallel, dtype=bool)
    h = float(model.hidden_size)
    kept = np.where(sp, h / t, h)  # the checkpoint's input
    for _, n, _, row_parallel in kept_matmuls(model):
        kept = kept + (n if row_parallel else n / t)  # a row-parallel output is the unsharded partial sum
    kept = kept + model.heads * model.head_dim / t  # SDPA output
    row_parallel_count = sum(1 for _, _, _, row in block_matmuls(model) if row)
    kept = kept + np.where(sp & (t > 1), row_parallel_count * h / t, 0.0)  # reduce_scatter_tensor outputs
    return tokens * (HALF_BYTES * kept + ATTENTION_AUX_BYTES * model.heads / t)


def block_input_bytes(model: ModelSpec, tokens, tensor_parallel, sequence_parallel) -> np.ndarray:
    """FullAC keeps the block input: 2 T h, sharded on the sequence under sequence parallelism."""
    t = np.asarray(tensor_parallel, dtype=float)
    share = np.where(np.asarray(sequence_parallel, dtype=bool), 1.0 / t, 1.0)
    return HALF_BYTES * np.asarray(tokens, dtype=float) * model.hidden_size * share


def torchtitan_activation_terms(model: ModelSpec, columns: PlanColumns, rank_tokens, in_flight: np.ndarray,
                                micro_batches: np.ndarray, generic: dict[str, np.ndarray],
                                compiled_loss: bool = False, loss_chunks: int = 1) -> dict[str, np.ndarray]:
    """``activations_bytes`` and ``logits_bytes`` per GPU as torchtitan keeps them (the generic
    activations where the per-op rule does not apply: no checkpointing, every:k > 1, MoE/MLA),
    with the output projection's kept input; ``logits_bytes`` is the loss's reserved peak."""
    seq_len = np.asarray(rank_tokens, dtype=float)  # tokens of one sequence on this cp rank
    tokens = seq_len * columns.micro_batch
    t, sp = columns.tensor_parallel, columns.sequence_parallel
    full_layer = layer_bytes(activation_shape(model), seq_len, columns.micro_batch, t, sp, False)
    selective = (columns.checkpoint_kind == CHECKPOINT_SELECTIVE) & applies(model)
    full = (columns.checkpoint_kind == CHECKPOINT_EVERY) & (columns.checkpoint_every == 1)
    kept_selective = selective_kept_bytes_per_layer(model, tokens, t, sp)
    kept_full = block_input_bytes(model, tokens, t, sp)
    per_layer = np.where(selective, kept_selective, kept_full)
    stored_most = 0.0
    for layers_per_stage, stage_in_flight in stage_activation_loads(model, columns, in_flight, micro_batches):
        stored_most = np.maximum(stored_most, stage_in_flight * layers_per_stage * per_layer)
    # The block being recomputed holds its full saved set; its kept part is already counted.
    working = np.where(selective, np.maximum(full_layer - kept_selective, 0.0), full_layer)
    scale = PRECISION_ACTIVATION_SCALE[columns.precision]
    activations = np.where(selective | full, (stored_most + working) * scale, generic["activations_bytes"])
    # The output projection's and final norm's inputs are kept whatever the blocks' checkpointing.
    activations = activations + head_input_bytes(model, tokens, t, sp) * scale
    logits = loss_bytes_per_logit(t, compiled_loss) * tokens / loss_chunks * model.vocab_size / t
    if loss_chunks > 1:
        logits = logits + chunked_loss_extra_bytes(model, columns, tokens)
    return {"activations_bytes": activations, "logits_bytes": logits}


def chunked_loss_extra_bytes(model: ModelSpec, columns: PlanColumns, tokens) -> np.ndarray:
    """What ``ChunkedLossWrapper`` (components/loss.py) holds beside one chunk's loss buffers:
    the fp32 gradient of the whole output-projection input (its ``GradAccumulator``, the full
    hidden width on every tp rank: the chunks enter the projection replicated), and with more
    than one sequence per micro-batch the chunks' contiguous copies, made all at once before the
    loop (``c.contiguous()`` of a split along the sequence)."""
    tokens = np.asarray(tokens, dtype=float)
    accumulator = GRADIENT_ACCUMULATOR_BYTES * tokens * model.hidden_size
    copies = np.where(columns.micro_batch > 1, HALF_BYTES * tokens * model.hidden_size, 0.0)
    return accumulator + copies


def chunked_loss_head_gradient_bytes(model: ModelSpec, columns: PlanColumns) -> np.ndarray:
    """Under FSDP (ZeRO 2-3) the output projection's unsharded bf16 gradient, summed over the
    chunks (``set_requires_gradient_sync(False)`` until the last), beside the sharded gradients
    counted elsewhere; without FSDP that sum is the gradient already counted, and under pipeline
    parallelism the stage's unsharded fp32 gradient accumulation holds it (frameworks/memory.py).
    A model-state term (it reads the ZeRO stage), kept with the gradients."""
    unsharded = (columns.zero_stage >= 2) & (columns.pipeline_parallel == 1)
    return np.where(unsharded, HALF_BYTES * model.vocab_size * model.hidden_size / columns.tensor_parallel, 0.0)


def loss_bytes_per_logit(tensor_parallel, compiled_loss: bool = False) -> np.ndarray:
    """Reserved bytes per local logit at the loss's peak (eager: its buffers and the freed
    bf16 logits' range; compiled: the bf16 logits and their gradient)."""
    eager = np.where(np.asarray(tensor_parallel) > 1, LOSS_PARALLEL_BYTES_PER_LOGIT, LOSS_BYTES_PER_LOGIT)
    return np.full_like(eager, COMPILED_LOSS_BYTES_PER_LOGIT) if compiled_loss else eager + FREED_LOGITS_BYTES_PER_LOGIT


def head_input_bytes(model: ModelSpec, tokens, tensor_parallel, sequence_parallel) -> np.ndarray:
    """The output projection's saved input (the full sequence, replicated over tp) and the
    final norm's saved input (sequence-sharded under sequence parallelism), 16-bit."""
    tokens = np.asarray(tokens, dtype=float)
    return HALF_BYTES * tokens * model.hidden_size + block_input_bytes(model, tokens, tensor_parallel, sequence_parallel)


def selective_recompute_flops_per_layer(model: ModelSpec, tokens, tensor_parallel) -> np.ndarray:
    """Forward FLOPs of the matmuls SelectiveAC recomputes, per layer and micro-batch on a rank."""
    tokens = np.asarray(tokens, dtype=float)
    t = np.asarray(tensor_parallel, dtype=float)
    return sum(2.0 * tokens * n * k / t for _, n, k, _ in recomputed_matmuls(model))


def selective_recompute_seconds(model: ModelSpec, gpu: GpuSpec, columns: PlanColumns, seq_len: int) -> np.ndarray:
    """Seconds one micro-batch spends recomputing under SelectiveAC on the last stage: the
    recomputed GEMMs at their shapes' efficiency and the layers' memory-bound forward
    kernels (vramopt's own selective recomputes nothing under flash attention, which
    torchtitan always uses). Zero where the rule does not apply."""
    tokens = ParallelLayout.from_columns(columns).tokens_per_rank(seq_len) * columns.micro_batch
    t = columns.tensor_parallel.astype(float)
    peak = linear_peak(gpu, columns.precision)
    gemms = 0.0
    for _, n, k, row_parallel in recomputed_matmuls(model):
        n_rank, k_rank = (n, k / t) if row_parallel else (n / t, k)
        gemms = gemms + gemm_seconds(gpu, peak, tokens, n_rank, k_rank)
    layers = timed_stage_layers(model, columns, "last")
    elementwise_forward, _ = elementwise_seconds(model, gpu, columns, tokens)
    # elementwise_seconds adds half the cross-entropy to the forward; the loss is not recomputed.
    loss_forward = CROSS_ENTROPY_BYTES_PER_LOGIT * model.vocab_size / t / 2.0 * tokens * PRECISION_ACTIVATION_SCALE[columns.precision] \
        / (gpu.hbm_bandwidth_bytes_per_s * coefficient("hbm_bandwidth_efficiency"))
    extra = layers * gemms + np.maximum(elementwise_forward - loss_forward, 0.0)
    selective = (columns.checkpoint_kind == CHECKPOINT_SELECTIVE) & applies(model)
    return np.where(selective, extra, 0.0)

