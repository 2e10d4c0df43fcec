"""The solver's integer tables agree with ``estimate`` on every key's best item.

"CP-SAT equals exhaustive" compares two engines that read the same tables, so it cannot
see a table that is wrong (a cost term dropped from a group, a wrong rounding). This test
does not trust the tables: for each key of several problems it takes the key's best
(state, activation) pair by enumeration, decodes the plan, evaluates it with ``estimate``
(the floating-point cost model a user calls) and checks, per docs/solver.md "From cost
model to integers":

- memory: the table's MiB (constant + state + activation, each rounded up) is at least the
  estimate's total and less than it plus 3 MiB; in bytes, the three parts add up to the
  estimate's total (separability, relative 1e-9), term by term;
- time: the table's ticks (each part rounded to the nearest tick) times the tick are
  within one tick of the estimate's step time (training) or seconds per output token
  (serving: 1 / tokens_per_s);
- the plan fits in floating point.

Keys are sampled (seeded, at most ``KEYS_PER_REQUEST`` per problem, the optimum always in)
to keep the run to seconds.
"""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.estimate import estimate_serving, estimate_training
from vramopt.optimizer.decode import decode_choice
from vramopt.optimizer.objective import constant_mib
from vramopt.optimizer.oracle import best_in_keys, solve_exhaustive
from vramopt.optimizer.problem import build_problem
from vramopt.types import SearchSpace, ServingWorkload, TrainingWorkload
from vramopt.units import BYTES_PER_MIB

KEYS_PER_REQUEST = 100
SEED = 20_240_611

REQUESTS = {
    "train 8b h100 x8": (TrainingWorkload(model="llama-3.1-8b", seq_len=4096, global_batch=64), SearchSpace(gpus=("h100",), max_gpus=8)),
    "train 70b b200 x2 (offload)": (TrainingWorkload(model="llama-3.1-70b", seq_len=4096, global_batch=16), SearchSpace(gpus=("b200",), max_gpus=2)),
    "train 13b a100-40gb+l40s x4": (TrainingWorkload(model="llama-2-13b", seq_len=2048, global_batch=32), SearchSpace(gpus=("a100-40gb", "l40s"), max_gpus=4)),
    "train mixtral h200 x16": (TrainingWorkload(model="mixtral-8x7b", seq_len=4096, global_batch=128), SearchSpace(gpus=("h200",), max_gpus=16)),
    "finetune 7b rtx4090 x1": (TrainingWorkload(model="llama-2-7b", seq_len=1024, global_batch=8, kind="finetune"), SearchSpace(gpus=("rtx4090",), max_gpus=1)),
    "lora 70b h100 x8": (TrainingWorkload(model="llama-3.1-70b", seq_len=4096, global_batch=32, kind="lora"), SearchSpace(gpus=("h100",), max_gpus=8)),
    "qlora 8b rtx4090 x1": (TrainingWorkload(model="llama-3.1-8b", seq_len=2048, global_batch=16, kind="qlora"), SearchSpace(gpus=("rtx4090",), max_gpus=1)),
    "finetune 8b h100 x8 (optimizer formats)": (
        TrainingWorkload(model="llama-3.1-8b", seq_len=4096, global_batch=64, kind="finetune"),
        SearchSpace(gpus=("h100",), max_gpus=8, allow={"optimizer": ("adam", "adam8bit", "adafactor", "sgd")}),
    ),
    "infer 70b h100 x8": (ServingWorkload(model="llama-3.1-70b", context=8192), SearchSpace(gpus=("h100",), max_gpus=8)),
    "infer 8b a100-80gb x2 (MIG)": (ServingWorkload(model="llama-3.1-8b", context=4096), SearchSpace(gpus=("a100-80gb",), max_gpus=2)),
    "infer 13b l40s+h100 x4 per-gpu": (ServingWorkload(model="opt-13b", context=2048, max_latency_ms=50.0), SearchSpace(gpus=("l40s", "h100"), max_gpus=4, objective="per-gpu")),
    "infer mixtral h100 x16 (expert parallel)": (ServingWorkload(model="mixtral-8x7b", context=4096, input_tokens=1000, output_tokens=200),
                                                 SearchSpace(gpus=("h100",), max_gpus=16, objective="per-gpu")),
}


def best_per_key(problem, keys: np.ndarray) -> list[Choice]:
    """Each key's own optimum (keys with no feasible plan are left out)."""
    result = []
    for key in keys:
        choice = best_in_keys(problem, np.array([key]))
        if choice is not None:
            result.append(choice)
    return result



def _sampled_keys(problem, optimum) -> np.ndarray:
    rng = np.random.default_rng(SEED)
    count = problem.key_count
    keys = rng.choice(count, size=min(KEYS_PER_REQUEST, count), replace=False)
    if optimum is not None:
        keys = np.append(keys, optimum.key)
    return np.unique(keys)


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_every_keys_best_table_item_equals_estimate_of_its_plan(name):
    workload, space = REQUESTS[name]
    problem = build_problem(workload, space)
    optimum = solve_exhaustive(problem)
    assert optimum is not None, f"{name}: the request should have a plan"
    choices = best_per_key(problem, _sampled_keys(problem, optimum))
    assert choices, name
    serving = isinstance(workload, ServingWorkload)
    constant = constant_mib(problem)
    for choice in choices:
        key, state, activation = choice.key, choice.state_item, choice.activation_item
        plan = decode_choice(problem, choice)
        estimate = estimate_serving(workload, plan) if serving else estimate_training(workload, plan)
        values = estimate.values
        where = f"{name}: {plan}"
        assert estimate.fits, f"the tables say it fits, estimate says not: {where}"

        # memory, in bytes (separability) and in the tables' MiB
        state_bytes = problem.state.memory_bytes[key, state]
        activation_bytes = problem.activation.memory_bytes[key, activation]
        constant_bytes = problem.constant_bytes[key]
        if serving:
            assert state_bytes == pytest.approx(values["total_bytes"] - values["reserve_bytes"], rel=1e-9), where
            assert constant_bytes == pytest.approx(values["reserve_bytes"], rel=1e-12), where
        else:
            assert state_bytes == pytest.approx(values["weights_bytes"] + values["gradients_bytes"] + values["optimizer_bytes"], rel=1e-9), where
            assert activation_bytes == pytest.approx(values["activations_bytes"], rel=1e-9), where
            assert constant_bytes == pytest.approx(values["logits_bytes"] + values["reserve_bytes"], rel=1e-12), where
        total_mib = estimate.total_bytes / BYTES_PER_MIB
        table_mib = int(constant[key] + problem.state.memory_mib[key, state] + problem.activation.memory_mib[key, activation])
        assert total_mib - 1e-6 <= table_mib < total_mib + 3, (where, table_mib, total_mib)
        assert table_mib <= problem.budget_mib[key] + constant[key], where

        # time: ticks back to seconds, within the rounding of two parts to whole ticks
        ticks = int(problem.state.time_ticks[key, state] + problem.activation.time_ticks[key, activation])
        seconds = 1.0 / estimate.tokens_per_s if serving else values["step_time_s"]
        if not serving:
            assert problem.state.time_s[key, state] == pytest.approx(values["data_parallel_s"] + values["offload_s"] + values["optimizer_step_s"], rel=1e-9, abs=1e-15), where
            assert problem.activation.time_s[key, activation] == pytest.approx(values["compute_s"] + values["tensor_parallel_s"] + values["context_parallel_s"] + values["expert_parallel_s"] + values["pipeline_parallel_s"], rel=1e-9), where
        assert abs(ticks * problem.tick_s - seconds) <= 1.0 * problem.tick_s + 1e-9 * seconds, (where, ticks * problem.tick_s, seconds)


def test_the_requests_cover_offload_and_every_workload():
    # The offload term must be exercised (it was the one a mutation dropped unnoticed).
    kinds = {workload.kind for workload, _ in REQUESTS.values()}
    assert {"train", "finetune", "lora", "qlora", "infer"} <= kinds
    workload, space = REQUESTS["train 70b b200 x2 (offload)"]
    problem = build_problem(workload, space)
    best = best_per_key(problem, np.arange(problem.key_count))
    offloaded = [choice for choice in best if problem.state.values[choice.state_item]["offload"] != "none"]
    assert offloaded, "no key's best plan offloads: the request no longer covers the offload term"
