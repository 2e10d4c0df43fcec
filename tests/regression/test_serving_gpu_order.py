"""Issue 11 item 1: every per-GPU choice comes from that GPU.

The serving state items (KV cache dtype, paged KV, speculative decoding, slots) used to be
built from the first GPU type's domains only, so listing a GPU without fp8 first removed the
fp8 KV cache for every GPU: ``solve --workload infer --model 8b --gpu a100-80gb --gpu h100``
gave 58,367 tokens/s, ``--gpu h100 --gpu a100-80gb`` 117,742. A weight format or precision
named in ``--allow`` that one of several GPU types cannot run was an error instead of that
GPU's rows being left out. Properties: permuting the ``--gpu`` list never changes the
optimum; adding a GPU type never lowers it.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from vramopt.errors import InputError
from vramopt.optimizer.search import solve
from vramopt.types import SearchSpace, ServingWorkload, TrainingWorkload

GPU_TYPES = ("a100-80gb", "a100-40gb", "h100", "l40s", "rtx4090", "b200", "mi300x")
"""Both with and without fp8 (the A100s), with and without MIG, one GPU per node or eight."""

TICK_TOLERANCE = 1e-5
"""Relative: a larger space can have a finer tick (1e-6 of its fastest step), so a
re-solved optimum may differ by a rounding of the time tables, never by more."""


def optimum(workload, gpus, max_gpus, allow=None, engine="cp-sat"):
    """(objective without the final fixed-order tie-break, tokens/s) or None when infeasible."""
    result = solve(workload, SearchSpace(gpus=tuple(gpus), max_gpus=max_gpus, allow=allow or {}), engine=engine, runner_up_count=0)
    if result.estimate is None:
        return None
    return tuple(result.solver.objective_value[:3]), result.estimate.tokens_per_s


def outcome(workload, gpus, max_gpus, allow=None):
    """The optimum, or that the request is refused (the same refusal in every order)."""
    try:
        return optimum(workload, gpus, max_gpus, allow)
    except InputError:
        return "refused"


def test_the_issue_case_serves_fp8_kv_on_the_h100_in_both_orders():
    """issue 11 item 1: a100-80gb first used to give 58,367 tokens/s (bf16 KV cache)."""
    workload = ServingWorkload(model="8b")
    h100_alone = solve(workload, SearchSpace(gpus=("h100",), max_gpus=8)).estimate
    assert h100_alone.plan.kv_cache_dtype == "fp8"
    results = [solve(workload, SearchSpace(gpus=gpus, max_gpus=8)) for gpus in (("a100-80gb", "h100"), ("h100", "a100-80gb"))]
    for result in results:
        assert result.estimate.plan == h100_alone.plan
        assert result.estimate.tokens_per_s == pytest.approx(h100_alone.tokens_per_s, rel=1e-9)
    assert results[0].solver.objective_value[:3] == results[1].solver.objective_value[:3]


def test_allowing_fp8_weights_with_a_gpu_that_lacks_fp8_keeps_the_other_gpus():
    """issue 11 item 1: --allow quantization=bf16,fp8 with an A100 among H100s was an error."""
    workload = ServingWorkload(model="8b")
    mixed = optimum(workload, ("a100-80gb", "h100"), 8, allow={"quantization": ("bf16", "fp8")})
    alone = optimum(workload, ("h100",), 8, allow={"quantization": ("bf16", "fp8")})
    assert mixed == alone
    with pytest.raises(InputError, match="a100-80gb cannot run fp8 weights"):
        optimum(workload, ("a100-80gb",), 8, allow={"quantization": ("bf16", "fp8")})
    with pytest.raises(InputError, match="none of the searched GPUs .* can run fp4"):
        optimum(workload, ("a100-80gb", "h100"), 8, allow={"quantization": ("bf16", "fp4")})


def test_allowing_fp8_training_with_a_gpu_that_lacks_fp8_keeps_the_other_gpus():
    """issue 11 item 1, training builder: --allow precision=bf16,fp8 with an A100 among H100s was an error."""
    workload = TrainingWorkload(model="8b", seq_len=2048, global_batch=16)
    allow = {"precision": ("bf16", "fp8")}
    mixed = optimum(workload, ("a100-80gb", "h100"), 4, allow=allow)
    assert mixed is not None and mixed == optimum(workload, ("h100", "a100-80gb"), 4, allow=allow)
    assert mixed == optimum(workload, ("h100",), 4, allow=allow)
    with pytest.raises(InputError, match="a100-80gb does not support fp8"):
        optimum(workload, ("a100-80gb",), 4, allow=allow)


def test_a_mig_profile_no_searched_gpu_has_is_an_error():
    """issue 11 item 1: a MIG profile is checked against every searched GPU type, not the first."""
    workload = ServingWorkload(model="8b")
    assert optimum(workload, ("l40s", "h100"), 1, allow={"mig_profile": ("none", "1g.10gb")}) is not None
    with pytest.raises(InputError, match="no searched GPU has MIG profile '1g.7gb'"):
        optimum(workload, ("l40s", "h100"), 1, allow={"mig_profile": ("none", "1g.7gb")})


serving_allow = st.sampled_from([
    {},
    {"quantization": ("bf16", "fp8", "int4")},
    {"quantization": ("bf16", "int8")},
    {"kv_cache_dtype": ("bf16", "fp8"), "speculative_decoding": ("false",)},
])


@settings(max_examples=25, deadline=None)
@given(
    gpus=st.lists(st.sampled_from(GPU_TYPES), min_size=2, max_size=3, unique=True).flatmap(
        lambda chosen: st.tuples(st.just(chosen), st.permutations(chosen))),
    model=st.sampled_from(["8b", "7b"]),
    max_gpus=st.sampled_from([1, 2, 4, 8]),
    min_slots=st.sampled_from([1, 64, 600]),
    allow=serving_allow,
)
@example(gpus=(["a100-80gb", "h100"], ["h100", "a100-80gb"]), model="8b", max_gpus=8, min_slots=1, allow={})
def test_permuting_the_gpu_list_never_changes_the_serving_optimum(gpus, model, max_gpus, min_slots, allow):
    """issue 11 item 1: the same GPU types in another order give the same optimum (ticks,
    GPUs, MiB); only the last fixed-order tie-break between exactly equal plans may differ."""
    listed, permuted = gpus
    workload = ServingWorkload(model=model, min_slots=min_slots)
    assert outcome(workload, listed, max_gpus, allow) == outcome(workload, permuted, max_gpus, allow)


@settings(max_examples=25, deadline=None)
@given(
    gpus=st.lists(st.sampled_from(GPU_TYPES), min_size=2, max_size=3, unique=True),
    model=st.sampled_from(["8b", "7b"]),
    max_gpus=st.sampled_from([1, 2, 4, 8]),
    min_slots=st.sampled_from([1, 64, 600]),
    allow=serving_allow,
)
@example(gpus=["a100-80gb", "h100"], model="8b", max_gpus=8, min_slots=1, allow={})
def test_adding_a_gpu_type_never_lowers_the_serving_optimum(gpus, model, max_gpus, min_slots, allow):
    """issue 11 item 1: the GPU types after the first are added one at a time; the best
    tokens/s never falls (within the tick rounding)."""
    workload = ServingWorkload(model=model, min_slots=min_slots)
    best = None
    for count in range(1, len(gpus) + 1):
        try:
            found = optimum(workload, gpus[:count], max_gpus, allow)
        except InputError:
            # Only a smaller list may be refused (e.g. fp8 weights allowed on A100s alone).
            assert best is None
            continue
        if best is not None:
            assert found is not None and found[1] >= best * (1 - TICK_TOLERANCE)
        best = found[1] if found else best


@settings(max_examples=10, deadline=None)
@given(
    gpus=st.lists(st.sampled_from(("a100-80gb", "h100", "l40s", "b200")), min_size=2, max_size=2, unique=True),
    allow=st.sampled_from([{}, {"precision": ("bf16", "fp8")}]),
)
@example(gpus=["a100-80gb", "h100"], allow={"precision": ("bf16", "fp8")})
def test_permuting_the_gpu_list_never_changes_the_training_optimum(gpus, allow):
    """issue 11 item 1, training builder: the same property for a training search."""
    workload = TrainingWorkload(model="8b", seq_len=2048, global_batch=16)
    assert outcome(workload, gpus, 4, allow) == outcome(workload, gpus[::-1], 4, allow)
