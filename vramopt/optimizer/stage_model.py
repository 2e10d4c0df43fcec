"""Per-stage checkpointing as an integer program (issue 18 item 1), and its brute-force oracle.

An instance is a set of *bases* (a layout, a model-state item and the activation choices the
stages share: flash attention, sequence parallelism, the expert overlap) and, for each base,
a table per stage of its checkpointing candidates: the step time in ticks if that stage were
the slowest (the base's state and fixed terms included) and the stage's memory in MiB. A plan
is one base and one candidate per stage.

CP-SAT: one literal per base (exactly one) and per (base, stage, candidate) (exactly one per
stage of the chosen base, none otherwise); each stage's memory within the base's budget, its
own constraint; the step time T at least each stage's time, a linear bound, so that the
slowest stage sets it without the k^p product being enumerated. Objective, lexicographic in
one mixed-radix sum: T, then the candidates' ranks summed over the stages (the fixed order:
no checkpointing before selective before every:k), then the base's index.

The oracle enumerates the product of every base's stage candidates (small instances only:
p <= 4 stages and a few candidates), with the same objective; the property test
(tests/regression/test_per_stage_checkpointing.py) holds CP-SAT to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from vramopt.errors import VramoptError

ORACLE_MAX_PRODUCT = 2_000_000
"""Most per-stage assignments the oracle enumerates per instance (it exists to check CP-SAT)."""


@dataclass(frozen=True, slots=True)
class StageBase:
    time_ticks: np.ndarray
    """(stages, candidates) int64: the step time if this stage, with this candidate, is the slowest."""
    memory_mib: np.ndarray
    """(stages, candidates) int64: the stage's memory."""
    valid: np.ndarray
    """(stages, candidates) bool: the candidate runs on this stage (every:k divides its layers)."""
    budget_mib: int


@dataclass(frozen=True, slots=True)
class StageChoice:
    base: int
    candidates: tuple[int, ...]
    """One candidate index per stage."""
    time_ticks: int
    rank_sum: int


def _fits(base: StageBase) -> np.ndarray:
    return base.valid & (base.memory_mib <= base.budget_mib)


def _weights(bases: list[StageBase]) -> tuple[int, int]:
    """(weight of T, weight of the rank sum) of the mixed-radix objective."""
    base_radix = len(bases)
    rank_radix = max(base.valid.shape[0] * max(base.valid.shape[1] - 1, 0) for base in bases) + 1
    return rank_radix * base_radix, base_radix


def base_bound(base: StageBase) -> int:
    """The least step time of a base: given the base the stages meet only in the maximum, so
    this bound (each stage's fastest candidate that fits, the slowest of those) is exact."""
    return int(np.where(_fits(base), base.time_ticks, np.iinfo(np.int64).max).min(axis=1).max())


def solve_stages(bases: list[StageBase], time_limit_s: float = 10.0, workers: int = 1, prune: bool = True) -> StageChoice | None:
    """The optimum by CP-SAT; None when no base has a candidate that fits on every stage. With
    ``prune``, the bases whose exact bound (``base_bound``) exceeds the least are left out
    first, as the uniform solver drops the keys its bounds exclude."""
    usable = [index for index, base in enumerate(bases) if _fits(base).any(axis=1).all()]
    if not usable:
        return None
    if prune:
        bounds = {index: base_bound(bases[index]) for index in usable}
        usable = [index for index in usable if bounds[index] == min(bounds.values())]
    cp = cp_model.CpModel()
    time_weight, rank_weight = _weights(bases)
    horizon = max(int(bases[index].time_ticks[_fits(bases[index])].max()) for index in usable)
    step = cp.new_int_var(0, horizon, "")
    base_literals, stage_literals = {}, {}
    for index in usable:
        base = bases[index]
        chosen = cp.new_bool_var("")
        base_literals[index] = chosen
        fits = _fits(base)
        for stage in range(base.valid.shape[0]):
            options = [(candidate, cp.new_bool_var("")) for candidate in np.flatnonzero(fits[stage]).tolist()]
            stage_literals[(index, stage)] = options
            cp.add(sum(literal for _, literal in options) == chosen)
            # The slowest stage sets the step: T >= this stage's time (0 when the base is not chosen).
            cp.add(step >= sum(int(base.time_ticks[stage, candidate]) * literal for candidate, literal in options))
    cp.add_exactly_one(list(base_literals.values()))
    ranks = sum(candidate * literal for options in stage_literals.values() for candidate, literal in options)
    which = sum(index * literal for index, literal in base_literals.items())
    cp.minimize(step * time_weight + ranks * rank_weight + which)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = workers
    status = solver.solve(cp)
    if status != cp_model.OPTIMAL:
        raise VramoptError(f"per-stage search: CP-SAT ended {solver.status_name(status)} within {time_limit_s:g} s")
    index = next(index for index, literal in base_literals.items() if solver.value(literal))
    candidates = tuple(next(candidate for candidate, literal in stage_literals[(index, stage)] if solver.value(literal))
                       for stage in range(bases[index].valid.shape[0]))
    return _choice(bases, index, candidates)


def _choice(bases: list[StageBase], index: int, candidates: tuple[int, ...]) -> StageChoice:
    base = bases[index]
    ticks = max(int(base.time_ticks[stage, candidate]) for stage, candidate in enumerate(candidates))
    return StageChoice(base=index, candidates=candidates, time_ticks=ticks, rank_sum=sum(candidates))


def objective(bases: list[StageBase], choice: StageChoice) -> tuple[int, int, int]:
    return choice.time_ticks, choice.rank_sum, choice.base


def solve_stages_exhaustive(bases: list[StageBase]) -> StageChoice | None:
    """Every base times the product of its stages' fitting candidates (the oracle), the product
    laid out as one numpy array per base (one axis per stage)."""
    best, best_key = None, None
    for index, base in enumerate(bases):
        fits = _fits(base)
        options = [np.flatnonzero(fits[stage]) for stage in range(fits.shape[0])]
        size = int(np.prod([len(option) for option in options], dtype=float))
        if size == 0:
            continue
        if size > ORACLE_MAX_PRODUCT:
            raise VramoptError(f"the per-stage oracle enumerates at most {ORACLE_MAX_PRODUCT:,} assignments per base, not {size:,}")
        grids = np.ix_(*options)
        shape = tuple(len(option) for option in options)
        ticks = np.zeros(shape, dtype=np.int64)
        ranks = np.zeros(shape, dtype=np.int64)
        for stage, grid in enumerate(grids):
            ticks = np.maximum(ticks, base.time_ticks[stage][grid])
            ranks = ranks + grid
        flat = np.lexsort((ranks.reshape(-1), ticks.reshape(-1)))[0]
        position = np.unravel_index(flat, ticks.shape)
        choice = _choice(bases, index, tuple(int(option[at]) for option, at in zip(options, position)))
        key = objective(bases, choice)
        if best_key is None or key < best_key:
            best, best_key = choice, key
    return best


def tightest_stage(base: StageBase) -> tuple[int, int]:
    """(stage, the least memory any of its candidates needs) of the stage furthest over its
    budget: the one an infeasible request names."""
    least = np.where(base.valid, base.memory_mib, np.iinfo(np.int64).max).min(axis=1)
    stage = int(np.argmax(least - base.budget_mib))
    return stage, int(least[stage])
