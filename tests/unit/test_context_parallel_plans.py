"""Context parallelism in the search: a 128K-token Llama 3.1 70B plan (issue 12 item 4).

At 131,072 tokens per sequence a tp-only layout keeps every layer's activations of the
whole sequence; splitting the sequence over cp ranks divides them (and the attention work)
by cp, so the solver should choose cp > 1, and that plan should beat the best plan with
cp pinned to 1 -- both found by solving, not by comparing hand-picked plans.
"""

from __future__ import annotations

import pytest

from vramopt.errors import InputError
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.search import solve
from vramopt.types import SearchSpace, TrainingWorkload

WORKLOAD = TrainingWorkload(model="llama-3.1-70b", seq_len=131072, global_batch=32)


def best(**space_fields):
    result = solve(WORKLOAD, SearchSpace(gpus=("h100",), max_gpus=64, workers=1, **space_fields), runner_up_count=0)
    assert result.solver.status == "optimal", result.solver
    return result.estimate


def test_128k_llama_70b_chooses_context_parallelism_and_beats_every_cp1_plan():
    chosen = best()
    tp_only = best(pin={"context_parallel": "1"})
    assert chosen.plan.context_parallel > 1, chosen.plan
    assert tp_only.plan.context_parallel == 1
    assert tp_only.plan.tensor_parallel > 1, tp_only.plan  # the best cp = 1 plan leans on tp
    assert chosen.values["tokens_per_s"] > tp_only.values["tokens_per_s"] * 1.05, (chosen.plan, tp_only.plan)
    # Same optimizer state budget rule: both fit with the 10% headroom.
    for estimate in (chosen, tp_only):
        memory = estimate.memory_dict()
        assert memory["fits"] and memory["total_bytes"] <= 0.9 * memory["capacity_bytes"]


def test_the_exhaustive_engine_agrees_on_the_128k_plan():
    space = SearchSpace(gpus=("h100",), max_gpus=64, workers=1)
    cp_sat = solve(WORKLOAD, space, runner_up_count=0)
    exhaustive = solve(WORKLOAD, space, engine="exhaustive", runner_up_count=0)
    assert cp_sat.solver.objective_value == exhaustive.solver.objective_value
    assert cp_sat.estimate.plan == exhaustive.estimate.plan


def test_short_sequences_do_not_search_context_parallelism():
    problem = build_problem(TrainingWorkload(model="llama-3.1-8b", seq_len=8192, global_batch=64),
                            SearchSpace(gpus=("h100",), max_gpus=16, workers=1))
    assert set(problem.keys["context_parallel"].tolist()) == {1}


def test_long_sequences_search_powers_of_two_up_to_16():
    problem = build_problem(WORKLOAD, SearchSpace(gpus=("h100",), max_gpus=64, workers=1))
    assert set(problem.keys["context_parallel"].tolist()) == {1, 2, 4, 8, 16}
    # gpus = tp x cp x pp x dp in every candidate row.
    keys = problem.keys
    assert (keys["tensor_parallel"] * keys["context_parallel"] * keys["pipeline_parallel"] * keys["data_parallel"]
            == keys["gpus"]).all()


def test_a_pinned_degree_that_cannot_split_the_sequence_is_refused():
    with pytest.raises(InputError, match="context_parallel has no value left to search: 2 .pinned. is not a split of "
                                          "seq_len 1,000 into 2 x context_parallel chunks of whole 128-token attention tiles"):
        build_problem(TrainingWorkload(model="llama-3.1-8b", seq_len=1000, global_batch=8),
                      SearchSpace(gpus=("h100",), max_gpus=8, workers=1, pin={"context_parallel": "2"}))


def test_the_context_parallel_answer_is_deterministic():
    first = solve(WORKLOAD, SearchSpace(gpus=("h100",), max_gpus=64, workers=1), runner_up_count=0)
    again = solve(WORKLOAD, SearchSpace(gpus=("h100",), max_gpus=64, workers=4), runner_up_count=0)
    assert first.estimate.plan == again.estimate.plan
    assert first.solver.objective_value == again.solver.objective_value
