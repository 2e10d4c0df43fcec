"""CP-SAT = exhaustive on the request-level serving tables (issue 16 item 5): requests of
given lengths (fixed, or a sampled mix) at a rate, a concurrency or saturation, with TTFT/TPOT targets, under every
objective (min-gpus with the request load as its only target included); and more GPUs
never serve the load with a worse optimum."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from vramopt.errors import InputError
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.search import solve
from vramopt.optimizer.oracle import solve_exhaustive
from vramopt.optimizer.solve import solve_cp
from vramopt.types import SearchSpace, ServingWorkload

MODELS = ("llama-3.1-8b", "llama-2-13b", "opt-13b", "mixtral-8x7b", "llama-3.1-70b", "qwen3-30b-a3b")
GPUS = ("a100-40gb", "a100-80gb", "h100", "h200", "l40s", "mi300x")


@st.composite
def request_loads(draw):
    mode = draw(st.sampled_from(("rate", "concurrency", "saturation")))
    mix = draw(st.booleans())
    samples = tuple(draw(st.lists(st.tuples(st.integers(1, 1500), st.integers(1, 500)), min_size=2, max_size=20))) if mix else None
    workload = ServingWorkload(
        model=draw(st.sampled_from(MODELS)),
        context=2048,
        headroom_fraction=draw(st.sampled_from((0.05, 0.1, 0.2))),
        input_tokens=None if mix else draw(st.sampled_from((16, 200, 1000, 1500))),
        output_tokens=None if mix else draw(st.sampled_from((8, 128, 500))),
        length_samples=samples,
        rate_per_s=draw(st.sampled_from((0.5, 4.0, 40.0))) if mode == "rate" else None,
        concurrency=draw(st.sampled_from((1, 32, 512))) if mode == "concurrency" else None,
        ttft_p99_ms=draw(st.sampled_from((None, 200.0, 2000.0))),
        tpot_ms=draw(st.sampled_from((None, 20.0, 60.0))),
    )
    objectives = ("throughput", "per-gpu", "min-gpus") if mode != "saturation" else ("throughput", "per-gpu")
    objective = draw(st.sampled_from(objectives))
    pin_field = draw(st.sampled_from((None, "quantization", "tensor_parallel", "speculative_decoding", "slots", "expert_parallel")))
    pin_values = {"quantization": ("bf16", "fp8", "int4"), "tensor_parallel": ("1", "2", "4"),
                  "speculative_decoding": ("true", "false"), "slots": ("8", "64"), "expert_parallel": ("1", "2", "8")}
    space = SearchSpace(
        gpus=tuple(draw(st.lists(st.sampled_from(GPUS), min_size=1, max_size=2, unique=True))),
        max_gpus=draw(st.sampled_from((1, 2, 4, 8, 16))),
        pin={pin_field: draw(st.sampled_from(pin_values[pin_field]))} if pin_field else {},
        objective=objective,
        workers=1,
    )
    return workload, space


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60)
@given(request_loads())
def test_cp_sat_equals_exhaustive_on_request_serving_tables(request):
    workload, space = request
    try:
        problem = build_problem(workload, space)
    except InputError:
        assume(False)
    outcome = solve_cp(problem, time_limit_s=30.0, workers=1)
    exhaustive = solve_exhaustive(problem)
    event(f"{space.objective}: {'feasible' if exhaustive is not None else 'infeasible'}")
    assert outcome.status in ("optimal", "infeasible")
    if exhaustive is None:
        assert outcome.choice is None
    else:
        assert outcome.choice is not None
        assert outcome.choice.objective == exhaustive.objective
        assert (outcome.choice.key, outcome.choice.state_item, outcome.choice.activation_item) == (
            exhaustive.key, exhaustive.state_item, exhaustive.activation_item,
        )


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=20)
@given(st.sampled_from(("llama-3.1-8b", "llama-3.1-70b")), st.sampled_from((2.0, 10.0, 30.0)), st.sampled_from((4, 8)))
def test_more_gpus_never_need_more_gpus(model, rate, max_gpus):
    """min-gpus: a larger --max-gpus never returns a larger deployment, and a served load
    stays served."""
    workload = ServingWorkload(model=model, input_tokens=500, output_tokens=200, rate_per_s=rate, tpot_ms=80.0)
    small = solve(workload, SearchSpace(gpus=("h100",), max_gpus=max_gpus, objective="min-gpus", workers=1), runner_up_count=0)
    large = solve(workload, SearchSpace(gpus=("h100",), max_gpus=2 * max_gpus, objective="min-gpus", workers=1), runner_up_count=0)
    if small.estimate is not None:
        assert large.estimate is not None and large.estimate.plan.gpus <= small.estimate.plan.gpus


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=80)
@given(st.sampled_from(MODELS), st.sampled_from(("h100", "a100-80gb", "l40s")), st.sampled_from((1, 2, 4, 8)),
       st.sampled_from((1, 2)), st.sampled_from(("bf16", "fp8", "int4")), st.sampled_from((1, 16, 256, 2048)),
       st.sampled_from((16, 1000)), st.sampled_from((8, 500)), st.floats(0.01, 200.0), st.booleans())
def test_a_served_rate_never_exceeds_the_capacity(model, gpu, gpus, pipeline, quantization, slots, prompt, output, rate, speculative):
    """Whatever the plan, a rate it serves is at most its saturation capacity (the served
    throughput n / (output x step(n)) grows with the batch n, largest at saturation)."""
    from vramopt.estimate import estimate_serving
    from vramopt.types import ServingPlan

    workload = ServingWorkload(model=model, context=2048, input_tokens=prompt, output_tokens=output, rate_per_s=rate)
    plan = ServingPlan(gpu=gpu, gpus=gpus, pipeline_parallel=pipeline, quantization=quantization, slots=slots,
                       speculative_decoding=speculative)
    try:
        values = estimate_serving(workload, plan).values
    except InputError:
        assume(False)
    if values["sustainable"]:
        assert rate <= values["capacity_requests_per_s"] * (1 + 1e-9)
