"""Property tests of the search (hypothesis): CP-SAT equals brute force, plans keep their
headroom in floating point, more GPUs or more memory never hurt, answers are deterministic.

The example count comes from the hypothesis profile (tests/conftest.py): 200 in CI, more
with HYPOTHESIS_PROFILE=long (benchmarks run the larger sweep).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from vramopt.errors import InputError
from vramopt.estimate import estimate_serving, estimate_training
from vramopt.optimizer.decode import decode_choice
from vramopt.optimizer.oracle import solve_exhaustive
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.search import solve_training
from vramopt.optimizer.solve import solve_cp
from vramopt.types import SearchSpace, ServingWorkload, TrainingWorkload

MODELS = ("llama-2-7b", "llama-3.1-8b", "llama-2-13b", "opt-13b", "mixtral-8x7b", "llama-3.1-70b", "gpt3-175b")
GPUS = ("a100-40gb", "a100-80gb", "h100", "h200", "b200", "l40s", "mi300x", "rtx4090")
PIN_CHOICES = {
    "zero_stage": ("0", "1", "2", "3"),
    "offload": ("none", "cpu", "nvme"),
    "checkpointing": ("none", "selective", "every:1", "every:2", "every:4"),
    "precision": ("bf16", "fp8", "fp16"),
    "flash_attention": ("true", "false"),
    "tensor_parallel": ("1", "2", "4", "8"),
    "micro_batch": ("1", "2", "4"),
    "context_parallel": ("1", "2", "4"),
    "optimizer": ("adam", "adam8bit", "adafactor", "sgd"),
    "data_parallel_shard": ("0", "2", "4", "8"),
}


SERVING_PIN_CHOICES = {
    "quantization": ("bf16", "fp8", "int4"),
    "kv_cache_dtype": ("bf16", "fp8"),
    "paged_kv": ("true", "false"),
    "speculative_decoding": ("true", "false"),
    "tensor_parallel": ("1", "2", "4"),
    "mig_profile": ("none", "1g.10gb", "3g.40gb", "2g.20gb"),
    "slots": ("1", "8", "64"),
}


@st.composite
def requests(draw):
    kind = draw(st.sampled_from(("train", "train", "finetune", "lora", "qlora", "infer", "infer")))
    headroom = draw(st.sampled_from((0.0, 0.05, 0.1, 0.2, 0.3)))
    if kind == "infer":
        workload = ServingWorkload(
            model=draw(st.sampled_from(MODELS)),
            context=draw(st.sampled_from((1024, 2048, 4096))),
            headroom_fraction=headroom,
            min_slots=draw(st.sampled_from((1, 1, 16, 256))),
            max_latency_ms=draw(st.sampled_from((None, None, 10.0, 50.0))),
        )
        choices = SERVING_PIN_CHOICES
    else:
        workload = TrainingWorkload(
            model=draw(st.sampled_from(MODELS)),
            seq_len=draw(st.sampled_from((1024, 2048, 4096))),
            global_batch=draw(st.sampled_from((8, 16, 32, 64, 256))),
            headroom_fraction=headroom,
            kind=kind,
            lora_rank=draw(st.sampled_from((8, 64))),
        )
        choices = PIN_CHOICES
    pins = draw(st.dictionaries(st.sampled_from(sorted(choices)), st.none(), max_size=2))
    pin = {field: draw(st.sampled_from(choices[field])) for field in pins}
    forbid_field = draw(st.sampled_from((None,) + tuple(sorted(choices))))
    forbid = {}
    if forbid_field and forbid_field not in pin:
        forbid = {forbid_field: (draw(st.sampled_from(choices[forbid_field])),)}
    objective = draw(st.sampled_from(("throughput", "per-gpu", "min-gpus")))
    space = SearchSpace(
        gpus=tuple(draw(st.lists(st.sampled_from(GPUS), min_size=1, max_size=2, unique=True))),
        max_gpus=draw(st.sampled_from((1, 2, 4, 8, 16, 32))),
        pin=pin,
        forbid=forbid,
        objective=objective,
        min_tokens_per_s=draw(st.sampled_from((500.0, 5_000.0, 50_000.0))) if objective == "min-gpus" else None,
        workers=1,
    )
    return workload, space


def _problem(workload, space):
    try:
        return build_problem(workload, space)
    except InputError:
        assume(False)


def _cp_sat_and_exhaustive(problem, time_limit_s: float = 30.0):
    """Both engines on one problem, checked to agree: the same status (optimal or proved
    infeasible), the same lexicographic integer objective and the same plan (the tie-break is
    total). Returns the exhaustive choice (None when infeasible)."""
    outcome = solve_cp(problem, time_limit_s=time_limit_s, workers=1)
    exhaustive = solve_exhaustive(problem)
    assert outcome.status in ("optimal", "infeasible")
    if exhaustive is None:
        assert outcome.choice is None
        return None
    assert outcome.choice is not None and outcome.choice.objective == exhaustive.objective
    assert (outcome.choice.key, outcome.choice.state_item, outcome.choice.activation_item) == (
        exhaustive.key, exhaustive.state_item, exhaustive.activation_item,
    )
    return exhaustive


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_cp_sat_optimum_equals_exhaustive_optimum(request):
    workload, space = request
    problem = _problem(workload, space)
    exhaustive = _cp_sat_and_exhaustive(problem)
    event(f"{workload.kind}: {'feasible' if exhaustive is not None else 'infeasible'}")


LONG_CONTEXT_MODELS = ("llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b")


@st.composite
def long_context_requests(draw):
    """Sequences above 8K, where context parallelism is in the default domain (issue 12 item 4)."""
    workload = TrainingWorkload(
        model=draw(st.sampled_from(LONG_CONTEXT_MODELS)),
        seq_len=draw(st.sampled_from((16384, 32768, 24576))),
        global_batch=draw(st.sampled_from((4, 8, 16, 64))),
        headroom_fraction=draw(st.sampled_from((0.0, 0.1, 0.2))),
    )
    pin_field = draw(st.sampled_from((None, "context_parallel", "tensor_parallel", "zero_stage", "checkpointing")))
    pin = {pin_field: draw(st.sampled_from(PIN_CHOICES[pin_field]))} if pin_field else {}
    forbid = {"context_parallel": ("1",)} if draw(st.booleans()) and pin_field != "context_parallel" else {}
    objective = draw(st.sampled_from(("throughput", "per-gpu", "min-gpus")))
    space = SearchSpace(
        gpus=(draw(st.sampled_from(("h100", "b200", "a100-80gb", "mi300x"))),),
        max_gpus=draw(st.sampled_from((2, 4, 8, 16, 32))),
        pin=pin,
        forbid=forbid,
        objective=objective,
        min_tokens_per_s=draw(st.sampled_from((500.0, 5_000.0))) if objective == "min-gpus" else None,
        workers=1,
    )
    return workload, space


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60)
@given(long_context_requests())
def test_cp_sat_equals_exhaustive_with_context_parallelism(request):
    """issue 12 item 4: the context_parallel key field keeps CP-SAT exact against brute force."""
    workload, space = request
    problem = _problem(workload, space)
    exhaustive = _cp_sat_and_exhaustive(problem)
    event("feasible" if exhaustive is not None else "infeasible")
    if exhaustive is None:
        return
    event(f"chosen cp={int(problem.keys['context_parallel'][exhaustive.key])}")
    plan = decode_choice(problem, exhaustive)
    estimate = estimate_training(workload, plan)
    memory = estimate.memory_dict()
    assert memory["fits"] and memory["fits_host"] and memory["fits_nvme"]
    assert memory["total_bytes"] <= memory["capacity_bytes"] * (1 - workload.headroom_fraction)


@st.composite
def uneven_stage_requests(draw):
    """Layer counts no power-of-two pipeline divides: DeepSeek-V3's 61 (prime) and Llama 3
    405B's 126, so the pipeline plans in the space all have uneven first/last stages."""
    workload = TrainingWorkload(
        model=draw(st.sampled_from(("deepseek-v3", "llama-3.1-405b"))),
        seq_len=draw(st.sampled_from((2048, 4096))),
        global_batch=draw(st.sampled_from((16, 64))),
        headroom_fraction=draw(st.sampled_from((0.0, 0.1))),
    )
    pin = {"tensor_parallel": draw(st.sampled_from(("4", "8")))}
    pin_field = draw(st.sampled_from((None, "first_stage_layers", "last_stage_layers", "checkpointing", "zero_stage")))
    if pin_field in ("first_stage_layers", "last_stage_layers"):
        pin[pin_field] = draw(st.sampled_from(("0", "2", "3", "7")))
    elif pin_field:
        pin[pin_field] = draw(st.sampled_from(PIN_CHOICES[pin_field]))
    objective = draw(st.sampled_from(("throughput", "per-gpu")))
    space = SearchSpace(
        gpus=(draw(st.sampled_from(("h100", "b200", "h200"))),),
        max_gpus=draw(st.sampled_from((16, 32, 64))),
        pin=pin,
        objective=objective,
        workers=1,
    )
    return workload, space


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=20)
@given(uneven_stage_requests())
def test_cp_sat_equals_exhaustive_with_uneven_pipeline_stages(request):
    """issue 14 item 3: the first/last stage layer fields keep CP-SAT exact against brute force."""
    workload, space = request
    problem = _problem(workload, space)
    exhaustive = _cp_sat_and_exhaustive(problem, time_limit_s=60.0)
    if exhaustive is None:
        return
    keys = problem.keys
    event(f"chosen pp={int(keys['pipeline_parallel'][exhaustive.key])} uneven="
          f"{bool(keys['first_stage_layers'][exhaustive.key] or keys['last_stage_layers'][exhaustive.key])}")
    estimate = estimate_training(workload, decode_choice(problem, exhaustive))
    memory = estimate.memory_dict()
    assert memory["fits"] and memory["total_bytes"] <= memory["capacity_bytes"] * (1 - workload.headroom_fraction)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_every_returned_plan_keeps_headroom_in_floating_point(request):
    workload, space = request
    problem = _problem(workload, space)
    choice = solve_exhaustive(problem)
    assume(choice is not None)
    plan = decode_choice(problem, choice)
    if isinstance(workload, ServingWorkload):
        estimate = estimate_serving(workload, plan)
        memory = estimate.memory_dict()
        assert memory["fits"]
        if workload.max_latency_ms is not None:
            assert estimate.values["latency_per_token_s"] * 1e3 <= workload.max_latency_ms
        assert estimate.values["concurrent_slots"] >= workload.min_slots
    else:
        estimate = estimate_training(workload, plan)
        memory = estimate.memory_dict()
        assert memory["fits"] and memory["fits_host"] and memory["fits_nvme"]
    assert memory["total_bytes"] <= memory["capacity_bytes"] * (1 - workload.headroom_fraction)


def _best_step_time(workload, space):
    try:
        result = solve_training(workload, space, runner_up_count=0)
    except InputError:
        return None
    return result.estimate.values["step_time_s"] if result.estimate else math.inf


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60)
@given(
    st.sampled_from(MODELS),
    st.sampled_from(("a100-80gb", "h100", "b200")),
    st.sampled_from((1, 2, 4, 8, 16)),
    st.sampled_from((16, 64, 256)),
)
def test_more_gpus_never_lower_the_optimum(model, gpu, max_gpus, global_batch):
    workload = TrainingWorkload(model=model, seq_len=2048, global_batch=global_batch)
    smaller = _best_step_time(workload, SearchSpace(gpus=(gpu,), max_gpus=max_gpus, workers=1))
    larger = _best_step_time(workload, SearchSpace(gpus=(gpu,), max_gpus=2 * max_gpus, workers=1))
    assume(smaller is not None and larger is not None)
    # Step ticks are rounded to a millionth of the best step of each space.
    assert larger <= smaller * (1 + 2e-6)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=20)
@given(
    st.sampled_from(LONG_CONTEXT_MODELS),
    st.sampled_from(("h100", "b200")),
    st.sampled_from((2, 4, 8, 16)),
    st.sampled_from((16384, 32768)),
)
def test_more_gpus_never_lower_the_optimum_with_context_parallelism(model, gpu, max_gpus, seq_len):
    """issue 12 item 4: with cp in the default domain, a larger GPU budget only adds layouts."""
    workload = TrainingWorkload(model=model, seq_len=seq_len, global_batch=16)
    smaller = _best_step_time(workload, SearchSpace(gpus=(gpu,), max_gpus=max_gpus, workers=1))
    larger = _best_step_time(workload, SearchSpace(gpus=(gpu,), max_gpus=2 * max_gpus, workers=1))
    assume(smaller is not None and larger is not None)
    assert larger <= smaller * (1 + 2e-6)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=40)
@given(st.sampled_from(MODELS), st.sampled_from((("h100", "h200"), ("b200", "b200-192gb"))), st.sampled_from((1, 2, 4, 8)))
def test_a_larger_gpu_never_lowers_the_optimum(model, pair, max_gpus):
    smaller_gpu, larger_gpu = pair
    workload = TrainingWorkload(model=model, seq_len=2048, global_batch=64)
    smaller = _best_step_time(workload, SearchSpace(gpus=(smaller_gpu,), max_gpus=max_gpus, workers=1))
    larger = _best_step_time(workload, SearchSpace(gpus=(larger_gpu,), max_gpus=max_gpus, workers=1))
    assume(smaller is not None and larger is not None)
    assert larger <= smaller * (1 + 2e-6)


def _without_timing(result) -> dict:
    data = result.to_dict()
    data["solver"].pop("wall_time_s")
    return data


@pytest.mark.parametrize(
    "workload,max_gpus",
    [
        (TrainingWorkload(model="70b"), 8),
        (TrainingWorkload(model="2t"), 16),
        (TrainingWorkload(model="8b"), 4),
        (TrainingWorkload(model="405b"), 64),
        (TrainingWorkload(model="70b", kind="qlora", seq_len=2048, global_batch=16), 2),
        (ServingWorkload(model="70b"), 8),
        (ServingWorkload(model="8b", max_latency_ms=15.0), 2),
    ],
)
def test_same_request_same_plan_with_1_and_8_workers_and_repeated_runs(workload, max_gpus):
    answers = [
        _without_timing(solve_training(workload, SearchSpace(max_gpus=max_gpus, workers=workers)))
        for workers in (1, 8, 1, 8)
    ]
    assert all(answer == answers[0] for answer in answers[1:])


OPTIMIZER_FORMATS = ("adam", "adam8bit", "adafactor", "sgd")


@st.composite
def optimizer_requests(draw):
    """Training requests that search optimizer-state formats (issue 12 item 5): --allow a
    subset with adam, sometimes a pin of another field, every training kind."""
    workload, space = draw(requests().filter(lambda request: isinstance(request[0], TrainingWorkload)))
    extra = draw(st.lists(st.sampled_from(OPTIMIZER_FORMATS[1:]), min_size=1, max_size=3, unique=True))
    allowed = tuple(name for name in OPTIMIZER_FORMATS if name == "adam" or name in extra)
    pin = {field: value for field, value in space.pin.items() if field != "optimizer"}
    forbid = {field: values for field, values in space.forbid.items() if field != "optimizer"}
    return workload, SearchSpace(
        gpus=space.gpus, max_gpus=space.max_gpus, pin=pin, forbid=forbid, allow={"optimizer": allowed},
        objective=space.objective, min_tokens_per_s=space.min_tokens_per_s, workers=1,
    )


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60)
@given(optimizer_requests())
def test_cp_sat_equals_exhaustive_with_optimizer_formats(request):
    """issue 12 item 5: the optimizer state field keeps CP-SAT exact against brute force, and
    the chosen plan keeps its headroom in floating point."""
    workload, space = request
    problem = _problem(workload, space)
    exhaustive = _cp_sat_and_exhaustive(problem)
    if exhaustive is None:
        return
    plan = decode_choice(problem, exhaustive)
    event(f"{workload.kind}: optimizer {plan.optimizer}")
    memory = estimate_training(workload, plan).memory_dict()
    assert memory["fits"] and memory["fits_host"] and memory["fits_nvme"]


@st.composite
def expert_requests(draw):
    """Mixtures of experts with expert and expert-tensor parallelism in the space (issue 14
    item 1): the default etp domain (tp, and 1 with ep > 1) or both named for every ep."""
    workload = TrainingWorkload(
        model=draw(st.sampled_from(("mixtral-8x7b", "qwen3-30b-a3b", "mixtral-8x22b"))),
        seq_len=draw(st.sampled_from((2048, 4096))),
        global_batch=draw(st.sampled_from((16, 64, 256))),
        headroom_fraction=draw(st.sampled_from((0.0, 0.1))),
    )
    allow = {"tensor_parallel": draw(st.sampled_from((("2",), ("2", "4"), ("1", "2", "4", "8"))))}
    if draw(st.booleans()):
        allow["expert_tensor_parallel"] = ("tp", "1")
    objective = draw(st.sampled_from(("throughput", "per-gpu", "min-gpus")))
    space = SearchSpace(
        gpus=(draw(st.sampled_from(("h100", "b200", "h200"))),),
        max_gpus=draw(st.sampled_from((16, 32, 64))),
        allow=allow,
        objective=objective,
        min_tokens_per_s=5_000.0 if objective == "min-gpus" else None,
        workers=1,
    )
    return workload, space


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=25)
@given(expert_requests())
def test_cp_sat_equals_exhaustive_with_expert_and_expert_tensor_parallelism(request):
    """issue 14 item 1: ep and etp keep CP-SAT exact against brute force, and the chosen
    plan's expert split is one the layout allows (ep x etp divides tp x cp x dp)."""
    workload, space = request
    problem = _problem(workload, space)
    exhaustive = _cp_sat_and_exhaustive(problem)
    if exhaustive is None:
        return
    plan = decode_choice(problem, exhaustive)
    event(f"ep={plan.expert_parallel} etp={plan.expert_tensor_parallel} tp={plan.tensor_parallel}")
    stage_gpus = plan.gpus // plan.pipeline_parallel
    assert stage_gpus % (plan.expert_parallel * plan.expert_tensor_parallel) == 0
    assert estimate_training(workload, plan).memory_dict()["fits"]
