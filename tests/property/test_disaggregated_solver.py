"""Disaggregated prefill/decode search (issue 16 item 4): CP-SAT = the exhaustive check on the
same integer tables (the same plan, ties broken by the options' order), under min-gpus and
throughput; and the tables' exact reductions (one decode option per slot-independent group,
the largest fitting slot count) lose nothing against a brute force over every plan of a
small space, each estimated on its own in floating point (vramopt.disaggregated)."""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from vramopt.disaggregated import DisaggregatedPlan, estimate_disaggregated
from vramopt.errors import InputError
from vramopt.optimizer.disaggregated_search import solve_cp_sat, solve_exhaustive, valid_pairs
from vramopt.optimizer.disaggregated_tables import TICK_S, build_disaggregated_tables
from vramopt.types import SearchSpace, ServingWorkload

MODELS = ("llama-3.1-8b", "llama-2-13b", "llama-3.1-70b", "mixtral-8x7b")
GPUS = ("a100-80gb", "h100", "l40s", "h200")


@st.composite
def requests(draw):
    mix = draw(st.booleans())
    samples = tuple(draw(st.lists(st.tuples(st.integers(16, 1500), st.integers(4, 400)), min_size=2, max_size=12))) if mix else None
    workload = ServingWorkload(
        model=draw(st.sampled_from(MODELS)), context=2048,
        input_tokens=None if mix else draw(st.sampled_from((100, 500, 1500))),
        output_tokens=None if mix else draw(st.sampled_from((20, 200, 500))),
        length_samples=samples, rate_per_s=draw(st.sampled_from((0.5, 5.0, 30.0))),
        ttft_p99_ms=draw(st.sampled_from((None, 300.0, 2000.0))), tpot_ms=draw(st.sampled_from((None, 15.0, 50.0))),
    )
    space = SearchSpace(gpus=tuple(draw(st.lists(st.sampled_from(GPUS), min_size=1, max_size=2, unique=True))),
                        max_gpus=draw(st.sampled_from((2, 4, 8, 16, 24))), objective=draw(st.sampled_from(("min-gpus", "throughput"))),
                        workers=1)
    return workload, space


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=40)
@given(requests())
def test_cp_sat_equals_exhaustive_on_the_disaggregated_tables(request):
    workload, space = request
    try:
        tables = build_disaggregated_tables(workload, space)
    except InputError:
        assume(False)
    exhaustive = solve_exhaustive(tables, space.objective)
    cp_sat = solve_cp_sat(tables, space.objective, 60.0, 1)
    assert exhaustive == cp_sat
    if exhaustive is not None:
        # The chosen pair is a valid pair and no valid pair beats it.
        first, second, gpus, capacity = valid_pairs(tables)
        primary, secondary = (gpus, -capacity) if space.objective == "min-gpus" else (-capacity, gpus)
        best = min(zip(primary.tolist(), secondary.tolist()))
        chosen = (exhaustive.gpus, -exhaustive.capacity_tokens_per_s) if space.objective == "min-gpus" \
            else (-exhaustive.capacity_tokens_per_s, exhaustive.gpus)
        assert chosen == best


def _brute_force(workload, gpu: str, max_gpus: int, slots: tuple[int, ...], objective: str):
    """Every plan of the space, each estimated alone, with the tables' rounding per part."""
    best = None
    tensor = (1, 2, 4)
    for tp_p, tp_d in itertools.product(tensor, tensor):
        for prefill_replicas in range(1, max_gpus // tp_p + 1):
            for decode_replicas in range(1, (max_gpus - prefill_replicas * tp_p) // tp_d + 1):
                for kv, paged, speculative, slot_count in itertools.product(("bf16", "fp8"), (True, False), (False, True), slots):
                    plan = DisaggregatedPlan(gpu=gpu, prefill_replicas=prefill_replicas, prefill_tensor_parallel=tp_p,
                                             decode_replicas=decode_replicas, decode_tensor_parallel=tp_d, quantization="bf16",
                                             kv_cache_dtype=kv, paged_kv=paged, decode_slots=slot_count, speculative_decoding=speculative)
                    try:
                        figures = estimate_disaggregated(workload, plan)
                    except InputError:
                        continue  # fp8 KV where the GPU cannot run it
                    prefill, decode = figures["prefill"], figures["decode"]
                    if not (figures["fits"] and figures["sustainable"]):
                        continue
                    if workload.tpot_ms is not None and not figures["tpot_s"] <= workload.tpot_ms / 1e3:
                        continue
                    if workload.ttft_p99_ms is not None:
                        ticks = (math.ceil((prefill["prefill_tail_s"] + prefill["wait_tail_s"]) / TICK_S) + math.ceil(decode["decode_step_s"] / TICK_S)
                                 + math.ceil(prefill["tail_input_tokens"] * figures["transfer_s"] / workload.input_tokens / TICK_S))
                        if ticks > math.floor(workload.ttft_p99_ms / 1e3 / TICK_S + 1e-9):
                            continue
                    capacity = min(math.floor(prefill["capacity_requests_per_s"] * workload.output_tokens),
                                   math.floor(decode["capacity_requests_per_s"] * workload.output_tokens))
                    key = (plan.gpus, -capacity) if objective == "min-gpus" else (-capacity, plan.gpus)
                    best = key if best is None or key < best else best
    return best


def test_the_tables_lose_nothing_against_every_plan_of_a_small_space():
    """issue 16 item 4: the decode side keeps one option per (tp, KV dtype, speculative, D)
    -- the largest fitting slots -- and the optimum over the tables equals the brute force."""
    slots = (4, 32, 128)
    for objective, (rate, ttft, tpot) in itertools.product(("min-gpus", "throughput"), ((4.0, 400.0, 30.0), (12.0, None, 20.0))):
        workload = ServingWorkload(model="llama-3.1-8b", context=2048, input_tokens=600, output_tokens=150, rate_per_s=rate,
                                   ttft_p99_ms=ttft, tpot_ms=tpot)
        space = SearchSpace(gpus=("a100-80gb",), max_gpus=5, objective=objective, workers=1, whole_nodes=False,
                            allow={"slots": tuple(str(value) for value in slots), "quantization": ("bf16",),
                                   "tensor_parallel": ("1", "2", "4")})
        choice = solve_exhaustive(build_disaggregated_tables(workload, space), objective)
        expected = _brute_force(workload, "a100-80gb", 5, slots, objective)
        found = None if choice is None else ((choice.gpus, -choice.capacity_tokens_per_s) if objective == "min-gpus"
                                             else (-choice.capacity_tokens_per_s, choice.gpus))
        assert found == expected, (objective, rate, ttft, tpot)
        assert expected is not None  # the cases are chosen so that a plan exists


def test_more_gpus_never_lose_a_disaggregated_plan():
    """A larger --max-gpus only adds pairs: min-gpus never needs more GPUs, throughput never drops."""
    workload = ServingWorkload(model="llama-3.1-8b", input_tokens=500, output_tokens=200, rate_per_s=10.0, ttft_p99_ms=500.0, tpot_ms=20.0)
    previous = {"min-gpus": None, "throughput": None}
    for max_gpus in (2, 4, 8, 16):
        for objective in previous:
            choice = solve_exhaustive(build_disaggregated_tables(workload, SearchSpace(gpus=("h100",), max_gpus=max_gpus, objective=objective)), objective)
            if choice is None:
                assert previous[objective] is None
                continue
            if previous[objective] is not None:
                if objective == "min-gpus":
                    assert choice.gpus <= previous[objective].gpus
                else:
                    assert choice.capacity_tokens_per_s >= previous[objective].capacity_tokens_per_s
            previous[objective] = choice
    assert all(value is not None for value in previous.values())
    assert np.isfinite(previous["throughput"].capacity_tokens_per_s)
