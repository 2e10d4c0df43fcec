"""Issue 15 item 1 (each framework's memory accounting from its code): torchtitan 0.3.0 computes
the output projection and the loss in sequence chunks (``components/loss.py``
``ChunkedLossWrapper``, ``num_chunks`` 8, the ``loss`` of its Llama 3 and DeepSeek-V3 configs),
each chunk's backward inside the forward, so ``--framework torchtitan`` keeps one chunk's
loss buffers, not the whole micro-batch's (vramopt/frameworks/torchtitan_activations.py).
The published torchtitan runs predate the wrapper and keep ``loss_chunks`` 1
(tests/regression/test_torchtitan_loss_peak.py).

Expected figures by hand: Llama 3.1 8B h 4,096, V 128,256."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vramopt.costs.training import evaluate_training
from vramopt.estimate import training_case
from vramopt.frameworks import load_framework
from vramopt.plan import check_plan
from vramopt.types import TrainingPlan, TrainingWorkload

H, V = 4096, 128256


def _bytes(framework="torchtitan", micro_batch=2, zero_stage=3, term="logits_bytes", **replace):
    """The eager loss unless ``compiled_loss`` is given (the export compiles it)."""
    plan = TrainingPlan(gpu="h100", gpus=8, zero_stage=zero_stage, micro_batch=micro_batch, checkpointing="selective",
                        grad_comm_precision="fp32")
    workload = TrainingWorkload(model="llama-3.1-8b", seq_len=8192, global_batch=8 * micro_batch)
    case = dataclasses.replace(training_case(workload, "h100", framework), **{"compiled_loss": False, **replace})
    return float(np.asarray(evaluate_training(case, check_plan(case, plan))[term]).reshape(-1)[0])


def _logits_bytes(**arguments):
    return _bytes(term="logits_bytes", **arguments)


def test_torchtitan_framework_chunks_the_loss_in_eight():
    """Issue 15 item 1: the user's ``--framework torchtitan`` case takes 0.3.0's chunk count and the
    compiled loss its export asks for; the other frameworks' losses see the whole micro-batch."""
    workload = TrainingWorkload(model="llama-3.1-8b")
    case = training_case(workload, "h100", "torchtitan")
    assert (case.loss_chunks, case.compiled_loss) == (8, True)
    assert {(training_case(workload, "h100", name).loss_chunks, training_case(workload, "h100", name).compiled_loss)
            for name in ("generic", "megatron", "deepspeed")} == {(1, False)}


def test_chunked_loss_bytes_of_the_8b_plan_by_hand():
    """Issue 15 item 1. 2 x 8,192 tokens, no tp, FSDP (ZeRO-3): one chunk of 2,048 tokens' logits at
    14 B each (the eager loss's three fp32 buffers and the bf16 logits, alive through the chunk's
    backward) = 14 x 2,048 x 128,256 = 3,677,356,032; the fp32 gradient accumulator 4 x 16,384 x
    4,096 = 268,435,456; the chunks' contiguous copies (two sequences) 2 x 16,384 x 4,096 =
    134,217,728: 4,080,009,216 B of loss buffers, against 29,418,848,256 unchunked; and with the
    gradients (a model-state term: it reads the ZeRO stage) the output projection's unsharded
    bf16 gradient 2 x 128,256 x 4,096 = 1,050,673,152 B, which ZeRO 0-1 counts already."""
    assert _logits_bytes() == 4_080_009_216
    assert _logits_bytes(micro_batch=1) == 14 * 1024 * V + 4 * 8192 * H
    assert _logits_bytes(loss_chunks=1) == 29_418_848_256
    # compiled (what --export torchtitan runs): 4 B per chunk logit, the bf16 logits and their gradient
    assert _logits_bytes(compiled_loss=True) == 4 * 2048 * V + 4 * 16384 * H + 2 * 16384 * H
    gradients = {stage: _bytes(zero_stage=stage, term="gradients_bytes") - _bytes(zero_stage=stage, term="gradients_bytes", loss_chunks=1)
                 for stage in (1, 2, 3)}
    assert gradients == {1: 0.0, 2: 1_050_673_152, 3: 1_050_673_152}


def _measured_peak(num_chunks, batch, seq, vocab=8192, hidden=64):
    """torchtitan 0.3.0's ChunkedLossWrapper over an output projection (a plain leaf weight: the
    MemTracker refuses a module called once per chunk), its peak live bytes less the weight and
    the inputs."""
    torch = pytest.importorskip("torch")
    mem_tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    loss_module = pytest.importorskip("torchtitan.components.loss")
    config = loss_module.ChunkedLossWrapper.Config(num_chunks=num_chunks,
                                                   loss_fn=loss_module.CrossEntropyLoss.Config(global_vocab_size=vocab))
    loss_fn = config.build()
    weight = torch.randn(vocab, hidden, dtype=torch.bfloat16, requires_grad=True)
    loss_fn.set_lm_head(lambda chunk: torch.nn.functional.linear(chunk, weight))
    states = torch.randn(batch, seq, hidden, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (batch, seq))
    tracker = mem_tracker.MemTracker()
    tracker.track_external(states, weight)
    with tracker:
        loss, _ = loss_fn(states, labels, torch.tensor(float(batch * seq)))
        loss.backward()
    peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
    total = {getattr(kind, "value", kind): value for kind, value in peak.items()}["Total"]
    return total - weight.numel() * 2 - states.numel() * 2 - labels.numel() * 8


@pytest.mark.parametrize("batch, seq", [(1, 256), (2, 128)])
def test_chunked_loss_peak_measured_on_torchtitan_wrapper(batch, seq):
    """Issue 15 item 1: the measured peak of 0.3.0's wrapper with 8 chunks is one chunk's 14 B per
    logit, the 4 B fp32 accumulator per hidden value, the contiguous copies with two sequences,
    and the projection's summed gradient (a plain leaf here, so live; under FSDP it is the
    unsharded sum vramopt adds) — the terms of chunked_loss_extra_bytes."""
    from vramopt.frameworks import torchtitan_activations as rule

    vocab, hidden, chunks = 8192, 64, 8
    tokens = batch * seq
    expected = (rule.LOSS_BYTES_PER_LOGIT + rule.FREED_LOGITS_BYTES_PER_LOGIT) * tokens / chunks * vocab \
        + rule.GRADIENT_ACCUMULATOR_BYTES * tokens * hidden + (2 * tokens * hidden if batch > 1 else 0) + 2 * vocab * hidden
    assert _measured_peak(chunks, batch, seq, vocab, hidden) == pytest.approx(expected, abs=8192)  # scalars, the loss's statistics
    assert dict(load_framework("torchtitan").case_options)["loss_chunks"] == chunks


def test_framework_chunk_count_is_the_configs():
    """Issue 15 item 1: the chunk count vramopt assumes is what torchtitan 0.3.0's Llama 3 configs build."""
    pytest.importorskip("torch")
    registry = pytest.importorskip("torchtitan.models.llama3.config_registry")
    for config in (registry.llama3_8b(), registry.llama3_70b()):
        assert config.loss.num_chunks == dict(load_framework("torchtitan").case_options)["loss_chunks"]
