"""Serving a stream of requests: prefill and decode together under continuous batching with
chunked prefill, time to first token (TTFT), time per output token (TPOT) and capacity.

Every request has ``input`` prompt tokens and ``output`` generated tokens. The engine runs
steps (vLLM V1's scheduler, Sarathi-Serve's stall-free batching, Agrawal et al. 2024): each
step carries one token of every running sequence (decode) and up to the rest of the
``max_num_batched_tokens`` budget in prompt chunks (prefill).

Step time, from the operator terms of ``costs/serving_operators.py``:

    step(n, q) = max(weights / t / bandwidth, wave + (n + q) GEMM s per token + logits x head s per token)
               + max(KV bytes / bandwidth, attention FLOPs / attention rate)
               + memory-bound kernels' bytes / bandwidth
               + tensor-parallel all-reduces (+ draft steps under speculative decoding)

(a roofline per operator group, Williams et al. 2009: the GEMMs and attention run one
after the other, each limited by its own slower resource) with n decode tokens at the mean
context ``input + (output + 1) / 2`` and q prompt tokens at a mean causal context of
``input / 2``: KV bytes = (n x context + q) x KV bytes per token per GPU; attention FLOPs =
4 L a d_h per token per context token, / t. The GEMMs are timed from their shapes with
``costs/gemm.py``'s efficiency, whose wave-quantization term is a constant per step (thin
decode steps are slow per FLOP); logits = n + q / input (prefill computes the last
position's only).

Steady state at an arrival rate lambda per replica (Little's law, Little 1961): a request
decodes for ``output / E`` steps (E = tokens per step, > 1 only with speculative decoding),
so n = lambda x output x T / E running sequences and q = lambda x input x T prompt tokens per
step of length T. T is the fixed point of T = step(n(T), q(T)); step is a sum of maxima of
functions affine in T, so the fixed point is the largest ``a / (1 - b)`` over the affine
pieces, and it does not exist (the replica is overloaded) when a piece has slope b >= 1.
TPOT is T / E (a mean: every step carries its share of prefill).

TTFT = queueing + the request's own prefill. The prompt is processed in chunks of the
budget left by the decodes (r = budget - n tokens per step), so its prefill takes
``ceil(input / r)`` steps of ``step(n, min(input, r))``. Prompt tokens queue for that
budget: an M/G/1 queue (Poisson arrivals) with service S = input / (r / step(n, r)) and
utilization rho = lambda E[S]. Mean wait: Pollaczek-Khinchine, lambda E[S^2] / (2 (1 -
rho)) (Kleinrock 1975, Queueing Systems vol. 1, section 5.7). Tail: P(W > t) = rho exp(-rho
t / W), exact for M/M/1 and Kingman's heavy-traffic exponential (Kingman 1961) otherwise.
With fixed lengths the p99 TTFT is the p99 wait + the prefill; with a length mix it is
bounded by the union bound: the wait's 99.5th percentile + the prefill of the
99.5th-percentile prompt (P(W + P > w + p) <= P(W > w) + P(P > p)).

A length mix (``inputs``/``outputs``: one pair per sampled request) enters through its
means (Little's law), the mean context a decode token attends to (sum of O I + O (O + 1)
/ 2 over sum of O: long requests decode for more steps), the mean causal context of a
prompt token (sum I^2 / 2 / sum I), the KV blocks a running sequence holds on average over
the decode steps, E[S^2] of the prompt queue and the prompt quantiles of the TTFT.

Closed loop (a fixed ``concurrency`` of clients, each sending its next request when the
last one finishes, as benchmark clients with max-concurrency do): n = min(clients per
replica, the batch the replica holds) sequences decode, each finished one is replaced by
a prompt, so q = n x E x input / output per step; clients beyond the batch wait.

Saturation (the offline benchmarks, every request queued at once): n = the largest batch
the replica holds (its slots, bounded by the KV pool and the step budget), q as in the
closed loop; this is the plan's capacity in output tokens/s and requests/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vramopt.costs.row_groups import evaluate_once_per_row
from vramopt.costs.serving_step import StepModel, affine_fixed_point, step_inputs
from vramopt.costs.tpot_tail import p99_step


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestLoad:
    """The requests a deployment serves and its service-level targets."""

    input_tokens: float
    """Prompt tokens of every request (the mean of ``inputs``)."""
    output_tokens: float
    """Generated tokens of every request (the mean of ``outputs``)."""
    inputs: tuple[int, ...] = ()
    """The requests' prompt lengths, one per sampled request (one entry: fixed lengths)."""
    outputs: tuple[int, ...] = ()
    """The requests' output lengths, paired with ``inputs``."""
    rate_per_s: float | None = None
    """Poisson arrival rate of requests over the whole deployment (open loop)."""
    concurrency: int | None = None
    """Clients each keeping one request in flight (closed loop); neither: saturation."""
    ttft_p99_s: float | None = None
    """Bound on the 99th-percentile time to first token."""
    tpot_s: float | None = None
    """Bound on the mean time per output token."""
    lengths_from: str = "fixed"
    """Where the lengths come from: ``fixed``, ``samples`` (length_samples) or ``lognormal``
    (a mean and a p99, costs/length_distribution.py)."""
    cached_prefix_tokens: int = 0
    """Prompt tokens found in the prefix cache (a shared prefix's whole blocks): not prefilled,
    held once per replica, attended to by every token. ``input_tokens`` and ``inputs`` count
    the prompt tokens after them, the ones the engine computes."""


_affine_fixed_point = affine_fixed_point
"""Kept under its earlier name (the fixed point lives in costs/serving_step.py)."""


def evaluate_requests(case, columns, values, share_rows: bool = True) -> dict[str, np.ndarray]:
    """The request-level figures of every plan row (``case.requests`` must be set).

    The step times (saturation, the load's fixed point, prefills) are computed once per
    distinct row of their inputs (``costs/row_groups.py``): they do not depend on the slots
    or on paging, so a table of layouts x items shares them; ``share_rows=False`` computes
    every row (the reference, tests/regression/test_serving_latency_answers.py)."""
    load: RequestLoad = case.requests
    size = len(columns)
    speculative = columns.speculative == 1
    gamma = float(case.speculative_tokens)
    alpha = case.acceptance_rate
    emitted = np.where(speculative, (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha), 1.0)
    verified = np.where(speculative, gamma + 1.0, 1.0)
    decode_context, prefill_context = mix_contexts(load)
    inputs = step_inputs(columns, values)

    def step_model(rows):
        return StepModel(case, rows, float(load.input_tokens), decode_context, prefill_context)

    # The budget is per engine: an expert-parallel replica's d attention groups each batch
    # their own (costs/serving_experts.py).
    groups = np.asarray(inputs["attention_groups"], dtype=float)
    budget = float(case.prefill_chunk_tokens) * groups
    slots = columns.slots.astype(float)
    replicas = values["replicas"]
    # The largest batch: the slots (the memory check sized the KV pool for them at the
    # requests' actual lengths), and no more decodes than leave room for their prompts.
    prompts_per_decode = emitted * load.input_tokens / load.output_tokens
    batch = np.minimum(slots, np.floor(budget / (verified + prompts_per_decode)))
    # Not the slots: the step at a load depends on the decodes running, never on the slots.
    rows = {**inputs, "prompts_per_decode": prompts_per_decode, "emitted": emitted, "budget": budget}

    def saturation(part):
        return {"step": step_model(part).step(part["batch"], part["batch"] * part["prompts_per_decode"])}

    saturation_step = evaluate_once_per_row(saturation, {**rows, "batch": batch}, size, share_rows)["step"]
    with np.errstate(divide="ignore", invalid="ignore"):
        capacity_requests = replicas * batch * emitted / load.output_tokens / saturation_step
    capacity_tokens = capacity_requests * load.output_tokens

    lengths = np.asarray(load.inputs, dtype=float)
    points, tail_input, tail_quantile = ttft_points(lengths)

    def at_load(part):
        """The step at the load, the decodes running, and the prefills beside them."""
        model = step_model(part)
        if load.rate_per_s is not None:
            arrivals = part["arrivals"]
            step_s = model.fixed_point(arrivals * load.output_tokens / part["emitted"], arrivals * load.input_tokens)
            running = arrivals * load.output_tokens / part["emitted"] * step_s
        else:
            running = part["running"]
            step_s = model.step(running, running * part["prompts_per_decode"])
        room = part["budget"] - running * model.verified
        # One prompt runs in one attention group, in chunks of that group's room; the step
        # is timed with every group as full (the replica's step at that prompt load).
        group_room = room / model.groups
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            def prefill(length):
                """One prompt of ``length`` tokens in chunks of the room the decodes leave."""
                return np.ceil(length / group_room) * model.step(running, np.minimum(length, group_room) * model.groups)

            # The p99 over requests of their mean step (costs/tpot_tail.py): at a rate only.
            step_p99 = (p99_step(model, part["arrivals"], step_s, load.output_tokens / part["emitted"], running,
                                 part["arrivals"] * load.input_tokens * step_s, float(np.mean(lengths)), float(np.mean(lengths**2)))
                        if load.rate_per_s is not None else np.full(np.shape(step_s), np.nan))
            return {"step_s": step_s, "running": running, "room": room, "prefill_s": prefill(float(load.input_tokens)),
                    "prefill_mean": np.mean([prefill(point) for point in points], axis=0), "prefill_tail": prefill(tail_input),
                    "prompt_rate": room / model.step(running, room), "step_p99": step_p99}

    if load.rate_per_s is not None:
        arrivals = load.rate_per_s / replicas
        figures = evaluate_once_per_row(at_load, {**rows, "arrivals": arrivals}, size, share_rows)
        step_s, running = figures["step_s"], figures["running"]
        requests = np.full(len(columns), float(load.rate_per_s))
        waiting_clients = np.zeros(len(columns))
        sustainable = np.isfinite(step_s) & (running <= slots) & (running * verified + arrivals * load.input_tokens * step_s <= budget)
    else:
        clients = (load.concurrency if load.concurrency is not None else np.inf) / replicas
        figures = evaluate_once_per_row(at_load, {**rows, "running": np.minimum(batch, clients)}, size, share_rows)
        step_s, running = figures["step_s"], figures["running"]
        with np.errstate(divide="ignore", invalid="ignore"):
            arrivals = running * emitted / load.output_tokens / step_s
        requests = arrivals * replicas
        waiting_clients = np.where(np.isfinite(clients), np.maximum(clients - batch, 0.0), 0.0)
        sustainable = np.isfinite(step_s) & (batch >= 1)

    room, prefill_s, prefill_mean = figures["room"], figures["prefill_s"], figures["prefill_mean"]
    prefill_tail, prompt_rate = figures["prefill_tail"], figures["prompt_rate"]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        utilization = np.where(load.rate_per_s is not None, arrivals * load.input_tokens / prompt_rate, 0.0)
        stable = utilization < 1.0
        # M/G/1 (Pollaczek-Khinchine): W = lambda E[S^2] / (2 (1 - rho)), S = input / prompt rate.
        second_moment = float(np.mean(lengths**2)) / prompt_rate**2
        mean_wait = np.where(stable, arrivals * second_moment / (2.0 * (1.0 - utilization)), np.inf)
        # P(W > t) = rho exp(-rho t / W): exact for M/M/1, Kingman's heavy-traffic exponential otherwise.
        tail_wait = np.where(stable, np.where(utilization > tail_quantile, mean_wait / np.maximum(utilization, 1e-300)
                                              * np.log(np.maximum(utilization, 1e-300) / tail_quantile), 0.0), np.inf)
        # Closed loop: clients beyond the batch wait for a finishing request.
        client_wait = np.where(waiting_clients > 0, waiting_clients / arrivals, 0.0)
        ttft_mean = prefill_mean + mean_wait + client_wait
        ttft_p99 = prefill_tail + tail_wait + client_wait
        tpot = step_s / emitted
    sustainable &= (room / groups >= 1.0) & stable
    return {
        "ttft_mean_s": np.where(sustainable, ttft_mean, np.inf),
        "ttft_p99_s": np.where(sustainable, ttft_p99, np.inf),
        "prefill_alone_s": prefill_s,
        "prefill_tail_s": prefill_tail,
        "tpot_s": np.where(sustainable, tpot, np.inf),
        "tpot_p99_s": np.where(sustainable, figures["step_p99"] / emitted, np.inf) if load.rate_per_s is not None else np.full(size, np.nan),
        "requests_per_s": np.where(sustainable, requests, 0.0),
        "output_tokens_per_s_at_load": np.where(sustainable, requests * load.output_tokens, 0.0),
        "running_per_replica": running,
        "prompt_tokens_per_step": np.where(load.rate_per_s is not None, arrivals * load.input_tokens * step_s, running * prompts_per_decode),
        "load_step_s": step_s,
        "capacity_requests_per_s": capacity_requests,
        "capacity_tokens_per_s": capacity_tokens,
        "saturation_step_s": saturation_step,
        "saturation_batch": batch,
        "sustainable": sustainable,
    }


def request_targets_met(values, load: RequestLoad | None) -> dict[str, np.ndarray]:
    """Name -> elementwise mask of the request-level requirements: the rate (or the clients)
    is served in a steady state, and the TTFT and TPOT targets hold. Empty without requests."""
    if load is None:
        return {}
    met = {"load served": np.asarray(values["sustainable"], dtype=bool)}
    if load.ttft_p99_s is not None:
        met["p99 TTFT"] = np.asarray(values["ttft_p99_s"]) <= load.ttft_p99_s
    if load.tpot_s is not None:
        met["mean TPOT"] = np.asarray(values["tpot_s"]) <= load.tpot_s
    return met


TTFT_POINTS = 32
"""Equal-probability prompt lengths the mean TTFT averages the prefill over."""


def ttft_points(inputs: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(prompt lengths for the mean prefill, the tail prompt length, the tail probability of
    the wait). Fixed lengths: the one length, and the wait's own p99 (0.01). A mix: the
    p99 TTFT is bounded by the union bound P(W + P > w + p) <= P(W > w) + P(P > p) with
    both at 0.5%: the 99.5th-percentile prompt and a wait tail of 0.005."""
    if inputs.size == 1 or np.all(inputs == inputs[0]):
        return inputs[:1], float(inputs[0]), 0.01
    points = np.quantile(inputs, (np.arange(TTFT_POINTS) + 0.5) / TTFT_POINTS)
    return points, float(np.quantile(inputs, 0.995)), 0.005


def mix_contexts(load: RequestLoad) -> tuple[float, float]:
    """(mean context a decode token attends to, mean causal context of a prompt token):
    sum over requests of (O I + O (O + 1) / 2) / sum O, and sum I^2 / 2 / sum I, each plus
    the cached prefix (I: the prompt tokens after it)."""
    inputs, outputs = np.asarray(load.inputs, dtype=float), np.asarray(load.outputs, dtype=float)
    decode = float(np.sum(outputs * inputs + outputs * (outputs + 1) / 2.0) / np.sum(outputs))
    # A cached prefix is attended to by every token after it.
    cached = float(load.cached_prefix_tokens)
    return cached + decode, cached + float(np.sum(inputs**2) / 2.0 / np.sum(inputs))


def _block_prefix(tokens: np.ndarray, block_size_tokens: int) -> np.ndarray:
    """sum over x = 1..tokens of ceil(x / block) * block, in closed form."""
    full, rest = np.divmod(tokens, block_size_tokens)
    return block_size_tokens**2 * full * (full + 1) / 2 + rest * (full + 1) * block_size_tokens


def request_kv_tokens_per_slot(load: RequestLoad, block_size_tokens: int) -> float:
    """Token slots a running sequence holds on average over the decode steps: each request's
    actual length in whole blocks after each of its output tokens, weighted by its steps."""
    inputs, outputs = np.asarray(load.inputs, dtype=np.int64), np.asarray(load.outputs, dtype=np.int64)
    held = _block_prefix(inputs + outputs, block_size_tokens) - _block_prefix(inputs, block_size_tokens)
    return float(np.sum(held) / np.sum(outputs))


REQUEST_FIELDS = ("input_tokens", "output_tokens", "length_samples", "rate_per_s", "concurrency", "ttft_p99_ms", "tpot_ms",
                  "shared_prefix_tokens", "input_tokens_p99", "output_tokens_p99")
"""The serving workload's request-level fields (types.ServingWorkload)."""


def request_load(workload, max_context: int, model_name: str) -> RequestLoad | None:
    """The workload's requests, checked: None when it gives no lengths; lengths within the
    model's context and the workload's ``context``; rates, clients and targets positive."""
    from vramopt.errors import InputError
    from vramopt.types import MAX_COUNT

    if getattr(workload, "disaggregation", "auto") not in ("auto", "off"):
        raise InputError(f"disaggregation must be 'auto' or 'off', got {workload.disaggregation!r}")
    given = [name for name in REQUEST_FIELDS if getattr(workload, name) is not None]
    if not given:
        return None
    samples = workload.length_samples
    if samples is not None:
        if workload.input_tokens is not None or workload.output_tokens is not None:
            raise InputError("give input_tokens and output_tokens or length_samples (--lengths), not both")
        if workload.input_tokens_p99 is not None or workload.output_tokens_p99 is not None:
            raise InputError("give length_samples (--lengths) or p99 lengths, not both")
        pairs = _checked_samples(samples)
    else:
        if workload.input_tokens is None or workload.output_tokens is None:
            raise InputError(f"{', '.join(given)} need both input_tokens and output_tokens (--input-tokens, --output-tokens) "
                             "or length_samples (--lengths)")
        for name in ("input_tokens", "output_tokens"):
            value = getattr(workload, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        from vramopt.costs.length_distribution import percentile_pairs

        pairs = percentile_pairs(workload) or [(workload.input_tokens, workload.output_tokens)]
    total = max(prompt + output for prompt, output in pairs)
    what = "input + output tokens" if samples is None and len(pairs) == 1 else "the longest request's input + output tokens"
    if total > max_context:
        raise InputError(f"{what} ({total:,}) exceed {model_name}'s context of {max_context:,} tokens")
    if total > workload.context:
        raise InputError(f"{what} ({total:,}) exceed the context of {workload.context:,} tokens "
                         "(vLLM max-model-len); raise --context")
    if workload.rate_per_s is not None and workload.concurrency is not None:
        raise InputError("give a request rate or a concurrency, not both")
    for name, unit in (("rate_per_s", "requests per second"), ("ttft_p99_ms", "milliseconds"), ("tpot_ms", "milliseconds")):
        value = getattr(workload, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                                  or not 0 < value <= 1e9):
            raise InputError(f"{name} must be a positive number of {unit}, got {value!r}")
    clients = workload.concurrency
    if clients is not None and (isinstance(clients, bool) or not isinstance(clients, int) or not 1 <= clients <= MAX_COUNT):
        raise InputError(f"concurrency must be a positive integer, got {clients!r}")
    cached = cached_prefix_tokens(workload.shared_prefix_tokens, min(pair[0] for pair in pairs))
    inputs, outputs = tuple(pair[0] - cached for pair in pairs), tuple(pair[1] for pair in pairs)
    fixed = len(pairs) == 1
    return RequestLoad(
        input_tokens=inputs[0] if fixed else sum(inputs) / len(inputs),
        output_tokens=outputs[0] if fixed else sum(outputs) / len(outputs),
        inputs=inputs, outputs=outputs,
        rate_per_s=None if workload.rate_per_s is None else float(workload.rate_per_s), concurrency=clients,
        ttft_p99_s=None if workload.ttft_p99_ms is None else workload.ttft_p99_ms / 1e3,
        tpot_s=None if workload.tpot_ms is None else workload.tpot_ms / 1e3,
        cached_prefix_tokens=cached,
        lengths_from="samples" if samples is not None else "fixed" if fixed else "lognormal",
    )


PREFIX_BLOCK_TOKENS = 16
"""vLLM's KV block (``block_size`` 16, the request model's block, costs/inference.py): prefix
caching hashes and reuses whole blocks only."""


def cached_prefix_tokens(shared_prefix_tokens, shortest_input: int) -> int:
    """Tokens of every prompt served from the prefix cache: the shared prefix's whole blocks,
    and never the prompt's last token, which vLLM always computes for its logits
    (``KVCacheManager.get_computed_blocks`` leaves at least one token to compute)."""
    from vramopt.errors import InputError
    from vramopt.types import MAX_COUNT

    if shared_prefix_tokens is None:
        return 0
    if isinstance(shared_prefix_tokens, bool) or not isinstance(shared_prefix_tokens, int) or not 0 <= shared_prefix_tokens <= MAX_COUNT:
        raise InputError(f"shared_prefix_tokens must be a non-negative integer, got {shared_prefix_tokens!r}")
    if shared_prefix_tokens >= shortest_input:
        raise InputError(f"shared_prefix_tokens ({shared_prefix_tokens:,}) must be shorter than every prompt "
                         f"(the shortest has {shortest_input:,} tokens)")
    return min(shared_prefix_tokens // PREFIX_BLOCK_TOKENS * PREFIX_BLOCK_TOKENS, shortest_input - 1)


MAX_LENGTH_SAMPLES = 1_000_000
"""Most sampled requests a length mix may hold."""


def _checked_samples(samples) -> list[tuple[int, int]]:
    """(input, output) pairs of positive integers, at least one and at most MAX_LENGTH_SAMPLES."""
    from vramopt.errors import InputError
    from vramopt.types import MAX_COUNT

    if not isinstance(samples, (tuple, list)) or not 1 <= len(samples) <= MAX_LENGTH_SAMPLES:
        raise InputError(f"length_samples must hold 1 to {MAX_LENGTH_SAMPLES:,} [input, output] pairs")
    pairs = []
    for index, pair in enumerate(samples):
        if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                or any(isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT for value in pair)):
            raise InputError(f"length_samples[{index}] must be [input_tokens, output_tokens], two positive integers, got {pair!r}")
        pairs.append((int(pair[0]), int(pair[1])))
    return pairs
