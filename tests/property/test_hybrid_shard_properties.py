"""Property tests of hybrid sharding's field (issue 14 item 4): CP-SAT equals brute force on
multi-node requests whose default domain holds data_parallel_shard (0, 4, 8), dense and
mixture-of-experts models, with ZeRO pinned or free and the field allowed or pinned; the chosen
plan's shard divides dp, needs ZeRO >= 1 and keeps its headroom in floating point."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.property.test_solver_properties import _cp_sat_and_exhaustive, _problem
from vramopt.estimate import estimate_training
from vramopt.optimizer.decode import decode_choice
from vramopt.types import SearchSpace, TrainingWorkload


@st.composite
def hybrid_requests(draw):
    workload = TrainingWorkload(
        model=draw(st.sampled_from(("llama-3.1-8b", "llama-2-13b", "mixtral-8x7b", "llama-3.1-70b"))),
        seq_len=draw(st.sampled_from((2048, 4096))),
        global_batch=draw(st.sampled_from((64, 256, 1024))),
        headroom_fraction=draw(st.sampled_from((0.0, 0.1))),
        kind=draw(st.sampled_from(("train", "train", "finetune"))),
    )
    pin, allow = {}, {}
    zero = draw(st.sampled_from((None, "1", "2", "3")))
    if zero:
        pin["zero_stage"] = zero
    shard = draw(st.sampled_from((None, None, "allow", "4", "8")))
    if shard == "allow":
        allow["data_parallel_shard"] = ("0", "4", "8", "16")
    elif shard:
        pin["data_parallel_shard"] = shard
    objective = draw(st.sampled_from(("throughput", "per-gpu", "min-gpus")))
    space = SearchSpace(
        gpus=(draw(st.sampled_from(("h100", "b200", "a100-80gb", "mi300x"))),),
        max_gpus=draw(st.sampled_from((16, 32, 64))),
        pin=pin, allow=allow, objective=objective,
        min_tokens_per_s=20_000.0 if objective == "min-gpus" else None,
        workers=1,
    )
    return workload, space


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much], max_examples=40)
@given(hybrid_requests())
def test_cp_sat_equals_exhaustive_with_hybrid_sharding(request):
    """issue 14 item 4: the data_parallel_shard state field keeps CP-SAT exact against brute force."""
    workload, space = request
    problem = _problem(workload, space)
    exhaustive = _cp_sat_and_exhaustive(problem)
    if exhaustive is None:
        return
    plan = decode_choice(problem, exhaustive)
    data_parallel = plan.gpus // (plan.tensor_parallel * plan.context_parallel * plan.pipeline_parallel)
    event(f"data_parallel_shard={plan.data_parallel_shard}")
    if plan.data_parallel_shard:
        assert data_parallel % plan.data_parallel_shard == 0 and plan.data_parallel_shard < data_parallel
        assert plan.zero_stage >= 1
    memory = estimate_training(workload, plan).memory_dict()
    assert memory["fits"] and memory["total_bytes"] <= memory["capacity_bytes"] * (1 - workload.headroom_fraction)
