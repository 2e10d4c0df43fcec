"""Adversarial rounding: the solver's integers (MiB, rounded against the plan) never let a
plan through that breaks the headroom rule or the host RAM / NVMe capacity in floating
point, and they lose less than ROUNDING_LOSS_BYTES.

The headroom fraction (or a node's host RAM / NVMe) is chosen so that the limit lands a few
bytes or MiB on either side of a plan's exact floating-point need:
``headroom_fraction = 1 - (total + delta) / capacity``. Then:
- every plan that leaves ``solve`` fits in floating point (optimizer/search.py re-verifies
  and would raise; here the float rule is checked independently);
- a plan whose float slack is at least ROUNDING_LOSS_BYTES is never lost to rounding;
- on the tables, an integer fit implies a float fit for every candidate (conservative).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from vramopt.costs.coefficients import coefficient
from vramopt.errors import InputError
from vramopt.estimate import estimate_serving, estimate_training
from vramopt.optimizer.decode import decode_choice
from vramopt.optimizer.oracle import Choice
from vramopt.optimizer.pack import solve_pack
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.search import solve
from vramopt.cluster import parse_cluster, parse_jobs
from vramopt.types import SearchSpace, ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload
from vramopt.units import BYTES_PER_MIB

ROUNDING_LOSS_BYTES = 4 * BYTES_PER_MIB
"""Most the integer model can lose: state and activation rounded up (< 1 MiB each), the
key's constant rounded up (< 1 MiB), the budget rounded down (< 1 MiB)."""

DELTAS_BYTES = (-3 * BYTES_PER_MIB, -BYTES_PER_MIB, -4096, -1, 0, 1, 4096, BYTES_PER_MIB, 3 * BYTES_PER_MIB,
                ROUNDING_LOSS_BYTES, ROUNDING_LOSS_BYTES + 1)
"""Where the limit is put relative to a plan's exact need (bytes of float slack)."""

TRAINING_WORKLOAD = TrainingWorkload(model="8b", seq_len=2048, global_batch=64)
TRAINING_PLANS = (
    TrainingPlan(gpu="h100", gpus=4, micro_batch=1, checkpointing="every:1", zero_stage=3),
    TrainingPlan(gpu="b200", gpus=2, zero_stage=2, micro_batch=2, checkpointing="selective"),
    TrainingPlan(gpu="a100-80gb", gpus=4, tensor_parallel=2, pipeline_parallel=2, sequence_parallel=True, zero_stage=1,
                 checkpointing="every:2", micro_batch=1, precision="bf16"),
    TrainingPlan(gpu="h100", gpus=2, zero_stage=1, offload="cpu", micro_batch=4, checkpointing="every:4"),
    TrainingPlan(gpu="h100", gpus=1, zero_stage=3, offload="nvme", micro_batch=1, checkpointing="every:1"),
)
SERVING_WORKLOAD = ServingWorkload(model="8b", context=4096)
SERVING_PLANS = (
    ServingPlan(gpu="h100", gpus=1, slots=16),
    ServingPlan(gpu="a100-80gb", gpus=2, tensor_parallel=2, quantization="int8", slots=32, paged_kv=False),
    ServingPlan(gpu="h100", gpus=1, mig_profile="3g.40gb", quantization="int4", slots=8),
)


def headroom_for(total_bytes: float, capacity_bytes: float, delta_bytes: float) -> float | None:
    """The headroom fraction that puts the allowed memory at ``total + delta``."""
    headroom = 1.0 - (total_bytes + delta_bytes) / capacity_bytes
    return headroom if 0.0 <= headroom < 1.0 else None


def pins_of(plan) -> dict[str, str]:
    fields = plan.__slots__
    return {name: str(getattr(plan, name)).lower() if isinstance(getattr(plan, name), bool) else str(getattr(plan, name))
            for name in fields}


def float_slack(estimate, headroom: float) -> float:
    return estimate.values["capacity_bytes"] * (1.0 - headroom) - estimate.values["total_bytes"]


def check_pinned_plan_near_its_limit(workload, plan, evaluate, engine: str) -> list[tuple[float, bool]]:
    """Solve with every field of ``plan`` pinned and the limit at ``need + delta``."""
    reference = evaluate(workload, plan)
    seen = []
    for delta in DELTAS_BYTES:
        headroom = headroom_for(reference.values["total_bytes"], reference.values["capacity_bytes"], delta)
        if headroom is None:
            continue
        near = type(workload)(**{**{name: getattr(workload, name) for name in workload.__slots__}, "headroom_fraction": headroom})
        slack = float_slack(evaluate(near, plan), headroom)
        space = SearchSpace(gpus=(plan.gpu,), max_gpus=plan.gpus, whole_nodes=False, pin=pins_of(plan), time_limit_s=2.0, workers=1)
        result = solve(near, space, engine=engine)
        if result.estimate is not None:
            assert result.estimate.plan == evaluate(near, plan).plan
            assert result.estimate.fits, (delta, slack)
            assert float_slack(result.estimate, headroom) >= 0.0, (delta, slack)
        else:
            assert slack < ROUNDING_LOSS_BYTES, f"lost to rounding: float slack {slack} bytes (delta {delta})"
            assert result.solver.status == "infeasible"
        if slack < 0:
            assert result.estimate is None, f"a plan {-slack} bytes over its limit was returned"
        seen.append((slack, result.estimate is not None))
    return seen


@pytest.mark.parametrize("engine", ["cp-sat", "exhaustive"])
@pytest.mark.parametrize("plan", TRAINING_PLANS, ids=lambda plan: f"{plan.gpus}x{plan.gpu}-z{plan.zero_stage}-{plan.offload}")
def test_training_plan_at_its_headroom_limit(plan, engine):
    seen = check_pinned_plan_near_its_limit(TRAINING_WORKLOAD, plan, estimate_training, engine)
    assert any(found for _, found in seen) and any(not found for _, found in seen)


@pytest.mark.parametrize("engine", ["cp-sat", "exhaustive"])
@pytest.mark.parametrize("plan", SERVING_PLANS, ids=lambda plan: f"{plan.gpus}x{plan.gpu}-{plan.quantization}-{plan.mig_profile}")
def test_serving_plan_at_its_headroom_limit(plan, engine):
    seen = check_pinned_plan_near_its_limit(SERVING_WORKLOAD, plan, estimate_serving, engine)
    assert any(found for _, found in seen) and any(not found for _, found in seen)


def test_free_search_with_the_best_plan_at_its_limit():
    """Unpinned: put the limit bytes around the unconstrained optimum's need; whatever the
    solver returns instead must still fit in floating point."""
    space = SearchSpace(gpus=("h100",), max_gpus=4, time_limit_s=5.0, workers=2)
    best = solve(TRAINING_WORKLOAD, space).estimate
    for delta in DELTAS_BYTES:
        headroom = headroom_for(best.values["total_bytes"], best.values["capacity_bytes"], delta)
        near = TrainingWorkload(model="8b", seq_len=2048, global_batch=64, headroom_fraction=headroom)
        for engine in ("cp-sat", "exhaustive"):
            result = solve(near, space, engine=engine)
            assert result.estimate is not None
            assert float_slack(result.estimate, headroom) >= 0.0
            if delta >= ROUNDING_LOSS_BYTES:
                assert result.estimate.plan == best.plan


# ---------------------------------------------------------------------------------------
# The tables themselves: integer fit implies float fit, for every candidate


def table_check(problem) -> tuple[int, int]:
    """(candidates that fit in integers, candidates that fit in float); asserts the rule."""
    state, activation = problem.state, problem.activation
    valid = state.valid[:, :, None] & activation.valid[:, None, :]
    integer_memory = state.memory_mib[:, :, None] + activation.memory_mib[:, None, :]
    integer_fit = valid & (integer_memory <= problem.budget_mib[:, None, None])
    float_total = state.memory_bytes[:, :, None] + activation.memory_bytes[:, None, :] + problem.constant_bytes[:, None, None]
    allowed = (problem.capacity_bytes * (1.0 - problem.workload.headroom_fraction))[:, None, None]
    float_fit = valid & (float_total <= allowed)
    broken = integer_fit & ~float_fit
    assert not broken.any(), f"{int(broken.sum())} candidates fit in integers but not in floating point"
    lost = valid & ~integer_fit & (float_total <= allowed - ROUNDING_LOSS_BYTES)
    assert not lost.any(), f"{int(lost.sum())} candidates with >= 4 MiB of float slack do not fit in integers"
    return int(integer_fit.sum()), int(float_fit.sum())


def boundary_headrooms(problem, count: int, seed: int) -> list[float]:
    """Headroom fractions that put some candidates' limits within bytes of their needs."""
    rng = np.random.default_rng(seed)
    state, activation = problem.state, problem.activation
    keys, states, activations = np.nonzero(state.valid[:, :, None] & activation.valid[:, None, :])
    headrooms = []
    for index in rng.choice(len(keys), size=min(count, len(keys)), replace=False):
        key, state_item, activation_item = keys[index], states[index], activations[index]
        total = state.memory_bytes[key, state_item] + activation.memory_bytes[key, activation_item] + problem.constant_bytes[key]
        delta = float(rng.choice(DELTAS_BYTES))
        # Also limits on a MiB boundary (+-1 byte) just above the need: the budget's floor.
        boundary = np.ceil(total / BYTES_PER_MIB) * BYTES_PER_MIB + float(rng.choice([-1.0, 0.0, 1.0]))
        for limit in (total + delta, boundary):
            headroom = headroom_for(limit, float(problem.capacity_bytes[key]), 0.0)
            if headroom is not None:
                headrooms.append(headroom)
    return headrooms


@pytest.mark.parametrize("workload, space", [
    (TrainingWorkload(model="8b", seq_len=2048, global_batch=64), SearchSpace(gpus=("h100", "a100-40gb"), max_gpus=8)),
    (TrainingWorkload(model="70b", seq_len=4096, global_batch=256, kind="lora"), SearchSpace(gpus=("b200",), max_gpus=8)),
    (ServingWorkload(model="8b", context=8192), SearchSpace(gpus=("h100", "a100-80gb"), max_gpus=4, objective="per-gpu")),
])
def test_integer_fit_implies_float_fit_on_every_candidate(workload, space):
    problem = build_problem(workload, space)
    fitting = 0
    for headroom in boundary_headrooms(problem, 12, seed=7):
        near = type(workload)(**{**{name: getattr(workload, name) for name in workload.__slots__}, "headroom_fraction": headroom})
        integer_fits, float_fits = table_check(build_problem(near, space))
        assert integer_fits <= float_fits
        fitting += integer_fits
    assert fitting > 0


def test_table_totals_are_the_estimates_totals():
    """The float need the tables check is the one ``estimate`` reports (same formulas)."""
    problem = build_problem(TRAINING_WORKLOAD, SearchSpace(gpus=("h100",), max_gpus=8))
    rng = np.random.default_rng(3)
    keys, states, activations = np.nonzero(problem.state.valid[:, :, None] & problem.activation.valid[:, None, :])
    for index in rng.choice(len(keys), size=40, replace=False):
        key, state_item, activation_item = int(keys[index]), int(states[index]), int(activations[index])
        plan = decode_choice(problem, Choice(key, state_item, activation_item, ()))
        table_total = (problem.state.memory_bytes[key, state_item] + problem.activation.memory_bytes[key, activation_item]
                       + problem.constant_bytes[key])
        assert estimate_training(TRAINING_WORKLOAD, plan).total_bytes == pytest.approx(table_total, rel=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(
    gpus=st.sampled_from([2, 4, 8]),
    zero_stage=st.integers(1, 3),
    micro_batch=st.sampled_from([1, 2, 4]),
    checkpointing=st.sampled_from(["none", "selective", "every:1", "every:2"]),
    delta=st.integers(-2 * BYTES_PER_MIB, 6 * BYTES_PER_MIB),
)
def test_random_pinned_plan_at_a_random_distance_from_its_limit(gpus, zero_stage, micro_batch, checkpointing, delta):
    plan = TrainingPlan(gpu="h100", gpus=gpus, zero_stage=zero_stage, micro_batch=micro_batch, checkpointing=checkpointing)
    try:
        reference = estimate_training(TRAINING_WORKLOAD, plan)
    except InputError:
        assume(False)
    headroom = headroom_for(reference.values["total_bytes"], reference.values["capacity_bytes"], delta)
    assume(headroom is not None)
    near = TrainingWorkload(model="8b", seq_len=2048, global_batch=64, headroom_fraction=headroom)
    slack = float_slack(estimate_training(near, plan), headroom)
    result = solve(near, SearchSpace(gpus=("h100",), max_gpus=gpus, whole_nodes=False, pin=pins_of(plan), time_limit_s=2.0, workers=1),
                   engine="exhaustive")
    if result.estimate is not None:
        assert float_slack(result.estimate, headroom) >= 0.0
    else:
        assert slack < ROUNDING_LOSS_BYTES


# ---------------------------------------------------------------------------------------
# Host RAM and NVMe: the solver's rule is the float rule; pack's per-node sums are integers


@pytest.mark.parametrize("offload, zero_stage", [("cpu", 1), ("cpu", 3), ("nvme", 3)])
def test_offloaded_plans_fit_host_ram_and_nvme_in_floating_point(offload, zero_stage):
    for model, gpu, max_gpus in itertools.product(("8b", "70b"), ("h100", "rtx4090"), (1, 8)):
        workload = TrainingWorkload(model=model, seq_len=2048, global_batch=64)
        space = SearchSpace(gpus=(gpu,), max_gpus=max_gpus, pin={"offload": offload, "zero_stage": str(zero_stage)},
                            time_limit_s=5.0, workers=1)
        try:
            problem = build_problem(workload, space)
        except InputError:
            continue
        # Every state item the tables call valid fits host RAM and NVMe in floating point.
        keys, items = np.nonzero(problem.state.valid)
        for index in range(0, len(keys), max(1, len(keys) // 25)):
            choice = Choice(int(keys[index]), int(items[index]), int(np.flatnonzero(problem.activation.valid[keys[index]])[0]), ())
            estimate = estimate_training(workload, decode_choice(problem, choice))
            assert estimate.values["fits_host"] and estimate.values["fits_nvme"]
        result = solve(workload, space)
        if result.estimate is not None:
            host_limit = load_node_limit(gpu, "host")
            nvme_limit = load_node_limit(gpu, "nvme")
            assert result.estimate.values["host_bytes_per_node"] <= host_limit
            assert result.estimate.values["nvme_bytes_per_node"] <= nvme_limit


def load_node_limit(gpu_name: str, what: str) -> float:
    from vramopt.hardware import load_gpu

    node = load_gpu(gpu_name).node
    if what == "host":
        return node.host_ram_bytes * coefficient("host_ram_usable_fraction")
    return node.nvme_capacity_bytes * coefficient("nvme_usable_fraction")


@pytest.mark.parametrize("offload, zero_stage, key, fraction", [
    ("cpu", 1, "host_ram_bytes", "host_ram_usable_fraction"),
    ("nvme", 3, "nvme_bytes", "nvme_usable_fraction"),
])
def test_pack_node_capacity_at_the_offloaded_need(offload, zero_stage, key, fraction):
    """A node whose usable host RAM (NVMe) is bytes around the job's offloaded need: the job
    is admitted only when the need fits in floating point, and never lost to rounding by
    more than 2 MiB (the need rounded up, the capacity rounded down)."""
    jobs = parse_jobs([{"id": "offloaded", "model": "8b", "max_gpus": 1, "global_batch": 8, "seq_len": 2048,
                        "pin": {"offload": offload, "zero_stage": str(zero_stage)}}])
    roomy = parse_cluster({"nodes": [{"name": "n", "gpu": "h100", "gpus": 1}]})
    response = solve_pack(jobs, roomy, time_limit_s=5.0, workers=1)
    placement = response["placements"][0]
    assert placement["admitted"], placement["reason"]
    need = placement["memory"]["host_bytes_per_node" if offload == "cpu" else "nvme_bytes_per_node"]
    assert need > 0
    outcomes = []
    for delta in DELTAS_BYTES:
        capacity = (need + delta) / coefficient(fraction)
        nodes = parse_cluster({"nodes": [{"name": "n", "gpu": "h100", "gpus": 1, key: capacity}]})
        usable = nodes[0].host_ram_bytes * coefficient(fraction) if key == "host_ram_bytes" else nodes[0].nvme_bytes * coefficient(fraction)
        admitted = solve_pack(jobs, nodes, time_limit_s=5.0, workers=1)["placements"][0]["admitted"]
        if admitted:
            assert need <= usable, f"admitted {need - usable} bytes over the node's usable {key}"
        else:
            assert usable - need < 2 * BYTES_PER_MIB, f"lost to rounding: {usable - need} bytes of slack"
        outcomes.append(admitted)
    assert any(outcomes) and not all(outcomes)
