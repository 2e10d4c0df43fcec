"""The benchmark's runs: shapes, and a fractional-factorial grid around a baseline per shape.

Each shape has a baseline training point (bf16 with fp32 master weights, no activation
checkpointing, flash attention, sequence 2,048, the shape's base micro-batch). Around it
one technique at a time is varied: precision, each checkpointing policy, the attention
backend, the sequence length, the micro-batch. A few combined points follow, then the
inference points (prefill into a preallocated bf16 KV cache).

The math backend materializes the (batch, heads, seq, seq) scores, so its points use the
shape's ``math_micro_batch``; that micro-batch is also in the shape's micro-batch sweep, so
every math point has a flash twin that differs from it in the backend alone.

Runs are ordered by tier, then by shape: if the time budget runs out, the points lost are
the seq/micro-batch sweeps and combined points of the last shapes, never a baseline or a
single-technique point (tier 0).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from decoder_model import ModelShape, closed_form_parameters, parse_checkpointing

# Assumptions for the run-time estimate only (printed before the grid runs and used to
# size the grid; measurements never depend on them). H200 dense peaks (NVIDIA H200
# datasheet): bf16 989 TFLOP/s, TF32 494 TFLOP/s, HBM3e 4.8 TB/s. Eager PyTorch on models
# this small reaches far less; the estimate assumes 15% of peak for matmuls, and 40% of the
# bandwidth for the memory-bound optimizer step, plus a fixed cost per run for building
# the model, the two probes of the attention kernels, gc and empty_cache.
ESTIMATE_BF16_FLOP_PER_S = 150e12  # assumption: 15% of the 989 TFLOP/s bf16 dense peak
ESTIMATE_TF32_FLOP_PER_S = 75e12  # assumption: 15% of the 494 TFLOP/s TF32 dense peak
ESTIMATE_BYTES_PER_S = 2.0e12  # assumption: 40% of 4.8 TB/s for the AdamW step
ESTIMATE_FIXED_S_PER_RUN = 2.0  # assumption: model build, probes, gc, empty_cache
ESTIMATE_OPTIMIZER_BYTES_PER_PARAM = 40  # read w, g, m, v (+master), write w, m, v (+copy back)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSpec:
    """One measured run."""

    run_id: str
    kind: Literal["train", "infer"]
    shape: ModelShape
    seq_len: int
    """Training: tokens per sequence. Inference: prompt tokens prefilled into the cache."""
    micro_batch: int
    """Training: sequences per step. Inference: sequences (cache slots) per forward."""
    precision: Literal["fp32", "bf16"]
    checkpointing: str
    attention_backend: Literal["flash", "math"]
    """Requested backend; the one that ran is measured (flash has no fp32 kernel on CUDA)."""
    kv_cache_len: int = 0
    tier: int = 0

    def __post_init__(self) -> None:
        parse_checkpointing(self.checkpointing)
        if self.kind == "infer" and self.kv_cache_len < self.seq_len:
            raise ValueError(f"{self.run_id}: kv_cache_len must hold the prompt of {self.seq_len} tokens")


@dataclass(frozen=True, kw_only=True, slots=True)
class ShapePlan:
    """The points measured for one shape."""

    shape: ModelShape
    base_seq_len: int
    base_micro_batch: int
    seq_lens: tuple[int, ...]
    """Sequence lengths measured besides the base one (at the base micro-batch)."""
    micro_batches: tuple[int, ...]
    """Micro-batches measured besides the base one (at the base sequence length)."""
    checkpointing: tuple[str, ...]
    math_micro_batch: int
    combined: tuple[dict[str, object], ...] = ()
    """Extra training points, each a set of overrides of the baseline."""
    inference: tuple[tuple[int, int, int, str], ...] = ()
    """(prompt tokens, KV cache length, batch, attention backend) per inference point."""

    def __post_init__(self) -> None:
        if self.math_micro_batch != self.base_micro_batch and self.math_micro_batch not in self.micro_batches:
            raise ValueError(f"{self.shape.name}: math_micro_batch needs a flash twin in micro_batches")


def _train(plan: ShapePlan, tier: int, **overrides: object) -> RunSpec:
    fields: dict[str, object] = {
        "run_id": "",
        "kind": "train",
        "shape": plan.shape,
        "seq_len": plan.base_seq_len,
        "micro_batch": plan.base_micro_batch,
        "precision": "bf16",
        "checkpointing": "none",
        "attention_backend": "flash",
        "tier": tier,
    }
    fields.update(overrides)
    return RunSpec(**fields)  # type: ignore[arg-type]


def plan_runs(plan: ShapePlan) -> list[RunSpec]:
    """Baseline, then one technique at a time, then the combined and inference points."""
    runs = [_train(plan, 0), _train(plan, 0, precision="fp32")]
    runs += [_train(plan, 0, checkpointing=policy) for policy in plan.checkpointing]
    runs += [
        _train(plan, 0, attention_backend="math", micro_batch=plan.math_micro_batch),
        _train(plan, 0, attention_backend="math", micro_batch=plan.math_micro_batch, checkpointing="selective"),
    ]
    runs += [_train(plan, 1, seq_len=seq_len) for seq_len in plan.seq_lens]
    runs += [_train(plan, 1, micro_batch=micro_batch) for micro_batch in plan.micro_batches]
    runs += [_train(plan, 2, **overrides) for overrides in plan.combined]
    runs += [
        RunSpec(
            run_id="",
            kind="infer",
            shape=plan.shape,
            seq_len=prompt,
            micro_batch=batch,
            precision="bf16",
            checkpointing="none",
            attention_backend=backend,  # type: ignore[arg-type]
            kv_cache_len=cache_len,
            tier=1,
        )
        for prompt, cache_len, batch, backend in plan.inference
    ]
    return runs


def _run_id(index: int, run: RunSpec) -> str:
    policy = run.checkpointing.replace(":", "")
    run_id = f"{index:03d}-{run.shape.name}-{run.kind}-{run.precision}-{policy}-{run.attention_backend}"
    run_id += f"-s{run.seq_len}-b{run.micro_batch}"
    return run_id + (f"-kv{run.kv_cache_len}" if run.kind == "infer" else "")


def build_grid(plans: tuple[ShapePlan, ...], only: tuple[str, ...] = ()) -> list[RunSpec]:
    """All runs of the plans (or of the shapes named in ``only``), ordered by tier, numbered."""
    known = {plan.shape.name for plan in plans}
    unknown = [name for name in only if name not in known]
    if unknown:
        raise ValueError(f"unknown shape(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    runs: list[RunSpec] = []
    for plan in plans:
        if not only or plan.shape.name in only:
            runs += plan_runs(plan)
    shape_order = {plan.shape.name: position for position, plan in enumerate(plans)}
    runs.sort(key=lambda run: (run.tier, shape_order[run.shape.name]))  # stable: plan order kept
    return [replace(run, run_id=_run_id(index, run)) for index, run in enumerate(runs, start=1)]


def estimated_run_s(run: RunSpec) -> float:
    """A conservative H200 wall time for one run (two steps or two forwards), see above."""
    shape = run.shape
    tokens = run.seq_len * run.micro_batch
    active = closed_form_parameters(shape)["active"]
    # Attention: QK^T and AV, 4*s*heads*head_dim FLOPs per token per layer forward,
    # counted without the causal half (conservative).
    attention_forward = 4 * shape.layers * shape.heads * shape.head_dim * run.seq_len * tokens
    if run.kind == "infer":
        return ESTIMATE_FIXED_S_PER_RUN + 2 * (2 * active * tokens + attention_forward) / ESTIMATE_BF16_FLOP_PER_S
    forward = 2 * active * tokens + attention_forward
    flops = 3 * forward
    layers_per_checkpoint, selective = parse_checkpointing(run.checkpointing)
    if layers_per_checkpoint:
        flops += forward
    elif selective:
        flops += attention_forward
    rate = ESTIMATE_BF16_FLOP_PER_S if run.precision == "bf16" else ESTIMATE_TF32_FLOP_PER_S
    optimizer_s = closed_form_parameters(shape)["total"] * ESTIMATE_OPTIMIZER_BYTES_PER_PARAM / ESTIMATE_BYTES_PER_S
    return ESTIMATE_FIXED_S_PER_RUN + 2 * (flops / rate + optimizer_s)


# ----------------------------------------------------------------------------- the grid

# Dense shapes follow the Llama layout; widths are multiples of 128 and head_dim a multiple
# of 8 so that the flash kernels accept every shape.
LLAMA_125M = ModelShape(
    name="llama-125m", layers=12, hidden_size=768, heads=12, kv_heads=12, head_dim=64,
    ffn_hidden_size=2048, vocab_size=32000,
)  # fmt: skip
LLAMA_350M = ModelShape(
    name="llama-350m", layers=24, hidden_size=1024, heads=16, kv_heads=16, head_dim=64,
    ffn_hidden_size=2816, vocab_size=32000,
)  # fmt: skip
LLAMA_1_3B = ModelShape(
    name="llama-1.3b", layers=24, hidden_size=2048, heads=16, kv_heads=16, head_dim=128,
    ffn_hidden_size=5504, vocab_size=32000,
)  # fmt: skip
LLAMA_3B = ModelShape(
    name="llama-3b", layers=28, hidden_size=3072, heads=24, kv_heads=24, head_dim=128,
    ffn_hidden_size=8192, vocab_size=32000,
)  # fmt: skip
# Llama-3.2-1B's dimensions (GQA 32/8, 128,256-token vocabulary) with an untied head.
LLAMA_1_5B_GQA = ModelShape(
    name="llama-1.5b-gqa", layers=16, hidden_size=2048, heads=32, kv_heads=8, head_dim=64,
    ffn_hidden_size=8192, vocab_size=128256,
)  # fmt: skip
# A small Mixtral: 8 experts, top-2, GQA 16/4.
MIXTRAL_0_9B = ModelShape(
    name="mixtral-0.9b-e8k2", layers=12, hidden_size=1024, heads=16, kv_heads=4, head_dim=64,
    ffn_hidden_size=2816, vocab_size=32000, experts=8, experts_per_token=2,
)  # fmt: skip

ALL_CHECKPOINTING = ("every:1", "every:2", "every:4", "selective")
INFERENCE_POINTS = (
    (2048, 4096, 1, "flash"),
    (2048, 4096, 8, "flash"),
    (512, 16384, 8, "flash"),  # a short prompt in a long contiguous cache
    (4096, 4096, 1, "math"),
)

GPU_PLANS = (
    ShapePlan(
        shape=LLAMA_125M, base_seq_len=2048, base_micro_batch=8, seq_lens=(512, 1024, 4096),
        micro_batches=(1, 2, 4), checkpointing=ALL_CHECKPOINTING, math_micro_batch=2,
        combined=(
            {"precision": "fp32", "checkpointing": "every:1"},
            {"seq_len": 4096, "micro_batch": 2, "attention_backend": "math"},
            {"seq_len": 4096, "checkpointing": "every:1"},
        ),
        inference=INFERENCE_POINTS,
    ),
    ShapePlan(
        shape=LLAMA_350M, base_seq_len=2048, base_micro_batch=8, seq_lens=(512, 1024, 4096),
        micro_batches=(1, 2, 4), checkpointing=ALL_CHECKPOINTING, math_micro_batch=2,
        combined=(
            {"precision": "fp32", "checkpointing": "every:1"},
            # Micro-batch 1: at 2 the saved fp32 scores alone approach 100 GiB.
            {"seq_len": 4096, "micro_batch": 1, "attention_backend": "math"},
        ),
        inference=INFERENCE_POINTS,
    ),
    ShapePlan(
        shape=LLAMA_1_3B, base_seq_len=2048, base_micro_batch=4, seq_lens=(512, 1024, 4096),
        micro_batches=(1, 2, 8), checkpointing=ALL_CHECKPOINTING, math_micro_batch=1,
        combined=({"precision": "fp32", "checkpointing": "every:1"}, {"seq_len": 4096, "checkpointing": "every:1"}),
        inference=INFERENCE_POINTS,
    ),
    ShapePlan(
        shape=LLAMA_3B, base_seq_len=2048, base_micro_batch=2, seq_lens=(512, 4096),
        micro_batches=(1, 4), checkpointing=ALL_CHECKPOINTING, math_micro_batch=1,
        combined=({"precision": "fp32", "checkpointing": "every:1"}, {"seq_len": 4096, "checkpointing": "every:1"}),
        inference=INFERENCE_POINTS[:3],
    ),
    ShapePlan(
        shape=LLAMA_1_5B_GQA, base_seq_len=2048, base_micro_batch=4, seq_lens=(512, 4096),
        micro_batches=(1, 8), checkpointing=("every:1", "every:4", "selective"), math_micro_batch=1,
        combined=({"precision": "fp32", "checkpointing": "every:1"},),
        inference=INFERENCE_POINTS[:3],
    ),
    ShapePlan(
        shape=MIXTRAL_0_9B, base_seq_len=2048, base_micro_batch=4, seq_lens=(512, 4096),
        micro_batches=(1, 8), checkpointing=("every:1", "every:4", "selective"), math_micro_batch=1,
        combined=({"precision": "fp32", "checkpointing": "every:1"},),
        inference=INFERENCE_POINTS[:3],
    ),
)

# The dry run: the same plan structure on tiny shapes, every code path, seconds on a CPU.
TINY_DENSE = ModelShape(
    name="tiny-dense", layers=4, hidden_size=64, heads=4, kv_heads=2, head_dim=16,
    ffn_hidden_size=160, vocab_size=256, max_position_embeddings=256,
)  # fmt: skip
TINY_MOE = ModelShape(
    name="tiny-moe", layers=2, hidden_size=64, heads=4, kv_heads=4, head_dim=16,
    ffn_hidden_size=96, vocab_size=256, experts=4, experts_per_token=2, max_position_embeddings=256,
)  # fmt: skip

DRY_RUN_PLANS = (
    ShapePlan(
        shape=TINY_DENSE, base_seq_len=32, base_micro_batch=2, seq_lens=(64,), micro_batches=(1,),
        checkpointing=("every:1", "every:2", "selective"), math_micro_batch=1,
        combined=({"precision": "fp32", "checkpointing": "every:1"},),
        inference=((32, 64, 2, "flash"), (32, 32, 1, "math")),
    ),
    ShapePlan(
        shape=TINY_MOE, base_seq_len=32, base_micro_batch=2, seq_lens=(), micro_batches=(), checkpointing=("every:1",),
        math_micro_batch=2, inference=((16, 48, 2, "flash"),),
    ),
)
