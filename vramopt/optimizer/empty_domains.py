"""Name the plan field whose values a request empties, instead of a misleading reason.

A field's values come from its default domain, an --allow list or a --pin, less its
--forbid values; the problem builders then drop, without a word, each value that cannot be
part of any plan (a tensor-parallel degree that does not divide the heads, a checkpoint
interval that does not divide a pipeline stage's layers, ...). When that leaves a field
with no value there is no plan, and the answer must name that field, the values it was
given, why each one went and what to change, not blame whatever is checked next.

The rules here are the builders' single-field filters, each over the surviving values of
the fields it depends on (checkpointing over the pipeline degrees left, offload over the
ZeRO stages left, ...). Each is a necessary condition of a plan, so a field reported here
is empty on every GPU type searched and no plan exists
(tests/regression/test_empty_domain_reasons.py checks this against the exhaustive oracle);
a request that empties no single field goes on to the builders unchanged. Values that the
builders refuse with their own error (a pinned precision the GPU cannot run) are left to
them.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from vramopt.costs.pipeline_stages import counts_interleave, pipeline_degrees, stage_count_sets, stage_splits
from vramopt.constraints import registry
from vramopt.constraints.mig import NO_MIG
from vramopt.constraints.parallelism import divisors, gpu_counts
from vramopt.constraints.precision import PREFERENCE
from vramopt.constraints.technique import DomainContext
from vramopt.costs.columns import CHECKPOINT_EVERY
from vramopt.costs.inference import KV_CACHE_DTYPES, QUANTIZATION_NEEDS, QUANTIZATIONS
from vramopt.errors import InfeasibleError, InputError
from vramopt.optimizer.domain_values import MAX_LISTED, listing, nearest_value, text
from vramopt.models.checkpoint_quantization import checkpoint_format
from vramopt.plan import parse_checkpointing
from vramopt.types import PRECISIONS, GpuSpec, ModelSpec, SearchSpace



@dataclass(frozen=True, slots=True)
class EmptyDomain:
    """A plan field left without a value, why, and the changes to try."""

    field: str
    reason: str
    """The field, the values it was given, and why each one was removed."""
    fixes: tuple[tuple[str, Mapping[str, Any]], ...]
    """Changes to try, each as the user writes it and as the ``SearchSpace`` fields it sets
    (``explain.explain_empty_domain`` re-solves each one before proposing it)."""


class EmptyDomainError(InputError, InfeasibleError):
    """The request's own choices leave a plan field without a value: an input to fix (an
    ``InputError``) that ``solve`` answers as infeasible, with the explanation."""

    def __init__(self, empty: EmptyDomain) -> None:
        hint = f"; try {empty.fixes[0][0]}" if empty.fixes else ""
        InfeasibleError.__init__(self, empty.reason + hint)
        self.empty = empty


class _Stop(Exception):
    """Internal: the first empty field of one GPU type's chain of checks."""

    def __init__(self, empty: EmptyDomain) -> None:
        super().__init__(empty.field)
        self.empty = empty


class _Chain:
    """The fields of one GPU type, checked in dependency order; raises ``_Stop`` at the
    first one left empty."""

    def __init__(self, space: SearchSpace, choices: Mapping[str, Mapping[str, tuple]], context: DomainContext) -> None:
        self.space, self.choices, self.context = space, choices, context

    def keep(
        self,
        field: str,
        why: Callable[[Any], str | None] = lambda value: None,
        default: Sequence[Any] | None = None,
        universe: Callable[[], Iterable[Any]] = tuple,
        label: str | None = None,
        fixes: Callable[[list], list] = lambda values: [],
    ) -> list:
        """The values of ``field`` that survive; ``why(value)`` says why one cannot be part
        of a plan (None: it can); ``universe()`` the values to propose instead."""
        choices = self.choices
        if field in choices["pin"]:
            listed, source = choices["pin"][field], "pinned"
        elif field in choices["allow"]:
            listed, source = choices["allow"][field], "allowed"
        else:
            listed = default if default is not None else registry.technique(field).default_values(self.context)
            source = "default"
        forbidden = choices["forbid"].get(field, ())
        forbidden_set = set(forbidden)
        kept, removed = [], []
        for value in listed:
            if value in forbidden_set:
                removed.append((value, f"forbidden (--forbid {field}={','.join(text(item) for item in forbidden)})"))
                continue
            reason = why(value)
            if reason is None:
                kept.append(value)
            else:
                removed.append((value, reason))
        if kept:
            return kept
        raise _Stop(self._empty(field, label or source, listed, removed, forbidden_set, why, universe, fixes))

    def _empty(self, field, label, listed, removed, forbidden, why, universe, fixes) -> EmptyDomain:
        groups: dict[str, list] = {}
        for value, reason in removed:
            groups.setdefault(reason, []).append(value)
        clauses = [f"{listing(values)} ({label}) {'is' if len(values) == 1 else 'are'} {reason}" for reason, values in groups.items()]
        if not listed:
            clauses = ["its default domain has no value for this GPU"]
        valid = [value for value in dict.fromkeys(list(universe()) + list(listed)) if why(value) is None]
        reason = f"{field} has no value left to search: " + "; ".join(clauses)
        if valid and any(not why_text.startswith("forbidden") for why_text in groups):
            reason += f" (valid: {listing(valid)})"
        alternatives = [value for value in valid if value not in forbidden]
        space = self.space
        changes: list[tuple[str, dict]] = list(fixes([value for value in listed if value not in forbidden]))
        if field in space.pin and alternatives:
            nearest = nearest_value(listed[0], alternatives)
            changes.append((f"--pin {field}={text(nearest)}", {"pin": {**space.pin, field: text(nearest)}}))
        elif field in space.allow and alternatives:
            chosen = alternatives[:MAX_LISTED]
            changes.append((f"--allow {field}={','.join(text(value) for value in chosen)}",
                            {"allow": {**space.allow, field: tuple(text(value) for value in chosen)}}))
        if field in space.forbid:
            changes.append((f"drop --forbid {field}", {"forbid": {key: value for key, value in space.forbid.items() if key != field}}))
        if field not in space.pin and field not in space.allow and alternatives and not set(alternatives) & set(listed):
            # A value outside the default domain (searched only when asked): after dropping the forbid.
            changes.append((f"--allow {field}={text(alternatives[0])}", {"allow": {**space.allow, field: (text(alternatives[0]),)}}))
        if field in space.allow and field not in space.pin:
            changes.append((f"drop --allow {field}", {"allow": {key: value for key, value in space.allow.items() if key != field}}))
        return EmptyDomain(field, reason, tuple(changes))


def _more_gpus_fix(wanted: Callable[[list], list]) -> Callable[[list], list]:
    def fixes(values: list) -> list:
        needed = wanted(values)
        return [(f"--max-gpus {min(needed)}", {"max_gpus": min(needed)})] if needed else []

    return fixes


def _context(model: ModelSpec, gpu: GpuSpec, space: SearchSpace, global_batch: int, kind: str, seq_len: int = 0) -> DomainContext:
    return DomainContext(
        layers=model.layers, gpus_per_node=gpu.node.gpus_per_node, max_gpus=space.max_gpus, global_batch=global_batch,
        allow_tp_across_nodes=space.allow_tp_across_nodes, allow_fp4=space.allow_fp4,
        supported_precisions=tuple(name for name in PRECISIONS if gpu.supports(name)), kind=kind, seq_len=seq_len,
        experts=model.moe.experts if model.moe is not None else 0, checkpoint_format=checkpoint_format(model),
    )


def largest_gpu_count(max_gpus: int, gpus_per_node: int, whole_nodes: bool) -> int:
    """max(parallelism.gpu_counts(...)) without listing the counts."""
    if not whole_nodes or max_gpus <= gpus_per_node:
        return max_gpus
    whole = max_gpus // gpus_per_node * gpus_per_node
    return whole if whole >= 2 * gpus_per_node else gpus_per_node


def _layout(chain: _Chain, model: ModelSpec, gpu: GpuSpec, space: SearchSpace, serving: bool) -> tuple[list, list, int]:
    """Tensor and pipeline degrees and the largest GPU count: what training and serving share."""
    gpus_per_node = gpu.node.gpus_per_node
    if any("gpus" in choices for choices in chain.choices.values()):
        counts = chain.keep(
            "gpus",
            lambda count: None if count <= space.max_gpus else f"above --max-gpus {space.max_gpus}",
            default=gpu_counts(space.max_gpus, gpus_per_node, space.whole_nodes),
            fixes=_more_gpus_fix(lambda values: [value for value in values if value > space.max_gpus]),
        )
        most = max(counts)
    else:
        # The default counts all fit; only the largest matters (no million-entry list).
        most = largest_gpu_count(space.max_gpus, gpus_per_node, space.whole_nodes)

    def tensor_reason(degree: int) -> str | None:
        if model.heads % degree != 0:
            return f"not a divisor of {model.name}'s {model.heads} attention heads"
        if model.kv_heads % degree != 0 and degree % model.kv_heads != 0:
            return f"not compatible with {model.name}'s {model.kv_heads} KV heads (one must divide the other)"
        if degree > gpus_per_node and not space.allow_tp_across_nodes:
            return (f"wider than one {gpus_per_node}-GPU {gpu.name} node (tensor parallelism stays inside the NVLink "
                    "domain unless --allow-tp-across-nodes)")
        if degree > most:
            return f"more than the {most} GPUs a plan may use"
        return None

    def tensor_fixes(values: list) -> list:
        wide = [value for value in values if model.heads % value == 0 and value > gpus_per_node]
        return [("--allow-tp-across-nodes", {"allow_tp_across_nodes": True})] if wide and not space.allow_tp_across_nodes else []

    tensor = chain.keep("tensor_parallel", tensor_reason, universe=lambda: divisors(model.heads), fixes=tensor_fixes)

    def pipeline_reason(degree: int) -> str | None:
        if model.layers % degree != 0 and (serving or not stage_splits(model.layers, degree)):
            return (f"not a divisor of {model.name}'s {model.layers} layers" if serving else
                    f"neither a divisor of {model.name}'s {model.layers} layers nor a degree with an uneven split "
                    "(first/last stage at most ceil(layers / pp) layers)")
        if degree > most:
            return f"more than the {most} GPUs a plan may use"
        return None

    pipeline = chain.keep(
        "pipeline_parallel", pipeline_reason,
        universe=lambda: [value for value in divisors(model.layers) if value <= 8] if serving else pipeline_degrees(model.layers, 1 << 20),
        fixes=_more_gpus_fix(lambda values: [value for value in values
                                             if (model.layers % value == 0 or stage_splits(model.layers, value)) and value > most]),
    )
    return tensor, pipeline, most


def _training_chain(chain: _Chain, model: ModelSpec, gpu: GpuSpec, space: SearchSpace, global_batch: int, seq_len: int = 0) -> None:
    tensor, pipeline, most = _layout(chain, model, gpu, space, serving=False)

    for technique in registry.training_techniques():  # the key fields that explain their own values
        if technique.explain_values is not None:
            reason, universe = technique.explain_values(seq_len=seq_len, most=most)
            chain.keep(technique.field, reason, universe=universe)

    def data_parallel_reason(degree: int) -> str | None:
        if global_batch % degree != 0:
            return f"not a divisor of the global batch of {global_batch:,} sequences"
        if degree > most:
            return f"more than the {most} GPUs a plan may use"
        return None

    data_parallel = chain.keep("data_parallel", data_parallel_reason, default=divisors(global_batch), universe=lambda: divisors(global_batch))
    # fp4 training is experimental (off unless --allow-fp4): never proposed as a fix.
    precisions = chain.keep("precision", universe=lambda: [name for name in PREFERENCE if gpu.supports(name) and (name != "fp4" or space.allow_fp4)])

    def micro_batch_reason(size: int) -> str | None:
        if global_batch % size != 0:
            return f"not a divisor of the global batch of {global_batch:,} sequences"
        if not any((global_batch // degree) % size == 0 for degree in data_parallel):
            return (f"not a divisor of global_batch / data_parallel for any data-parallel degree left "
                    f"({listing(data_parallel)})")
        return None

    chain.keep("micro_batch", micro_batch_reason, universe=lambda: divisors(global_batch // min(data_parallel)))
    zero_stages = chain.keep("zero_stage")

    def offload_reason(name: str) -> str | None:
        from vramopt.costs.columns import OFFLOAD_NAMES
        from vramopt.costs.offload import OFFLOAD_RULES

        for code, lowest, message in OFFLOAD_RULES:  # the rules' one home: costs/offload.py
            if name == OFFLOAD_NAMES[code] and not any(stage >= lowest for stage in zero_stages):
                return f"not valid: {message}, and zero_stage can only be {listing(zero_stages)}"
        return None

    chain.keep("offload", offload_reason, universe=lambda: ("none", "cpu", "nvme"))
    follows = "grad_comm_precision" not in chain.choices["pin"] and "grad_comm_precision" not in chain.choices["allow"]
    # By default gradients travel in the training precision: the values are those left.
    chain.keep("grad_comm_precision", default=tuple(precisions) if follows else None, universe=lambda: PRECISIONS,
               label="following precision" if follows else None)
    # Each degree's stage layer counts (even, or its uneven splits): every:k must divide all of one.
    degree_stage_sets = stage_count_sets(model.layers, pipeline)
    stage_sets = [counts for _, counts in degree_stage_sets]
    stages = sorted({count for counts in stage_sets for count in counts}, reverse=True)

    def checkpointing_reason(value: str) -> str | None:
        kind, every = parse_checkpointing(value)
        if kind != CHECKPOINT_EVERY or any(all(count % every == 0 for count in counts) for counts in stage_sets):
            return None
        return (f"not valid for {model.name}: the interval must divide the layers of one pipeline stage, and its "
                f"{model.layers} layers make stages of {listing(stages)} layers (pipeline_parallel {listing(pipeline)})")

    def checkpointing_universe() -> list[str]:
        intervals = sorted({interval for counts in stage_sets for interval in divisors(math.gcd(*counts))})
        return ["none", "selective"] + [f"every:{interval}" for interval in intervals]

    chain.keep("checkpointing", checkpointing_reason, universe=checkpointing_universe)
    chain.keep("flash_attention")

    def sequence_parallel_reason(value: bool) -> str | None:
        if value and all(degree == 1 for degree in tensor):
            return "not valid: sequence parallelism needs tensor_parallel > 1, and tensor_parallel can only be 1"
        return None

    chain.keep("sequence_parallel", sequence_parallel_reason, universe=lambda: (False, True))
    deep = [degree for degree in pipeline if degree > 1]

    def virtual_stages_reason(chunks: int) -> str | None:
        if chunks == 1:
            return None
        if not deep:
            return "not valid: an interleaved pipeline needs pipeline_parallel > 1, and pipeline_parallel can only be 1"
        deep_sets = [counts for degree, counts in degree_stage_sets if degree > 1]
        if not any(counts_interleave(counts, chunks) for counts in deep_sets):
            deep_counts = sorted({count for counts in deep_sets for count in counts}, reverse=True)
            return (f"not valid: the layers of a stage must split into that many chunks (the ends may hold one layer fewer), and {model.name}'s stages have "
                    f"{listing(deep_counts)} layers (pipeline_parallel {listing(deep)})")
        return None

    chain.keep("virtual_stages", virtual_stages_reason, universe=lambda: divisors(model.layers))


def _serving_chain(chain: _Chain, model: ModelSpec, gpu: GpuSpec, space: SearchSpace) -> None:
    tensor, pipeline, _ = _layout(chain, model, gpu, space, serving=True)
    # A weight format no searched GPU runs is refused by the builder when pinned or allowed,
    # and is left out of the default: only the forbids can empty this field here.
    chain.keep("quantization", universe=lambda: [name for name, needs in zip(QUANTIZATIONS, QUANTIZATION_NEEDS) if gpu.supports(needs)])
    profiles = tuple(profile.name for profile in gpu.mig_profiles)

    def mig_reason(name: str) -> str | None:
        # A profile name this GPU lacks is refused by the builder when no searched GPU has
        # it, and kept by the GPUs that have it: never the reason a field is empty.
        if name != NO_MIG and name in profiles and (1 not in tensor or 1 not in pipeline):
            return ("not valid: a MIG instance serves one replica without tensor or pipeline parallelism, and "
                    "tensor_parallel or pipeline_parallel excludes 1")
        return None

    default_mig = None if "mig_profile" in chain.choices["allow"] else (NO_MIG,) + profiles
    chain.keep("mig_profile", mig_reason, default=default_mig, universe=lambda: (NO_MIG,) + profiles)

    def kv_reason(name: str) -> str | None:
        return f"not supported: {gpu.name} has no fp8 support" if name == "fp8" and not gpu.supports("fp8") else None

    chain.keep("kv_cache_dtype", kv_reason, universe=lambda: KV_CACHE_DTYPES)
    for field in ("paged_kv", "speculative_decoding", "slots"):
        chain.keep(field)


def find_empty_domain(model: ModelSpec, workload, space: SearchSpace, choices, gpus: Sequence[GpuSpec]) -> EmptyDomain | None:
    """The plan field that the request leaves without a value on every GPU type searched
    (the first in dependency order), or None."""
    serving = workload.kind == "infer"
    found = []
    for gpu in gpus:
        global_batch = 1 if serving else workload.global_batch
        seq_len = 0 if serving else workload.seq_len
        chain = _Chain(space, choices, _context(model, gpu, space, global_batch, workload.kind, seq_len))
        try:
            if serving:
                _serving_chain(chain, model, gpu, space)
            else:
                _training_chain(chain, model, gpu, space, global_batch, seq_len)
        except _Stop as stop:
            found.append(stop.empty)
            continue
        return None
    first = found[0]
    if any(item.field != first.field for item in found[1:]):
        return None
    if len(gpus) > 1:
        others = ", ".join(gpu.name for gpu in gpus[1:])
        first = EmptyDomain(first.field, f"{first.reason} (on {gpus[0].name}; {first.field} is left empty on {others} too)", first.fixes)
    return first


def raise_on_empty_domain(model: ModelSpec, workload, space: SearchSpace, choices, gpus: Sequence[GpuSpec]) -> None:
    empty = find_empty_domain(model, workload, space, choices, gpus)
    if empty is not None:
        raise EmptyDomainError(empty)
