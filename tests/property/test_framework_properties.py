"""Property tests of --framework (issue 15 item 1): the framework's rules are validity masks
on the search tables, so CP-SAT and the exhaustive oracle search the same restricted space.

The rules are re-stated here, independently of vramopt/frameworks/, as predicates on the
decoded plan (``RUNS``); each test compares the masked tables or the optimum with them.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from vramopt.errors import InputError
from vramopt.estimate import estimate_training
from vramopt.optimizer.objective import constant_mib
from vramopt.units import BYTES_PER_MIB
from vramopt.optimizer.decode import decode_choice
from vramopt.optimizer.oracle import Choice, solve_exhaustive
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.solve import solve_cp
from vramopt.types import SearchSpace, TrainingWorkload


def _deepspeed(plan) -> bool:
    return (not (plan.pipeline_parallel > 1 and plan.zero_stage >= 2) and plan.virtual_stages == 1
            and plan.context_parallel == 1 and not plan.sequence_parallel and plan.checkpointing != "selective"
            and plan.grad_comm_precision in ("fp16", "bf16", "fp32"))


def _megatron(plan) -> bool:
    return (plan.zero_stage <= 1 and plan.optimizer in ("adam", "sgd") and plan.offload != "nvme"
            and (plan.grad_comm_precision in ("fp32", "bf16") or plan.precision == plan.grad_comm_precision == "fp16"))


def _torchtitan(plan) -> bool:
    experts_whole_under_ep = plan.expert_tensor_parallel == (1 if plan.expert_parallel > 1 else plan.tensor_parallel)
    return (plan.zero_stage != 1 and plan.optimizer == "adam" and plan.grad_comm_precision == "fp32"
            and plan.offload == "none" and plan.precision != "fp16"
            and plan.checkpointing in ("none", "selective", "every:1") and plan.flash_attention and experts_whole_under_ep)


RUNS = {"deepspeed": _deepspeed, "megatron": _megatron, "torchtitan": _torchtitan}

MODELS = ("llama-2-7b", "llama-3.1-8b", "llama-2-13b", "llama-3.1-70b", "mixtral-8x7b")
GPUS = ("a100-80gb", "h100", "h200", "b200", "rtx4090")
# Every technique value searched, so that each rule has something to remove.
WIDE = {
    "zero_stage": ("0", "1", "2", "3"),
    "offload": ("none", "cpu", "nvme"),
    "optimizer": ("adam", "adam8bit", "sgd"),
    "grad_comm_precision": ("fp32", "bf16", "fp8"),
    "checkpointing": ("none", "selective", "every:1", "every:2"),
    "virtual_stages": ("1", "2"),
    "precision": ("bf16", "fp16", "fp8"),
}


@st.composite
def requests(draw):
    workload = TrainingWorkload(
        model=draw(st.sampled_from(MODELS)),
        seq_len=draw(st.sampled_from((2048, 4096, 16384))),
        global_batch=draw(st.sampled_from((16, 64, 256))),
        headroom_fraction=draw(st.sampled_from((0.05, 0.1, 0.2))),
        kind=draw(st.sampled_from(("train", "train", "finetune", "lora"))),
    )
    framework = draw(st.sampled_from(sorted(RUNS)))
    allow = {field: values for field, values in WIDE.items() if draw(st.booleans())}
    allow["grad_comm_precision"] = WIDE["grad_comm_precision"]  # the same items with and without the framework
    space = SearchSpace(gpus=(draw(st.sampled_from(GPUS)),), max_gpus=draw(st.sampled_from((1, 2, 4, 8, 16))),
                        allow=allow, workers=1, framework=framework)
    return workload, space


def _problem(workload, space):
    try:
        return build_problem(workload, space)
    except InputError:
        assume(False)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60)
@given(requests())
def test_the_masked_tables_hold_exactly_the_plans_the_framework_runs(request):
    """issue 15 item 1: every (key, state, activation) triple is valid under the framework
    exactly when it is valid without it and the framework runs the decoded plan."""
    workload, space = request
    framework_problem = _problem(workload, space)
    generic_problem = _problem(workload, SearchSpace(**{**{name: getattr(space, name) for name in space.__slots__}, "framework": "generic"}))
    assert framework_problem.state.values == generic_problem.state.values
    assert framework_problem.activation.values == generic_problem.activation.values
    rng = np.random.default_rng(len(framework_problem.state.values) * 7919 + framework_problem.key_count)
    runs = RUNS[space.framework]
    keys, states, activations = (rng.integers(0, count, size=200) for count in (
        framework_problem.key_count, len(framework_problem.state.values), len(framework_problem.activation.values)))
    for key, state, activation in zip(keys, states, activations):
        generic_valid = bool(generic_problem.state.valid[key, state] and generic_problem.activation.valid[key, activation])
        framework_valid = bool(framework_problem.state.valid[key, state] and framework_problem.activation.valid[key, activation])
        if not generic_valid:
            assert not framework_valid
            continue
        plan = decode_choice(generic_problem, Choice(int(key), int(state), int(activation), ()))
        assert framework_valid == runs(plan), (space.framework, plan)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60)
@given(requests())
def test_cp_sat_equals_exhaustive_under_a_framework_and_the_plan_runs(request):
    """issue 15 items 1 and 3: CP-SAT and the oracle agree on the restricted space; the optimum
    runs under the framework and fits by the framework's own memory accounting. (It may beat
    the generic optimum: a framework's accounting can keep fewer bytes, as ZeRO-Offload's
    gradients on the host.)"""
    workload, space = request
    problem = _problem(workload, space)
    outcome = solve_cp(problem, time_limit_s=30.0, workers=1)
    exhaustive = solve_exhaustive(problem)
    assert outcome.status in ("optimal", "infeasible")
    if exhaustive is None:
        assert outcome.choice is None
        return
    assert outcome.choice is not None and outcome.choice.objective == exhaustive.objective
    plan = decode_choice(problem, exhaustive)
    assert RUNS[space.framework](plan), plan
    # The tables carry the framework's own memory accounting: the estimate under the same
    # framework fits, and the table's MiB (each part rounded up) covers its bytes.
    estimate = estimate_training(workload, plan, framework=space.framework)
    assert estimate.fits
    table_mib = (constant_mib(problem)[exhaustive.key] + problem.state.memory_mib[exhaustive.key, exhaustive.state_item]
                 + problem.activation.memory_mib[exhaustive.key, exhaustive.activation_item])
    assert estimate.total_bytes <= table_mib * BYTES_PER_MIB < estimate.total_bytes + 3 * BYTES_PER_MIB
