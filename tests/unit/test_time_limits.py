"""Tiny time limits on large spaces: the answer is labelled (optimal, feasible with a gap,
timed_out, or one clear error line), every CP-SAT search gets at most the request's limit
(recorded, not timed), and nothing hangs (a generous guard, not a speed target: how long
past the limit answers come is a figure to measure on an idle machine, not to assert).

Also: the key enumeration that made million-GPU spaces take minutes (every count x tp x pp)
gives exactly the rows, in exactly the order, of the plain loop it replaced.
"""

from __future__ import annotations

import dataclasses

import faulthandler
import itertools
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cli_runner import invoke
from tests.unit.test_key_enumeration import with_interleaving  # virtual stages: a key field since issue 18
from vramopt.constraints.pipeline_stages import key_splits
from vramopt.cluster import parse_cluster, parse_jobs
from vramopt.constraints.mig import NO_MIG
from vramopt.constraints.parallelism import gpu_counts
from vramopt.constraints.precision import PREFERENCE
from vramopt.constraints.technique import DomainContext
from vramopt.costs.inference import QUANTIZATIONS
from vramopt.errors import InputError
from vramopt.estimate import mig_profile_code
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.optimizer import problem as training_problem
from vramopt.optimizer import serving_problem
from vramopt.optimizer.domains import domain, parsed_user_choices
from vramopt.optimizer.tables import MAX_TABLE_ROWS
from vramopt.optimizer.pack import solve_pack
from vramopt.types import PRECISIONS, SearchSpace

MARGIN_S = 60.0
"""A hang guard, not a speed target: a run this far past its limit is stuck. How far past
the limit answers really come (table building and the catalogs are not interruptible; at
most ~1.7 s for the cases below on an idle 2-core machine) is a figure to measure, not to
assert: a tight margin fails on a loaded machine with no bug. What the limit must do is
checked without a clock by test_the_time_limit_bounds_every_cp_sat_call."""
HANG_S = 120
"""A run still going after this long is a hang: dump the stacks and stop."""

LABELS = {"optimal", "feasible", "timed_out", "infeasible"}


@pytest.fixture(scope="module", autouse=True)
def warm_catalogs():
    invoke(["estimate", "--model", "8b"])  # the first call reads the catalogs


def timed(args: list[str]):
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    try:
        started = time.perf_counter()
        result = invoke(args)
        return result, time.perf_counter() - started
    finally:
        faulthandler.cancel_dump_traceback_later()


SOLVE_CASES = {
    "train 8b, 16,384 GPUs": (["--model", "8b", "--max-gpus", "16384"], 0.01),
    "train 405b, 16,384 GPUs": (["--model", "405b", "--max-gpus", "16384"], 0.05),
    "train 405b, 1,048,576 GPUs": (["--model", "405b", "--max-gpus", "1048576"], 0.01),
    "train 8b, three GPU types, any count to 16,384": (
        ["--model", "8b", "--gpu", "h100", "--gpu", "b200", "--gpu", "a100-80gb", "--max-gpus", "16384", "--no-whole-nodes"], 0.01),
    "train 405b, any count to 1,048,576 (too large: refused)": (
        ["--model", "405b", "--global-batch", "720720", "--max-gpus", "1048576", "--no-whole-nodes", "--allow-tp-across-nodes"], 0.01),
    "serve 70b, 16,384 GPUs": (["--workload", "infer", "--model", "70b", "--max-gpus", "16384"], 0.01),
    "serve 8b, any count to 1,048,576": (["--workload", "infer", "--model", "8b", "--max-gpus", "1048576", "--no-whole-nodes"], 0.01),
    "serve 8b per GPU, any count to 1,048,576 (too large: refused)": (
        ["--workload", "infer", "--model", "8b", "--max-gpus", "1048576", "--no-whole-nodes", "--objective", "per-gpu"], 0.01),
    "min-gpus out of reach, explained": (
        ["--model", "8b", "--max-gpus", "16384", "--objective", "min-gpus", "--min-tokens-per-s", "1e14"], 0.01),
    "serving latency out of reach, explained": (
        ["--workload", "infer", "--model", "70b", "--max-gpus", "4096", "--max-latency-ms", "0.001"], 0.05),
    "2t on 16 GPUs without offload, explained": (["--model", "2t", "--max-gpus", "16", "--forbid", "offload=cpu,nvme"], 0.2),
}


@pytest.mark.parametrize("case", sorted(SOLVE_CASES))
def test_solve_answers_within_the_limit_with_a_label(case):
    args, limit_s = SOLVE_CASES[case]
    result, elapsed_s = timed(["solve", *args, "--time-limit", str(limit_s), "--format", "json"])
    assert elapsed_s <= limit_s + MARGIN_S, f"{case}: {elapsed_s:.2f} s for a {limit_s} s limit"
    assert result.exit_code in (0, 2), result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    if result.exit_code == 2:
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    if not result.stdout:
        assert f"more than the {MAX_TABLE_ROWS:,} vramopt evaluates" in result.stderr  # refused before solving
        return
    data = json.loads(result.stdout)
    solver = data["solver"]
    assert solver["status"] in LABELS
    assert solver["wall_time_s"] <= limit_s + MARGIN_S
    if solver["status"] == "optimal":
        assert result.exit_code == 0 and solver["gap"] == 0.0
    elif solver["status"] == "feasible":
        assert result.exit_code == 0 and solver["gap"] >= 0.0
    elif solver["status"] == "timed_out":
        assert result.exit_code == 2 and data["plan"] is None and solver["gap"] == 1.0
        assert "time limit" in result.stderr
    else:
        assert result.exit_code == 2 and data["explanation"]["reason"]


@pytest.fixture
def given_limits(monkeypatch) -> list[float]:
    """The time limit each CP-SAT search of the test is given, in order."""
    from ortools.sat.python import cp_model

    given: list[float] = []
    original = cp_model.CpSolver.solve

    def recording(self, *solve_args, **solve_kwargs):
        given.append(self.parameters.max_time_in_seconds)
        return original(self, *solve_args, **solve_kwargs)

    monkeypatch.setattr(cp_model.CpSolver, "solve", recording)
    return given


@pytest.mark.parametrize("args", [
    ["solve", "--model", "70b", "--max-gpus", "8"],
    ["solve", "--model", "70b", "--max-gpus", "32", "--objective", "min-gpus", "--min-tokens-per-s", "50000"],
    ["solve", "--workload", "infer", "--model", "70b", "--max-gpus", "8"],
])
def test_the_time_limit_bounds_every_cp_sat_call(given_limits, args):
    """Issue 11 (tests that can fail): instead of timing the run, record the time limit each
    CP-SAT search is given. Every one (each stage of the lexicographic objective, the
    runners-up) must get at most the request's 4 s; a search
    given CP-SAT's default (no limit) or vramopt's 10 s default fails here on any machine,
    however fast. 4 s leaves these small requests' tables (well under a second) time to
    build first, so the searches do run."""
    limit_s = 4.0
    given = given_limits
    result, _ = timed([*args, "--time-limit", str(limit_s), "--format", "json"])
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert given, "no CP-SAT search ran"
    assert max(given) <= limit_s, f"a CP-SAT search was given {max(given)} s for a {limit_s} s request"


def test_pack_bounds_every_cp_sat_call(given_limits, tmp_path):
    """The same for pack: every CP-SAT search it runs gets at most the request's limit."""
    given = given_limits
    cluster, queue = tmp_path / "cluster.json", tmp_path / "jobs.json"
    cluster.write_text(json.dumps(big_cluster(2)))
    queue.write_text(json.dumps(many_jobs(4)))
    result, _ = timed(["pack", "--cluster", str(cluster), "--jobs", str(queue), "--time-limit", "4", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    assert given and max(given) <= 4.0, given


def test_a_cut_relaxation_search_says_so():
    result, elapsed_s = timed(["solve", "--workload", "infer", "--model", "70b", "--max-gpus", "4096", "--max-latency-ms", "0.001",
                               "--time-limit", "0.05", "--format", "json"])
    assert result.exit_code == 2 and elapsed_s <= 0.05 + MARGIN_S
    reason = json.loads(result.stdout)["explanation"]["reason"]
    assert "the search for relaxations stopped at the 0.05 s time limit" in reason
    # With time to spare the same request finds its fixes and says nothing about a cut.
    result, _ = timed(["solve", "--workload", "infer", "--model", "70b", "--max-gpus", "8", "--max-latency-ms", "0.001",
                       "--time-limit", "60", "--format", "json"])
    explanation = json.loads(result.stdout)["explanation"]
    assert "stopped at the" not in explanation["reason"]


# ---------------------------------------------------------------------------------------
# pack


def big_cluster(nodes: int) -> dict:
    return {"nodes": [{"name": f"n{index:03d}", "gpu": ("h100", "b200")[index % 2], "gpus": 8} for index in range(nodes)]}


SHAPES = (
    {"model": "8b", "max_gpus": 16},
    {"model": "70b", "workload": "lora", "max_gpus": 16, "global_batch": 64},
    {"model": "8b", "workload": "infer", "max_gpus": 8},
)


def many_jobs(count: int) -> list[dict]:
    """Many jobs of three shapes: the options are built three times, the rest is solving."""
    return [{"id": f"job{index:03d}", **SHAPES[index % 3], "weight": 1.0 + index % 7} for index in range(count)]


@pytest.mark.parametrize("nodes, jobs, limit_s", [(200, 120, 0.05), (64, 40, 0.01), (2, 12, 0.001)])
def test_pack_answers_within_the_limit_with_a_label(tmp_path, nodes, jobs, limit_s):
    cluster, queue = tmp_path / "cluster.json", tmp_path / "jobs.json"
    cluster.write_text(json.dumps(big_cluster(nodes)))
    queue.write_text(json.dumps(many_jobs(jobs)))
    result, elapsed_s = timed(["pack", "--cluster", str(cluster), "--jobs", str(queue), "--time-limit", str(limit_s),
                               "--workers", "2", "--format", "json"])
    assert elapsed_s <= limit_s + MARGIN_S, f"pack {nodes} nodes, {jobs} jobs: {elapsed_s:.2f} s for a {limit_s} s limit"
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    if result.exit_code == 2:
        assert result.stderr.count("\n") == 1 and "no assignment (timed_out)" in result.stderr
        return
    assert result.exit_code == 0, result.stderr
    solver = json.loads(result.stdout)["summary"]["solver"]
    assert solver["status"] in LABELS
    if solver["status"] == "timed_out":
        assert solver["gap"] == 1.0
    elif solver["status"] == "optimal":
        assert solver["gap"] == 0.0


def test_pack_that_runs_out_of_time_before_any_solve_is_labelled_timed_out():
    """The decomposed mode (large clusters) with no time left for its first solve used to
    say 'feasible' with gap 0 while admitting nothing."""
    jobs = parse_jobs(many_jobs(30))
    nodes = parse_cluster(big_cluster(64))
    response = solve_pack(jobs, nodes, time_limit_s=1e-6, workers=1)
    solver = response["summary"]["solver"]
    assert (solver["status"], solver["gap"]) == ("timed_out", 1.0)
    assert response["summary"]["jobs_admitted"] == 0


# ---------------------------------------------------------------------------------------
# The fast key enumeration equals the plain loop (same rows, same order)


def plain_training_keys(gpu_index, gpu, model, workload, space, context, choices) -> list[tuple]:
    counts = [count for count in domain("gpus", context, choices, gpu_counts(space.max_gpus, gpu.node.gpus_per_node, space.whole_nodes))
              if count <= space.max_gpus]
    tensor, pipeline = domain("tensor_parallel", context, choices), domain("pipeline_parallel", context, choices)
    # Context-parallel degrees that split the sequence into 2 x cp chunks of whole 128-token tiles.
    context_degrees = [cp for cp in domain("context_parallel", context, choices) if workload.seq_len % (2 * cp * 128) == 0 or cp == 1]
    precisions = sorted(domain("precision", context, choices), key=PREFERENCE.index)
    micro_batches = domain("micro_batch", context, choices)
    data_parallel_allowed = domain("data_parallel", context, choices, default=(None,))
    experts = model.moe.experts if model.moe is not None else 1
    expert_degrees = [ep for ep in domain("expert_parallel", context, choices) if experts % ep == 0 and (ep == 1 or model.moe)]
    etp_codes = domain("expert_tensor_parallel", context, choices)  # 0 = tp
    etp_named = any("expert_tensor_parallel" in choices[kind] for kind in ("pin", "allow"))
    stage_fields = ("first_stage_layers", "last_stage_layers")
    first_layers, last_layers = (domain(field, context, choices) if field in choices["pin"] or field in choices["allow"] else None
                                 for field in stage_fields)
    forbidden = tuple(choices["forbid"].get(field, ()) for field in stage_fields)
    rows = []
    for count, t, cp, ep, etp_code, p in itertools.product(counts, tensor, context_degrees, expert_degrees, etp_codes, pipeline):
        etp = etp_code or t
        if etp_code and etp_code == t and 0 in etp_codes:  # the same layout as the code 0, listed first
            continue
        if etp != t and (model.moe is None or (ep == 1 and not etp_named)):
            continue  # whole experts: MoE only, and by default only with expert parallelism
        splits = key_splits(model.layers, p, first_layers, last_layers, forbidden)  # even, or uneven first/last stages
        if count % (t * cp * p) != 0 or model.heads % t != 0 or not splits:
            continue
        if not ((model.kv_heads % t == 0) or (t % model.kv_heads == 0)):
            continue
        if t > gpu.node.gpus_per_node and not space.allow_tp_across_nodes:
            continue
        dp = count // (t * cp * p)
        if (None not in data_parallel_allowed and dp not in data_parallel_allowed) or workload.global_batch % dp != 0:
            continue
        if (t * cp * dp) % (ep * etp) != 0:  # the expert layers refold tp x cp x dp as etp x ep x edp
            continue
        for first, last in splits:
            for precision in precisions:
                if gpu.supports(precision):
                    rows += [(gpu_index, count, t, p, dp, PRECISIONS.index(precision), b, cp, ep, etp_code, first, last)
                             for b in micro_batches if (workload.global_batch // dp) % b == 0]
    return rows


def plain_serving_keys(gpu_index, gpu, model, space, context, choices) -> list[tuple]:
    counts = [count for count in domain("gpus", context, choices, gpu_counts(space.max_gpus, gpu.node.gpus_per_node, space.whole_nodes))
              if count <= space.max_gpus]
    tensor, pipeline = domain("tensor_parallel", context, choices), domain("pipeline_parallel", context, choices)
    quantizations = domain("quantization", context, choices)
    default_mig = (NO_MIG,) + tuple(profile.name for profile in gpu.mig_profiles)
    profiles = domain("mig_profile", context, choices, default_mig if "mig_profile" not in choices["allow"] else None)
    mig_codes = [mig_profile_code(gpu, name) for name in profiles if name == NO_MIG or gpu.mig_profile(name) is not None]
    experts = model.moe.experts if model.moe is not None else 1
    expert = [e for e in domain("expert_parallel", context, choices) if experts % e == 0 and (e == 1 or model.moe is not None)]
    rows = []
    for count, t, e, p, quantization, mig in itertools.product(counts, tensor, expert, pipeline, quantizations, mig_codes):
        # An expert-parallel replica is its ep GPUs: ep a multiple of tp, pp 1, whole GPUs.
        replica = e if e > 1 else t * p
        if e > 1 and (e % t != 0 or p > 1 or mig >= 0):
            continue
        if (mig >= 0 and (t > 1 or p > 1)) or count % replica != 0 or model.heads % t != 0 or model.layers % p != 0:
            continue
        if t > gpu.node.gpus_per_node and not space.allow_tp_across_nodes:
            continue
        needs = {"fp8": "fp8", "fp4": "fp4"}.get(quantization)
        if not (needs and not gpu.supports(needs)):
            rows.append((gpu_index, count, t, e, p, QUANTIZATIONS.index(quantization), mig))
    return rows


values = st.sampled_from
spaces = st.fixed_dictionaries({
    "model": values(["8b", "70b", "7b", "mixtral", "405b"]),
    "gpu": values(["h100", "b200", "a100-80gb", "rtx4090", "mi300x"]),
    "global_batch": values([1, 3, 16, 64, 96, 720, 1024]),
    "max_gpus": values([1, 2, 8, 24, 64, 200]),
    "whole_nodes": st.booleans(),
    "allow_tp_across_nodes": st.booleans(),
    "allow": st.fixed_dictionaries({}, optional={
        "gpus": st.lists(st.integers(1, 64).map(str), min_size=1, max_size=4),
        "tensor_parallel": st.lists(values(["1", "2", "3", "4", "8", "16"]), min_size=1, max_size=3),
        "pipeline_parallel": st.lists(values(["1", "2", "3", "4", "5", "8", "80"]), min_size=1, max_size=3),
        "data_parallel": st.lists(values(["1", "2", "3", "4", "8", "16"]), min_size=1, max_size=3),
        "context_parallel": st.lists(values(["1", "2", "4", "8", "3"]), min_size=1, max_size=3),
    }),
})


def context_of(model, gpu, space, kind: str, global_batch: int) -> DomainContext:
    return DomainContext(layers=model.layers, gpus_per_node=gpu.node.gpus_per_node, max_gpus=space.max_gpus,
                         global_batch=global_batch, allow_tp_across_nodes=space.allow_tp_across_nodes, allow_fp4=False,
                         supported_precisions=tuple(name for name in PRECISIONS if gpu.supports(name)), kind=kind)


@settings(max_examples=150, deadline=None)
@given(spaces)
def test_training_key_enumeration_equals_the_plain_loop(drawn):
    from vramopt.types import TrainingWorkload

    model, gpu = load_model(drawn["model"]), load_gpu(drawn["gpu"])
    space = SearchSpace(max_gpus=drawn["max_gpus"], whole_nodes=drawn["whole_nodes"],
                        allow_tp_across_nodes=drawn["allow_tp_across_nodes"], allow=drawn["allow"])
    workload = TrainingWorkload(model=model.name, global_batch=drawn["global_batch"], seq_len=1024)
    choices = parsed_user_choices(space)
    context = context_of(model, gpu, space, "train", workload.global_batch)
    columns = training_problem._keys_for_gpu(0, gpu, model, workload, space, context, choices)
    assert list(zip(*(values.tolist() for values in columns.values()))) == with_interleaving(plain_training_keys(
        0, gpu, model, workload, space, context, choices), model, workload, context, choices)


@settings(max_examples=150, deadline=None)
@given(spaces, st.sampled_from(["throughput", "per-gpu"]))
def test_serving_key_enumeration_equals_the_plain_loop(drawn, objective):
    model, gpu = load_model(drawn["model"]), load_gpu(drawn["gpu"])
    allow = {key: value for key, value in drawn["allow"].items() if key != "data_parallel"}
    space = SearchSpace(gpus=(gpu.name,), max_gpus=drawn["max_gpus"], whole_nodes=drawn["whole_nodes"],
                        allow_tp_across_nodes=drawn["allow_tp_across_nodes"], allow=allow, objective=objective)
    choices = parsed_user_choices(space)
    # The routed experts, as the serving problem's context has them: ep is a serving key too.
    context = dataclasses.replace(context_of(model, gpu, space, "infer", 1), experts=model.moe.experts if model.moe is not None else 0)
    try:
        fast = serving_problem._rows(0, *serving_problem._layouts_for_gpu(gpu, model, space, context, choices))
    except InputError:
        return
    plain = plain_serving_keys(0, gpu, model, space, context, choices)
    assert fast == plain
    largest = serving_problem._rows(0, *serving_problem._layouts_for_gpu(gpu, model, space, context, choices), largest_only=True)
    assert largest == serving_problem._dominant_counts(plain, "throughput")
