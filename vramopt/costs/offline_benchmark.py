"""A finite offline benchmark run: every request of a list queued at once, served step by step
by an engine's scheduler, each step timed by the request model's step (``costs/serving_step.py``).

What an offline benchmark measures (SGLang's ``bench_serving`` and vLLM's ``benchmark_serving``
at request rate inf): the output tokens of N requests over the wall time from the first request
to the last token. That is not the steady-state capacity of ``costs/request_serving.py``:

- the run ends with a drain: once the queue is empty the batch shrinks to the longest
  remaining requests, and its steps approach the weight-streaming floor with few tokens
  each (heavy-tailed output lengths, as ShareGPT's, make the drain long);
- each engine schedules prefill its own way: vLLM 0.6 without chunked prefill and SGLang 0.3
  run prompt-only steps that stall the decodes (prefill first), vLLM's multi-step
  scheduling keeps a finished sequence's slot to the end of its group of steps, and SGLang
  admits requests against a reservation of their future tokens (``new_token_ratio``) and
  retracts some when the pool runs out, to prefill them again later.

``simulate_offline`` replays the requests in order (first come, first served) through the
policy of an ``EnginePolicy`` and returns the run's output tokens and duration. It is used by
the validation against published offline runs (``vramopt/validation/serving.py``); the solver
keeps the steady state (its tables need a closed form).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True, slots=True)
class EnginePolicy:
    """An engine's scheduling defaults, each with its source."""

    name: str
    chunked_prefill: bool
    """Prompt chunks ride in the decode steps (vLLM V1, ``--enable-chunked-prefill``); else a
    step is prompts only or decodes only, prompts first (vLLM 0.6's default scheduler, SGLang 0.3)."""
    step_token_budget: int
    """Tokens of one step (chunked) or of one prompt-only batch."""
    max_running: int | None
    """Most sequences running (vLLM ``max_num_seqs``); None: the KV pool bounds them."""
    decode_steps_per_schedule: int
    """Decode steps run between two scheduling decisions (vLLM ``--num-scheduler-steps``,
    SGLang ``num_continue_decode_steps``)."""
    finished_keep_slot: bool
    """A sequence finished inside a group of decode steps is computed to the group's end."""
    reservation: str
    """Admission: ``"blocks"`` (vLLM: the prompt's blocks must be free now) or ``"sglang"``
    (SGLang: prompt + max new tokens against the pool minus the running requests' remaining
    tokens times ``new_token_ratio``)."""


VLLM_0_6_MULTISTEP = EnginePolicy(
    name="vLLM 0.6 --num-scheduler-steps 10", chunked_prefill=False,
    # vLLM 0.6.0 vllm/config.py SchedulerConfig: without chunked prefill,
    # max_num_batched_tokens = max(max_model_len, 2048) (4,096 at --max_model_len 4096).
    step_token_budget=4096,
    max_running=256,  # vLLM 0.6.0 EngineArgs.max_num_seqs default
    decode_steps_per_schedule=10,  # the benchmark's --num-scheduler-steps 10
    # vLLM RFC 6854 (multi-step scheduling): the scheduler and its stop checks run once per
    # group, so a sequence that ends inside the group keeps its slot until the group ends.
    finished_keep_slot=True, reservation="blocks",
)
SGLANG_0_3 = EnginePolicy(
    name="SGLang 0.3", chunked_prefill=False,
    step_token_budget=8192,  # sglang 0.3 ServerArgs.chunked_prefill_size (max_prefill_tokens 16,384 is looser)
    max_running=None,  # max_running_requests = min(pool // 2, req_to_token_pool size - 1): above the pool's batch here
    decode_steps_per_schedule=10,  # sglang 0.3 global_config.num_continue_decode_steps
    finished_keep_slot=False, reservation="sglang",
)
SGLANG_RATIO = {"init": 0.7, "min": 0.1, "decay": 0.001, "clip": 4096, "retract_steps": 20}
"""sglang 0.3 global_config: init_new_token_ratio, base_min_new_token_ratio,
new_token_ratio_decay, retract_decode_steps; CLIP_MAX_NEW_TOKENS (policy_scheduler.py)."""
ENGINES = {"vllm-0.6-multistep": VLLM_0_6_MULTISTEP, "sglang-0.3": SGLANG_0_3}
WATERMARK = 0.01
"""vLLM BlockSpaceManager watermark: a prompt is admitted only if 1% of the blocks stay free."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OfflineRun:
    output_tokens: int
    duration_s: float
    steps: int
    mean_running: float
    """Sequences decoding per decode step, averaged over the decode steps."""
    peak_running: int
    recomputed_tokens: int
    """Tokens prefilled again after a retraction (preemption by recomputation)."""

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration_s


class _Request:
    __slots__ = ("input", "output", "generated")

    def __init__(self, input_tokens: int, output_tokens: int):
        self.input, self.output, self.generated = input_tokens, output_tokens, 0

    def held(self, block_tokens: int) -> int:
        """KV tokens held in whole blocks: the prompt and the tokens generated so far."""
        return math.ceil((self.input + self.generated) / block_tokens) * block_tokens


def simulate_offline(step, lengths, kv_pool_tokens: float, policy: EnginePolicy, block_tokens: int = 16) -> OfflineRun:
    """Replay ``lengths`` (``(input, output)`` pairs, in arrival order, all queued at time 0)
    through ``policy``; ``step(decodes, prompt_tokens)`` is one replica's step time in seconds
    (``StepModel.step`` on scalars). A request emits a token in the step that completes its
    prompt, then one per decode step; a retracted request prefills its prompt and its output
    so far again (recomputation) and goes on from there."""
    queue = deque(_Request(int(i), int(o)) for i, o in lengths)
    if any(r.input + r.output > kv_pool_tokens for r in queue):
        raise ValueError(f"a request of the list does not fit a KV pool of {kv_pool_tokens:,.0f} tokens")
    running: list[_Request] = []
    clock, out, steps, decode_steps, decoded, peak, recomputed = 0.0, 0, 0, 0, 0, 0, 0
    ratio = SGLANG_RATIO["init"]
    pool = float(kv_pool_tokens)
    cap = policy.max_running if policy.max_running is not None else 1 << 62
    clip = SGLANG_RATIO["clip"]

    def time_of(decodes: float, prompts: float) -> float:
        return float(np.asarray(step(np.array([float(decodes)]), np.array([float(prompts)]))).reshape(-1)[0])

    def admit() -> list[_Request]:
        nonlocal recomputed
        used = sum(r.held(block_tokens) for r in running)
        budget = policy.step_token_budget - (len(running) if policy.chunked_prefill else 0)
        room = pool - used - sum(min(r.output - r.generated, clip) * ratio for r in running)
        admitted, tokens = [], 0
        while queue and len(running) + len(admitted) < cap:
            request = queue[0]
            extend = request.input + request.generated
            if admitted and tokens + extend > budget:
                break
            if policy.reservation == "sglang":
                if extend + min(request.output - request.generated, clip) >= room and (running or admitted):
                    break
                room -= extend + min(request.output - request.generated, clip)
            else:
                if used + extend + block_tokens > pool * (1.0 - WATERMARK) and (running or admitted):
                    break
                used += extend
            queue.popleft()
            recomputed += extend if request.generated else 0
            admitted.append(request)
            tokens += extend
        return admitted

    while queue or running:
        admitted = admit()
        prompt_tokens = sum(r.input + r.generated for r in admitted)
        if policy.chunked_prefill or admitted:
            decodes = running if policy.chunked_prefill else []
            clock += time_of(len(decodes), prompt_tokens)
            steps += 1
            if decodes:
                decode_steps, decoded = decode_steps + 1, decoded + len(decodes)
            for request in decodes + admitted:
                request.generated += 1
            out += len(decodes) + len(admitted)
            running = [r for r in running + admitted if r.generated < r.output]
            peak = max(peak, len(running))
            continue
        group = list(running)
        for _ in range(policy.decode_steps_per_schedule):
            group, ratio, back = _preempt(group, pool, block_tokens, ratio, policy)
            queue.extendleft(reversed(back))
            live = [r for r in group if r.generated < r.output]
            if not live:
                break
            width = len(group) if policy.finished_keep_slot else len(live)
            clock += time_of(width, 0)
            steps, decode_steps, decoded = steps + 1, decode_steps + 1, decoded + width
            for request in live:
                request.generated += 1
            out += len(live)
            if not policy.finished_keep_slot:
                group = [r for r in group if r.generated < r.output]
            if policy.reservation == "sglang":
                ratio = max(ratio - SGLANG_RATIO["decay"], SGLANG_RATIO["min"])
        running = [r for r in group if r.generated < r.output]
    return OfflineRun(output_tokens=out, duration_s=clock, steps=steps, mean_running=decoded / max(decode_steps, 1),
                      peak_running=peak, recomputed_tokens=recomputed)


def _preempt(group, pool: float, block_tokens: int, ratio: float, policy: EnginePolicy):
    """When the pool cannot take one more token of every running request, send some back to
    the queue to be prefilled again. SGLang's ``retract_decode`` (schedule_batch.py): the
    fewest output tokens first (longest prompt among equals) until ``retract_decode_steps``
    tokens each fit, and the ratio becomes (decoded + retract_steps x running) / the max new
    tokens of those left. vLLM (core/scheduler.py ``_preempt``, recompute mode): the latest
    admitted until one token each fits."""
    free = pool - sum(r.held(block_tokens) for r in group)
    if free >= len(group):
        return group, ratio, []
    sglang = policy.reservation == "sglang"
    finished = [r for r in group if r.generated >= r.output]  # held to the group's end, never sent back
    order = [r for r in group if r.generated < r.output]
    order = sorted(order, key=lambda r: (r.generated, -r.input), reverse=True) if sglang else order
    need = SGLANG_RATIO["retract_steps"] if sglang else 1
    back = []
    while len(order) > 1 and (free < len(order) * need or not back):
        request = order.pop()
        free += request.held(block_tokens)
        back.append(request)
    if sglang:
        ratio = min(1.0, (sum(r.generated for r in order) + need * len(order)) / max(sum(r.output for r in order), 1))
    return order + finished, ratio, back
