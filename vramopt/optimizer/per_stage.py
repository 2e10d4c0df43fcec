"""Per-stage activation checkpointing: each pipeline stage chooses its own checkpointing
(issue 18 item 1), searched jointly with the layout, the model state and the activation
choices the stages share, for a training request (``per_stage_search``; off unless asked,
so the uniform answers stay as they are).

The stage terms are ``costs/stage_plans.py``'s: stage s holds min(p - s, m) micro-batches of
activations (scaled as the uniform model scales them under interleaving), its layers take the
operator model's time, the last stage also the head and the loss. A base is one key of the
uniform tables (``optimizer/problem.py``), one model-state item on that key's exact Pareto
front (``prune.pareto_front``: a dominated state item can be swapped for one no worse in
memory and time whatever the stages choose) and one combination of the shared activation
choices; each stage's candidates are the checkpointing values the uniform table runs on that
key (every:k dividing each stage's layers). With every stage choosing alike, a base's figures
are the uniform tables' exactly, so the per-stage optimum is never slower than the uniform one.

Given a base the stages interact only through the maximum, so the base's per-stage optimum is
max over stages of the fastest candidate that fits: an exact bound, used (like the uniform
solver's key bounds) to keep only the bases that reach the best one before CP-SAT
(``stage_model.solve_stages``) settles the tie-breaks. The stage tables
(``optimizer/stage_groups.py``) are built best first: keys in the order of a lower bound read
off the uniform tables (``key_lower_bounds``), until the next key's bound exceeds the best
exact bound found, so a large space tables only the keys that can hold the optimum.

Restrictions (said, not hidden): the stages share flash attention, sequence parallelism and
the expert overlap; every:k must divide every stage's layers; the weights, model state,
logits and reserve of every stage are the uniform model's heaviest stage's; offload per
stage and layer counts per stage beyond Megatron's first/last split are not searched.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vramopt.costs.stage_plans import layers_of_each_stage
from vramopt.errors import InfeasibleError, InputError
from vramopt.optimizer.problem import Problem, build_problem
from vramopt.optimizer.stage_groups import Group as _Group, stage_groups as _groups, state_front
from vramopt.optimizer.stage_model import StageBase, solve_stages
from vramopt.optimizer.tables import KEY_COLUMNS
from vramopt.units import BYTES_PER_MIB, format_bytes, micro_batches_phrase

MAX_STAGE_LITERALS = 20_000_000
"""Most (base, stage, candidate) rows a per-stage search tables before its bound closes; a
search that needs more is refused with a hint to pin the layout."""

MEGATRON_NOTE = ("Megatron-LM cannot run a per-stage choice: Megatron-Core 0.16.1 TransformerConfig.recompute_num_layers "
                 "(--recompute-method block --recompute-num-layers N) recomputes the same N layers 'within each pipeline "
                 "stage' (transformer_config.py; transformer_block.py _checkpointed_forward), and recompute_granularity "
                 "is one value for the model; not expressible as Megatron-LM arguments")


@dataclass(frozen=True, slots=True)
class StagePlan:
    stage: int
    layers: int
    checkpointing: str
    in_flight_micro_batches: float
    memory_bytes: float
    budget_bytes: float
    slot_seconds: float
    """The step time if this stage set the pace (its per-micro-batch time x slots + the fixed terms)."""
    why: str


@dataclass(frozen=True, slots=True)
class PerStageAnswer:
    key: int
    state_item: int
    shared: dict
    stages: tuple[StagePlan, ...]
    step_s: float
    tokens_per_s: float
    layout: dict
    plan: object = None
    """The chosen layout and shared choices as a ``TrainingPlan`` (its checkpointing the first
    stage's where the uniform domain has it, else none: the stages carry their own)."""

    def to_dict(self) -> dict:
        return {
            "layout": self.layout, "shared": dict(self.shared), "step_s": self.step_s, "tokens_per_s": self.tokens_per_s,
            "stages": [{"stage": plan.stage, "layers": plan.layers, "checkpointing": plan.checkpointing,
                        "in_flight_micro_batches": plan.in_flight_micro_batches, "memory_bytes": plan.memory_bytes,
                        "budget_bytes": plan.budget_bytes, "slot_seconds": plan.slot_seconds, "why": plan.why}
                       for plan in self.stages],
            "megatron": MEGATRON_NOTE,
        }


@dataclass(frozen=True, slots=True)
class _Base:
    key: int
    state_item: int
    shared: tuple
    names: tuple[str, ...]
    """Each candidate's checkpointing: the uniform domain's values in its order, then block:N
    (Megatron-Core's block method: the first N layers of the stage recomputed)."""
    stage: StageBase
    seconds: np.ndarray
    memory_bytes: np.ndarray
    in_flight: np.ndarray
    stages_of: StageBase | None = None
    """For a base folded into one stage (``_alike``), its per-stage table."""


def per_stage_search(workload, space, time_limit_s: float = 10.0, same_on_every_stage: bool = False) -> PerStageAnswer:
    """The fastest plan whose stages checkpoint each as they need (see the module docstring).
    With ``same_on_every_stage`` every stage takes the same candidate (block:N included: what
    Megatron-LM's --recompute-method block --recompute-num-layers N runs), the comparison that
    separates the per-stage choice from the finer block granularity.

    Every base's exact bound is computed in bulk, over all its model-state items at once
    (``_group_bounds``), and only the bases that reach the least are built and handed to
    CP-SAT, in their enumeration order, so its tie-breaks are those of the whole list."""
    problem = build_problem(workload, space)
    if problem.kind != "train":
        raise InputError("per-stage checkpointing applies to training plans")
    groups, bounds = _best_first(problem, same_on_every_stage)
    least = min((int(bound.min()) for bound in bounds if bound.size), default=UNUSABLE)
    if least >= UNUSABLE:
        raise InfeasibleError(_infeasible_reason(problem, groups))
    usable = [base for group, bound in zip(groups, bounds) for base in _group_bases(problem, group, group.state_items[bound == least])]
    if same_on_every_stage:
        usable = [_alike(base) for base in usable]
    choice = solve_stages([base.stage for base in usable], time_limit_s=time_limit_s)
    candidates = choice.candidates * len(usable[choice.base].in_flight) if same_on_every_stage else choice.candidates
    return _answer(problem, _unalike(usable[choice.base]) if same_on_every_stage else usable[choice.base], candidates)


FIRST_BATCH_KEYS = 32
"""Keys whose stage terms the best-first search computes first; each later batch is twice as large."""


def key_lower_bounds(problem: Problem, front: np.ndarray | None = None) -> np.ndarray:
    """Per key, a lower bound of every base's per-stage step in ticks, from the uniform tables
    alone: its fastest state item on the front plus its fastest activation item, less one tick
    of rounding (a state item counts where the first stage can fit: see below). Valid because recomputation never makes a stage faster (a stage's time with
    any candidate is at least its time without checkpointing; tested on real spaces), so a
    per-stage step is at least the slowest stage's time without checkpointing, the uniform
    figure of 'none', which is at least the fastest uniform activation item's."""
    front = (state_front(problem) if front is None else front) & problem.state.valid
    activation_valid = problem.activation.valid
    activation = np.where(activation_valid, problem.activation.time_ticks, UNUSABLE).min(axis=1).astype(np.int64)
    # With even stages the first is the heaviest for every candidate (it holds the most
    # micro-batches, the same layers), its memory the uniform table's, and no block:N is
    # leaner than every:1: so a state item none of whose activation items fits leaves the
    # first stage without a candidate. Uneven stages keep the time bound alone.
    leanest = np.where(activation_valid, problem.activation.memory_mib, UNUSABLE).min(axis=1).astype(np.int64)
    even = (problem.keys["first_stage_layers"] == 0) & (problem.keys["last_stage_layers"] == 0)
    state_mib = problem.state.memory_mib.astype(np.int64)
    fits = ~even[:, None] | (state_mib + np.minimum(leanest, UNUSABLE // 2)[:, None] - 1 <= problem.budget_mib.astype(np.int64)[:, None])
    state = np.where(front & fits, problem.state.time_ticks, UNUSABLE).min(axis=1).astype(np.int64)
    usable = (state < UNUSABLE) & (activation < UNUSABLE)
    return np.where(usable, state + np.where(usable, activation, 0) - 1, UNUSABLE)


def _best_first(problem: Problem, alike: bool) -> tuple[list["_Group"], list[np.ndarray]]:
    """The groups (and their bases' exact bounds) of every key whose lower bound
    (``key_lower_bounds``) does not exceed the best exact bound found, visited in the order of
    their lower bounds in batches; the rest cannot hold a base that reaches the optimum, so
    the least bound and all its ties are among those returned (in enumeration order)."""
    front = state_front(problem)
    lower = key_lower_bounds(problem, front)
    order = np.argsort(lower, kind="stable")
    order = order[lower[order] < UNUSABLE]
    found: list[tuple[_Group, np.ndarray]] = []
    best, start, size, rows = UNUSABLE, 0, FIRST_BATCH_KEYS, 0
    while start < order.size and lower[order[start]] <= best:
        batch = order[start:start + size]
        batch = batch[lower[batch] <= best]
        for group in _groups(problem, batch, front):
            bound = _group_bounds(problem, group, alike)
            rows += group.seconds.size * group.state_items.size
            found.append((group, bound))
            if bound.size:
                best = min(best, int(bound.min()))
        if rows > MAX_STAGE_LITERALS:
            raise InputError(f"the per-stage search tabled {rows:,} stage candidates without closing its bound, more than "
                             f"{MAX_STAGE_LITERALS:,}; pin the layout (--pin tensor_parallel=.. --pin pipeline_parallel=.. --pin gpus=..)")
        start, size = start + size, size * 2
    if best >= UNUSABLE:  # nothing fits: every key's groups, for the reason that names the closest stage
        done = {group.key for group, _ in found}
        rest = np.array([key for key in range(problem.key_count) if key not in done], dtype=np.int64)
        found += [(group, _group_bounds(problem, group, alike)) for group in (_groups(problem, rest, front) if rest.size else [])]
    found.sort(key=lambda entry: entry[0].key)  # stable: a key's groups keep their order
    return [group for group, _ in found], [bound for _, bound in found]


UNUSABLE = np.iinfo(np.int64).max
"""The bound of a base some stage of which has no candidate that fits."""


def _group_ticks(problem: Problem, group: _Group) -> tuple[np.ndarray, np.ndarray]:
    """(time ticks, memory MiB) of shape (state items, stages, candidates): as ``StageBase`` holds them."""
    state_ticks = problem.state.time_ticks[group.key, group.state_items].astype(np.int64)[:, None, None]
    state_mib = problem.state.memory_mib[group.key, group.state_items].astype(np.int64)[:, None, None]
    ticks = state_ticks + np.rint(group.seconds / problem.tick_s).astype(np.int64)[None]
    mib = state_mib + np.ceil(group.memory_bytes / BYTES_PER_MIB).astype(np.int64)[None]
    return ticks, mib


def _group_bounds(problem: Problem, group: _Group, alike: bool = False) -> np.ndarray:
    """Each base's exact bound (``stage_model.base_bound``), for all the group's state items at
    once; with ``alike``, the bound of the same candidate on every stage."""
    ticks, mib = _group_ticks(problem, group)
    fits = mib <= int(problem.budget_mib[group.key])
    if alike:
        return np.where(fits.all(axis=1), ticks.max(axis=1), UNUSABLE).min(axis=1)
    return np.where(fits, ticks, UNUSABLE).min(axis=2).max(axis=1)


def _group_bases(problem: Problem, group: _Group, state_items: np.ndarray | None = None) -> list["_Base"]:
    found = []
    budget = int(problem.budget_mib[group.key])
    for state_item in (group.state_items if state_items is None else state_items).tolist():
        stage = StageBase(
            time_ticks=problem.state.time_ticks[group.key, state_item] + np.rint(group.seconds / problem.tick_s).astype(np.int64),
            memory_mib=problem.state.memory_mib[group.key, state_item] + np.ceil(group.memory_bytes / BYTES_PER_MIB).astype(np.int64),
            valid=np.ones(group.seconds.shape, dtype=bool), budget_mib=budget)
        found.append(_Base(group.key, state_item, group.shared, group.names, stage, group.seconds + problem.state.time_s[group.key, state_item],
                           group.memory_bytes + problem.state.memory_bytes[group.key, state_item], group.in_flight))
    return found


def _alike(base: "_Base") -> "_Base":
    """The base as one stage whose candidates are the same choice on every stage: its time the
    slowest stage's, its memory the heaviest's, valid where every stage runs it."""
    stage = base.stage
    fits = stage.valid & (stage.memory_mib <= stage.budget_mib)
    one = StageBase(time_ticks=stage.time_ticks.max(axis=0, keepdims=True), memory_mib=stage.memory_mib.max(axis=0, keepdims=True),
                    valid=fits.all(axis=0, keepdims=True), budget_mib=stage.budget_mib)
    return _Base(base.key, base.state_item, base.shared, base.names, one, base.seconds, base.memory_bytes, base.in_flight, stage)


def _unalike(base: "_Base") -> "_Base":
    return _Base(base.key, base.state_item, base.shared, base.names, base.stages_of, base.seconds, base.memory_bytes, base.in_flight)


def _bases(problem: Problem) -> list[_Base]:
    """Every base, built (the oracle tests read them; the search builds only its ties)."""
    return [base for group in _groups(problem) for base in _group_bases(problem, group)]


def _answer(problem: Problem, base: _Base, candidates: tuple[int, ...]) -> PerStageAnswer:
    key = base.key
    constant_bytes = float(problem.constant_bytes[key])  # logits and reserve: what the budget already left out
    budget_bytes = float(problem.budget_mib[key]) * BYTES_PER_MIB + constant_bytes
    counts = layers_of_each_stage(problem.model.layers, int(problem.keys["pipeline_parallel"][key]),
                                  int(problem.keys["first_stage_layers"][key]), int(problem.keys["last_stage_layers"][key]))
    names = list(base.names)
    stages = []
    for stage, candidate in enumerate(candidates):
        fitting = [index for index in range(candidate) if base.stage.memory_mib[stage, index] <= base.stage.budget_mib]
        name = names[candidate]
        if name.startswith("block:"):
            count = int(name.split(":")[1])
            previous = names.index("none" if count == 1 else f"block:{count - 1}")
            if base.stage.memory_mib[stage, previous] > base.stage.budget_mib:
                fitting = []
                candidate_before = previous
            else:
                candidate_before = None
        else:
            candidate_before = candidate - 1 if candidate else None
        if candidate == 0:
            why = f"holds {micro_batches_phrase(base.in_flight[stage])} in flight and fits with {names[0]}"
        elif not fitting:
            recomputes = f"recomputes {min(count, counts[stage])} of its {counts[stage]} layers, the fewest that fit; " if name.startswith("block:") else ""
            why = (f"holds {micro_batches_phrase(base.in_flight[stage])} in flight: {recomputes}{names[candidate_before]} would need "
                   f"{format_bytes(base.memory_bytes[stage, candidate_before] + constant_bytes)} of the {format_bytes(budget_bytes)} budget")
        else:  # a lighter candidate that fits is slower here than the step the slowest stage sets
            lighter = fitting[-1]
            why = (f"{names[lighter]} fits ({format_bytes(base.memory_bytes[stage, lighter] + constant_bytes)}) but would make this stage "
                   f"the slowest ({base.seconds[stage, lighter]:.3f} s)")
        stages.append(StagePlan(stage=stage, layers=counts[stage], checkpointing=names[candidate],
                                in_flight_micro_batches=float(base.in_flight[stage]),
                                memory_bytes=float(base.memory_bytes[stage, candidate]) + constant_bytes, budget_bytes=budget_bytes,
                                slot_seconds=float(base.seconds[stage, candidate]), why=why))
    step_s = max(plan.slot_seconds for plan in stages)
    layout = {name: int(problem.keys[name][key]) for name in KEY_COLUMNS}
    layout["gpu"] = problem.gpus[int(problem.keys["gpu_index"][key])].name
    layout.update(problem.state.values[base.state_item])
    return PerStageAnswer(key=key, state_item=base.state_item, shared=dict(base.shared), stages=tuple(stages), step_s=step_s,
                          tokens_per_s=problem.workload.global_batch * problem.workload.seq_len / step_s, layout=layout,
                          plan=_decoded_plan(problem, base, stages[0].checkpointing))


def _decoded_plan(problem: Problem, base: _Base, first: str):
    """The base's plan, decoded as the uniform solver decodes its choice."""
    from vramopt.optimizer.decode import decode_choice
    from vramopt.optimizer.oracle import Choice

    shared = dict(base.shared)
    items = [index for index, item in enumerate(problem.activation.values) if problem.activation.valid[base.key, index]
             and all(item.get(field) == value for field, value in shared.items())]
    named = {problem.activation.values[index]["checkpointing"]: index for index in items}
    item = named.get(first, named.get("none", items[0]))
    return decode_choice(problem, Choice(key=base.key, state_item=base.state_item, activation_item=item, objective=()))


def _infeasible_reason(problem: Problem, groups: list[_Group]) -> str:
    """The base whose tightest stage comes closest to its budget, and that stage (the first
    such base in enumeration order: ``stage_model.tightest_stage`` over every base)."""
    if not groups:
        return "no layout of the space has a well-formed plan"
    best = None
    for group in groups:
        _, mib = _group_ticks(problem, group)
        budget = int(problem.budget_mib[group.key])
        least = mib.min(axis=2)  # (state items, stages)
        stages = np.argmax(least - budget, axis=1)
        needs = least[np.arange(least.shape[0]), stages]
        at = int(np.argmin(needs - budget))
        if best is None or int(needs[at]) - budget < best[0]:
            best = (int(needs[at]) - budget, int(stages[at]), int(needs[at]), group.key, budget)
    excess, stage, least, key, budget = best
    return (f"no per-stage plan fits: in the closest layout, stage {stage} of {int(problem.keys['pipeline_parallel'][key])} "
            f"needs at least {least:,} MiB with its leanest checkpointing, {excess:,} MiB over its budget of {budget:,} MiB")
