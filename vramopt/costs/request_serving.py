"""Serving a stream of requests: prefill and decode together under continuous batching with
chunked prefill, time to first token (TTFT), time per output token (TPOT) and capacity.

Every request has ``input`` prompt tokens and ``output`` generated tokens. The engine runs
steps (vLLM V1's scheduler, Sarathi-Serve's stall-free batching, Agrawal et al. 2024): each
step carries one token of every running sequence (decode) and up to the rest of the
``max_num_batched_tokens`` budget in prompt chunks (prefill).

Step time, from the same building blocks as the decode roofline (``costs/inference.py``):

    step(n, q) = max(weights / t / bandwidth, (n + q) 2 P_active / t / GEMM rate)
               + max(KV bytes / bandwidth, attention FLOPs / GEMM rate)
               + tensor-parallel all-reduces (+ draft steps under speculative decoding)

(a roofline per operator group, Williams et al. 2009: the GEMMs and attention run one
after the other, each limited by its own slower resource) with n decode tokens at the mean
context ``input + (output + 1) / 2`` and q prompt tokens at a mean causal context of
``input / 2``: KV bytes = (n x context + q) x KV bytes per token per GPU; attention FLOPs =
4 L a d_h per token per context token, / t. The GEMM rate is the format's peak x the
calibrated utilization of ``costs/coefficients.py`` (``gemm_flops_per_s``): the one place an
operator-level model with batch-dependent GEMM efficiency replaces it.

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
budget: an M/D/1 queue (Poisson arrivals, fixed lengths) with utilization rho = lambda x
input / (r / step(n, r)) and service time S = input / (r / step(n, r)). Mean wait:
Pollaczek-Khinchine, rho S / (2 (1 - rho)); p99 wait: the M/M/1 waiting-time distribution
P(W > t) = rho exp(-(1 - rho) t / S) (Kleinrock 1975, Queueing Systems vol. 1, chapter 3),
which bounds the deterministic-service tail from above, so the p99 TTFT is conservative.

Closed loop (a fixed ``concurrency`` of clients, each sending its next request when the
last one finishes, as benchmark clients with max-concurrency do): n = min(clients per
replica, the batch the replica holds) sequences decode, each finished one is replaced by
a prompt, so q = n x E x input / output per step; clients beyond the batch wait.

Saturation (the offline benchmarks, every request queued at once): n = the largest batch
the replica holds (its slots, bounded by the KV pool and the step budget), q as in the
closed loop; this is the plan's capacity in output tokens/s and requests/s.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from vramopt.costs.vllm_memory import mean_tokens_held


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestLoad:
    """The requests a deployment serves and its service-level targets."""

    input_tokens: int
    """Prompt tokens of every request."""
    output_tokens: int
    """Generated tokens of every request."""
    rate_per_s: float | None = None
    """Poisson arrival rate of requests over the whole deployment (open loop)."""
    concurrency: int | None = None
    """Clients each keeping one request in flight (closed loop); neither: saturation."""
    ttft_p99_s: float | None = None
    """Bound on the 99th-percentile time to first token."""
    tpot_s: float | None = None
    """Bound on the mean time per output token."""


def _affine_fixed_point(groups):
    """T* = step(T) for step(T) = sum over groups of max over (a, b) pieces of a + b T.

    The sum of maxima is the maximum over one piece per group, so the fixed point is the
    largest a / (1 - b) over those combinations; inf where a combination has b >= 1 and a > 0
    (no steady state: the replica falls behind)."""
    best = None
    for combination in itertools.product(*groups):
        a = sum(piece[0] for piece in combination)
        b = sum(piece[1] for piece in combination)
        with np.errstate(divide="ignore", invalid="ignore"):
            point = np.where(b < 1.0, a / (1.0 - b), np.where(a > 0, np.inf, 0.0))
        best = point if best is None else np.maximum(best, point)
    return best


def evaluate_requests(case, columns, values) -> dict[str, np.ndarray]:
    """The request-level figures of every plan row (``case.requests`` must be set)."""
    load: RequestLoad = case.requests
    model = case.model
    t = columns.tensor_parallel.astype(float)
    speculative = columns.speculative == 1
    gamma = float(case.speculative_tokens)
    alpha = case.acceptance_rate
    emitted = np.where(speculative, (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha), 1.0)
    verified = np.where(speculative, gamma + 1.0, 1.0)
    bandwidth = values["hbm_bytes_per_s"]
    rate = values["gemm_flops_per_s"]
    weights_read = values["weights_read_bytes"]
    kv_token = values["kv_read_bytes_per_token"]
    link = values["link_bytes_per_s"]
    decode_context = load.input_tokens + (load.output_tokens + 1) / 2.0
    prefill_context = load.input_tokens / 2.0
    linear = 2.0 * model.params_active / t
    attention = 4.0 * model.layers * model.heads * model.head_dim / t
    latency = np.where(t > 1, 2.0 * model.layers * values["all_reduce_latency_s"], 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_token_comm = np.where(t > 1, 2.0 * model.layers * 2.0 * (t - 1.0) / t * model.hidden_size * 2.0 / link, 0.0)
    draft_weights = values["draft_weights_read_bytes"]
    draft_linear = linear * case.draft_params_fraction

    def pieces(decodes, prompt_tokens, constant):
        """The step's operator groups as (a, b) pieces of a + b x scale: with ``constant`` 1
        the pieces of one step (decodes and prompt_tokens are counts), with 0 the slopes of
        a step whose counts grow as decodes x T and prompt_tokens x T (rates)."""
        tokens = decodes * verified + prompt_tokens
        with np.errstate(divide="ignore", invalid="ignore"):
            # The GEMMs: the weights streamed from HBM or the FLOPs, whichever is longer.
            gemm = [(constant * weights_read / bandwidth, 0.0), (0.0, tokens * linear / rate)]
            # Attention over the KV cache in use: its bytes or its FLOPs.
            attention_group = [(0.0, (decodes * decode_context + prompt_tokens) * kv_token / bandwidth),
                               (0.0, (decodes * verified * decode_context + prompt_tokens * prefill_context) * attention / rate)]
            communication = [(constant * latency, tokens * per_token_comm)]
            draft = [(np.where(speculative, constant * gamma * draft_weights / bandwidth, 0.0),
                      np.where(speculative, gamma * decodes * decode_context * kv_token * case.draft_kv_fraction / bandwidth, 0.0)),
                     (0.0, np.where(speculative, gamma * decodes * draft_linear / rate, 0.0))]
        return [gemm, attention_group, communication, draft]

    def step(decodes, prompt_tokens):
        """Step time of one replica with ``decodes`` sequences and ``prompt_tokens`` prompt tokens:
        the operator groups run one after another, each as long as its slower resource."""
        return sum(np.maximum.reduce([np.broadcast_to(a + b, np.shape(decodes)) for a, b in group]) if len(group) > 1
                   else group[0][0] + group[0][1] for group in pieces(decodes, prompt_tokens, 1.0))

    def fixed_point(decodes_per_s, prompt_per_s):
        """The step length T at which n = decodes_per_s x T and q = prompt_per_s x T."""
        return _affine_fixed_point(pieces(decodes_per_s, prompt_per_s, 1.0))

    budget = float(case.prefill_chunk_tokens)
    slots = columns.slots.astype(float)
    replicas = values["replicas"]
    # The largest batch: the slots (the memory check sized the KV pool for them at the
    # requests' actual lengths), and no more decodes than leave room for their prompts.
    prompts_per_decode = emitted * load.input_tokens / load.output_tokens
    batch = np.minimum(slots, np.floor(budget / (verified + prompts_per_decode)))
    saturation_step = step(batch, batch * prompts_per_decode)
    with np.errstate(divide="ignore", invalid="ignore"):
        capacity_requests = replicas * batch * emitted / load.output_tokens / saturation_step
    capacity_tokens = capacity_requests * load.output_tokens

    if load.rate_per_s is not None:
        arrivals = load.rate_per_s / replicas
        step_s = fixed_point(arrivals * load.output_tokens / emitted, arrivals * load.input_tokens)
        running = arrivals * load.output_tokens / emitted * step_s
        requests = np.full(len(columns), float(load.rate_per_s))
        waiting_clients = np.zeros(len(columns))
        sustainable = np.isfinite(step_s) & (running <= slots) & (running * verified + arrivals * load.input_tokens * step_s <= budget)
    else:
        clients = (load.concurrency if load.concurrency is not None else np.inf) / replicas
        running = np.minimum(batch, clients)
        step_s = step(running, running * prompts_per_decode)
        with np.errstate(divide="ignore", invalid="ignore"):
            arrivals = running * emitted / load.output_tokens / step_s
        requests = arrivals * replicas
        waiting_clients = np.where(np.isfinite(clients), np.maximum(clients - batch, 0.0), 0.0)
        sustainable = np.isfinite(step_s) & (batch >= 1)

    room = budget - running * verified
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        chunk = np.minimum(float(load.input_tokens), room)
        prefill_s = np.ceil(load.input_tokens / room) * step(running, chunk)
        prompt_rate = room / step(running, room)
        service = load.input_tokens / prompt_rate
        utilization = np.where(load.rate_per_s is not None, arrivals * load.input_tokens / prompt_rate, 0.0)
        stable = utilization < 1.0
        mean_wait = np.where(stable, utilization * service / (2.0 * (1.0 - utilization)), np.inf)
        tail_wait = np.where(stable, np.where(utilization > 0.01, service * np.log(100.0 * np.maximum(utilization, 0.01)) / (1.0 - utilization), 0.0), np.inf)
        # Closed loop: clients beyond the batch wait for a finishing request.
        client_wait = np.where(waiting_clients > 0, waiting_clients / arrivals, 0.0)
        ttft_mean = prefill_s + mean_wait + client_wait
        ttft_p99 = prefill_s + tail_wait + client_wait
        tpot = step_s / emitted
    sustainable &= (room >= 1.0) & stable
    return {
        "ttft_mean_s": np.where(sustainable, ttft_mean, np.inf),
        "ttft_p99_s": np.where(sustainable, ttft_p99, np.inf),
        "prefill_alone_s": prefill_s,
        "tpot_s": np.where(sustainable, tpot, np.inf),
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


def request_kv_tokens_per_slot(load: RequestLoad, block_size_tokens: int) -> float:
    """Token slots a running sequence holds on average: its actual length in whole blocks."""
    return mean_tokens_held(load.input_tokens, load.output_tokens, block_size_tokens)


REQUEST_FIELDS = ("input_tokens", "output_tokens", "rate_per_s", "concurrency", "ttft_p99_ms", "tpot_ms")
"""The serving workload's request-level fields (types.ServingWorkload)."""


def request_load(workload, max_context: int, model_name: str) -> RequestLoad | None:
    """The workload's requests, checked: None when it gives no lengths; lengths within the
    model's context and the workload's ``context``; rates, clients and targets positive."""
    from vramopt.errors import InputError
    from vramopt.types import MAX_COUNT

    given = [name for name in REQUEST_FIELDS if getattr(workload, name) is not None]
    if not given:
        return None
    if workload.input_tokens is None or workload.output_tokens is None:
        raise InputError(f"{', '.join(given)} need both input_tokens and output_tokens (--input-tokens, --output-tokens)")
    for name in ("input_tokens", "output_tokens"):
        value = getattr(workload, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    total = workload.input_tokens + workload.output_tokens
    if total > max_context:
        raise InputError(f"input + output tokens ({total:,}) exceed {model_name}'s context of {max_context:,} tokens")
    if total > workload.context:
        raise InputError(f"input + output tokens ({total:,}) exceed the context of {workload.context:,} tokens "
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
    return RequestLoad(
        input_tokens=workload.input_tokens, output_tokens=workload.output_tokens,
        rate_per_s=None if workload.rate_per_s is None else float(workload.rate_per_s), concurrency=clients,
        ttft_p99_s=None if workload.ttft_p99_ms is None else workload.ttft_p99_ms / 1e3,
        tpot_s=None if workload.tpot_ms is None else workload.tpot_ms / 1e3,
    )
