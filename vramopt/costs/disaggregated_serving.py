"""Disaggregated prefill and decode (xPyD): prompts run on prefill replicas, the KV cache of
each request moves to a decode replica, which generates the output (DistServe, Zhong et al.
OSDI 2024; Splitwise, Patel et al. ISCA 2024; vLLM's disaggregated prefill with a KV
connector; Dynamo and SGLang PD disaggregation). Both replica kinds run on the same GPU
type, each with its own tensor-parallel degree (pipeline parallel 1, no MIG), with the same
weight format and KV dtype (the cache moves as it is).

What it removes. The colocated model (``costs/request_serving.py``) mixes prefill into every
decode step: a step at the load carries ``q = lambda x input x T`` prompt tokens beside its
n decodes, so the TPOT is the mean step *with* that prefill share (its GEMM tokens, its
attention over the prompt and its memory-bound kernels), and a prompt's own prefill gets
only the budget the decodes leave (``room = budget - n``). Here a decode step carries
decodes only and a prefill step prompts only.

Prefill replica (P of them, tp_p each): an M/G/1 queue of prompts (Poisson arrivals at
rate / P) served in steps of the whole ``max_num_batched_tokens`` budget, at
``budget / step(0, budget)`` prompt tokens/s when busy; a prompt of I tokens takes
``ceil(I / budget) x step(0, min(I, budget))``. Mean wait Pollaczek-Khinchine, tail
exponential, as in the colocated model (same sources). Its KV pool holds the prompts of two
full steps (one computing, one waiting for its transfer; assumption: vLLM's connector frees
a prefill's blocks once the decode side has pulled them): ``ceil(2 budget / I)`` sequences
of I + 1 tokens, the profiling step and the CUDA graphs as any vLLM instance.

KV transfer: ``I x KV bytes per token`` (all layers, at the KV dtype) per request. Every
prefill GPU sends its share of the heads in parallel and every decode GPU receives its
share, so one request takes ``I x KV bytes per token / min(kv split p, kv split d) / link``
(kv split = min(tp, KV heads): beyond the KV heads a GPU holds a replica, not a smaller
share). The link is the GPU's NVLink per direction while the whole deployment fits one node
(``costs/communication.intra_node_bandwidth``; H100 SXM: 450 GB/s, NVIDIA H100 datasheet)
and the node's network share per GPU otherwise (the catalog's
``network_bandwidth_bytes_per_s_per_gpu``: 400 Gb/s = 50 GB/s on DGX H100; conservative:
pairs placed inside one node of a larger deployment are charged the network too), times the
``collective_bandwidth_efficiency`` of large messages (0.80, nccl-tests practice; assumption:
point-to-point transfers of large buffers such as NIXL/UCX reach what NCCL's large messages
reach). The transfer follows the prefill (vLLM's NixlConnector pulls the blocks after the
prefill finishes; no layer-by-layer overlap, as Splitwise does). The links' utilization must
stay below 1 on both sides (the transfers' own queueing is not modelled).

Decode replica (D of them, tp_d each, its slots and speculative decoding): steps of decodes
only, at the fixed point ``T = step(lambda_d x output x T / E, 0)`` with lambda_d = rate / D
(Little's law); TPOT = T / E; the p99 TPOT from the decodes a request shares its steps with
(``costs/tpot_tail.py``, no prompt term). Its KV pool is sized as the colocated replica's:
every slot at its request's actual length.

TTFT = prefill wait + prefill + KV transfer + one decode step: the client's first token comes
from the decode replica (vLLM's disaggregated-serving proxy streams the decode instance's
output; DistServe counts the first token at the prefill instance, 1 step earlier). Capacity:
the smaller of the prefill replicas' prompt rate and the decode replicas' saturation rate.
"""

from __future__ import annotations

import math

import numpy as np

from vramopt.costs.coefficients import coefficient
from vramopt.costs.communication import intra_node_bandwidth
from vramopt.costs.kv_cache import kv_cache_bytes_per_token
from vramopt.costs.request_serving import RequestLoad, mix_contexts, ttft_points
from vramopt.costs.serving_step import StepModel, step_inputs
from vramopt.costs.tpot_tail import p99_step

PREFILL_STEPS_HELD = 2
"""Full prefill steps of prompts a prefill replica's KV pool holds (assumption above)."""


def prefill_load(load: RequestLoad) -> RequestLoad:
    """What a prefill replica holds: every prompt and its first token, no targets."""
    return RequestLoad(input_tokens=load.input_tokens, output_tokens=1.0, inputs=load.inputs, outputs=tuple(1 for _ in load.inputs))


def prefill_slots(load: RequestLoad, budget_tokens: int) -> int:
    """Sequences a prefill replica holds: the prompts of PREFILL_STEPS_HELD full steps."""
    return max(1, math.ceil(PREFILL_STEPS_HELD * budget_tokens / load.input_tokens))


def prefill_figures(case, columns, values, replicas, rate_per_s: float) -> dict[str, np.ndarray]:
    """Per prefill option (rows of ``columns``, whole GPUs, pp 1) with ``replicas`` replicas
    sharing ``rate_per_s``: the prefill's queueing and time, its capacity (requests/s)."""
    load: RequestLoad = case.requests
    size = len(columns)
    decode_context, prefill_context = mix_contexts(load)
    model = StepModel(case, step_inputs(columns, values), float(load.input_tokens), decode_context, prefill_context)
    budget = float(case.prefill_chunk_tokens)
    none = np.zeros(size)
    lengths = np.asarray(load.inputs, dtype=float)
    points, tail_input, tail_quantile = ttft_points(lengths)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        def prefill(length):
            return np.ceil(length / budget) * model.step(none, np.minimum(length, budget) + none)

        prompt_rate = budget / model.step(none, budget + none)
        arrivals = rate_per_s / np.asarray(replicas, dtype=float)
        utilization = arrivals * load.input_tokens / prompt_rate
        stable = utilization < 1.0
        second_moment = float(np.mean(lengths**2)) / prompt_rate**2
        mean_wait = np.where(stable, arrivals * second_moment / (2.0 * (1.0 - utilization)), np.inf)
        tail_wait = np.where(stable, np.where(utilization > tail_quantile, mean_wait / np.maximum(utilization, 1e-300)
                                              * np.log(np.maximum(utilization, 1e-300) / tail_quantile), 0.0), np.inf)
        return {
            "prefill_s": prefill(float(load.input_tokens)),
            "prefill_mean_s": np.mean([prefill(point) for point in points], axis=0),
            "prefill_tail_s": prefill(tail_input),
            "wait_mean_s": mean_wait,
            "wait_tail_s": tail_wait,
            "prompt_tokens_per_s": prompt_rate,
            "prefill_utilization": utilization,
            "capacity_requests_per_s": replicas * prompt_rate / load.input_tokens,
            "stable": stable,
            "tail_input_tokens": np.full(size, tail_input),
        }


def decode_figures(case, columns, values, replicas, rate_per_s: float) -> dict[str, np.ndarray]:
    """Per decode option with ``replicas`` replicas sharing ``rate_per_s``: the decode step
    at the load (no prefill in it), the TPOT, whether the load is sustained, the capacity."""
    load: RequestLoad = case.requests
    size = len(columns)
    decode_context, prefill_context = mix_contexts(load)
    model = StepModel(case, step_inputs(columns, values), float(load.input_tokens), decode_context, prefill_context)
    budget = float(case.prefill_chunk_tokens)
    alpha, gamma = case.acceptance_rate, float(case.speculative_tokens)
    emitted = np.where(model.speculative, (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha), 1.0)
    slots = columns.slots.astype(float)
    none = np.zeros(size)
    arrivals = rate_per_s / np.asarray(replicas, dtype=float)
    step_s = model.fixed_point(arrivals * load.output_tokens / emitted, none)
    with np.errstate(invalid="ignore"):
        running = arrivals * load.output_tokens / emitted * step_s
    batch = np.minimum(slots, np.floor(budget / model.verified))
    saturation_step = model.step(batch, none)
    with np.errstate(divide="ignore", invalid="ignore"):
        capacity = replicas * batch * emitted / load.output_tokens / saturation_step
    sustained = np.isfinite(step_s) & (running <= slots) & (running * model.verified <= budget) & (batch >= 1)
    # No prompts in a decode step: only the decodes a request shares its steps with vary.
    step_p99 = p99_step(model, arrivals, step_s, load.output_tokens / emitted, running, none, 0.0, 0.0)
    return {"decode_step_s": step_s, "tpot_s": step_s / emitted, "tpot_p99_s": step_p99 / emitted, "running_per_replica": running,
            "capacity_requests_per_s": capacity, "sustained": sustained}


def transfer_seconds_per_token(case, kv_dtype: str, prefill_tp, decode_tp, total_gpus) -> np.ndarray:
    """Seconds to move one prompt token's KV cache from a prefill to a decode replica."""
    model, gpu = case.model, case.gpu
    per_token = kv_cache_bytes_per_token(model, kv_dtype)
    if model.mla is None:
        split = np.minimum(np.minimum(np.asarray(prefill_tp), np.asarray(decode_tp)), model.kv_heads).astype(float)
    else:
        split = np.ones(np.shape(prefill_tp))  # MLA's latent is replicated over tp
    inside = np.asarray(total_gpus) <= gpu.node.gpus_per_node
    link = np.where(inside, intra_node_bandwidth(gpu), gpu.node.network_bandwidth_bytes_per_s_per_gpu)
    return per_token / split / (link * coefficient("collective_bandwidth_efficiency"))


def link_utilization(case, kv_dtype: str, tensor_parallel, replicas, total_gpus, rate_per_s: float) -> np.ndarray:
    """Share of one GPU's link the transfers of one side (prefill senders or decode
    receivers, ``replicas`` replicas of ``tensor_parallel`` GPUs) keep busy."""
    model, gpu = case.model, case.gpu
    split = np.minimum(np.asarray(tensor_parallel), model.kv_heads).astype(float) if model.mla is None else 1.0
    inside = np.asarray(total_gpus) <= gpu.node.gpus_per_node
    link = np.where(inside, intra_node_bandwidth(gpu), gpu.node.network_bandwidth_bytes_per_s_per_gpu)
    per_gpu_bytes_per_s = rate_per_s / np.asarray(replicas, dtype=float) * case.requests.input_tokens \
        * kv_cache_bytes_per_token(model, kv_dtype) / split
    return per_gpu_bytes_per_s / (link * coefficient("collective_bandwidth_efficiency"))


def combined_figures(load: RequestLoad, prefill: dict, decode: dict, transfer_s_per_token, prefill_link, decode_link) -> dict:
    """The deployment's figures from one prefill and one decode option (arrays broadcast)."""
    transfer_tail = prefill["tail_input_tokens"] * transfer_s_per_token
    transfer_mean = load.input_tokens * transfer_s_per_token
    served = prefill["stable"] & decode["sustained"] & (prefill_link < 1.0) & (decode_link < 1.0)
    capacity = np.minimum(prefill["capacity_requests_per_s"], decode["capacity_requests_per_s"])
    return {
        "ttft_p99_s": np.where(served, prefill["prefill_tail_s"] + prefill["wait_tail_s"] + transfer_tail + decode["decode_step_s"], np.inf),
        "ttft_mean_s": np.where(served, prefill["prefill_mean_s"] + prefill["wait_mean_s"] + transfer_mean + decode["decode_step_s"], np.inf),
        "tpot_s": np.where(served, decode["tpot_s"], np.inf),
        "tpot_p99_s": np.where(served, decode["tpot_p99_s"], np.inf),
        "transfer_s": transfer_mean,
        "capacity_requests_per_s": capacity,
        "capacity_tokens_per_s": capacity * load.output_tokens,
        "sustainable": served,
    }
