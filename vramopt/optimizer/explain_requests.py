"""Why a request load has no serving plan, and the smallest target relaxations.

Every plan row of the space (``serving_problem``'s rows and items, memory checked as the
solver checks it) is evaluated once without the TTFT and TPOT targets. The binding reason
is the first target that no memory-fitting plan meets even alone: the load itself (no plan
keeps up at the rate), then the time to first token (the fastest prefill of one prompt,
with no queue, already exceeds the p99 target), then the p99 TTFT, then the mean TPOT. The
relaxations are exact over the same rows: the smallest p99 TTFT among the plans that meet
the other targets (and the same for the TPOT), and the largest capacity if the rate binds.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from vramopt.constraints.validity import serving_invalid_reasons
from vramopt.costs.inference import ServingColumns, evaluate_serving
from vramopt.estimate import serving_case
from vramopt.optimizer.domains import parsed_user_choices
from vramopt.optimizer.tables import gpu_types
from vramopt.results import Explanation, Relaxation
from vramopt.types import PRECISIONS, SearchSpace

FIELDS = ("ttft_p99_s", "tpot_s", "prefill_tail_s", "sustainable", "capacity_requests_per_s")


def _evaluated_rows(workload, space: SearchSpace):
    """(values of every well-formed, memory-fitting row without the targets, the matching
    plan descriptions): the serving problem's rows, evaluated with the targets dropped."""
    from vramopt.optimizer import serving_problem as tables
    from vramopt.constraints.technique import DomainContext
    from vramopt.models.checkpoint_quantization import checkpoint_format

    loose = replace(workload, ttft_p99_ms=None, tpot_ms=None)
    choices = parsed_user_choices(space)
    gathered = {name: [] for name in FIELDS}
    labels: list[str] = []
    for gpu in gpu_types(space, choices):
        case = serving_case(loose, gpu.name)
        context = DomainContext(
            layers=case.model.layers, gpus_per_node=gpu.node.gpus_per_node, max_gpus=space.max_gpus, global_batch=1,
            allow_tp_across_nodes=space.allow_tp_across_nodes, allow_fp4=space.allow_fp4,
            supported_precisions=tuple(name for name in PRECISIONS if gpu.supports(name)), kind="infer",
            checkpoint_format=checkpoint_format(case.model), experts=case.model.moe.experts if case.model.moe is not None else 0,
        )
        items = tables._items([gpu], [context], choices)
        layout = tables._layouts_for_gpu(gpu, case.model, space, context, choices)
        rows = tables._rows(0, *layout)
        if not rows or not items:
            continue
        count = len(items)
        keys = np.array([row[1:] for row in rows], dtype=np.int64)
        columns = ServingColumns(
            **{name: np.repeat(keys[:, index], count) for index, name in enumerate(tables.SERVING_KEY_COLUMNS)},
            **tables.item_codes(items, len(rows)),
        )
        values = evaluate_serving(case, columns)
        keep = np.asarray(values["fits"], dtype=bool)
        for mask in serving_invalid_reasons(case, columns).values():
            keep &= ~np.asarray(mask, dtype=bool)
        for name in FIELDS:
            gathered[name].append(np.asarray(values[name])[keep])
        for index in np.flatnonzero(keep):
            split = f" ep={columns.expert_parallel[index]}" if columns.expert_parallel[index] > 1 else ""
            labels.append(f"{columns.gpus[index]}x {gpu.name} tp={columns.tensor_parallel[index]}{split} pp={columns.pipeline_parallel[index]}")
    if not labels:
        return None, []
    return {name: np.concatenate(arrays) for name, arrays in gathered.items()}, labels


def _lengths(workload) -> str:
    if workload.length_samples is not None:
        return f"{len(workload.length_samples):,} sampled request lengths"
    return f"{workload.input_tokens:,} + {workload.output_tokens:,} tokens"


def _prompt(workload) -> str:
    if workload.length_samples is not None:
        return "the 99.5th-percentile prompt of the length mix"
    return f"{workload.input_tokens:,} tokens"


def explain_request_load(workload, space: SearchSpace, relaxations: tuple[Relaxation, ...]) -> Explanation | None:
    """The binding request target and its smallest relaxation; None when memory (not a
    target) is what no plan meets, so the memory explanation applies."""
    values, labels = _evaluated_rows(workload, space)
    if values is None:
        return None
    served = values["sustainable"].astype(bool)
    ttft_target = None if workload.ttft_p99_ms is None else workload.ttft_p99_ms / 1e3
    tpot_target = None if workload.tpot_ms is None else workload.tpot_ms / 1e3
    found = list(relaxations)
    within = f"within {space.max_gpus:,} GPUs"
    if not served.any():
        best = int(np.argmax(values["capacity_requests_per_s"]))
        capacity = float(values["capacity_requests_per_s"][best])
        load = (f"{workload.rate_per_s:g} requests/s" if workload.rate_per_s is not None else f"{workload.concurrency:,} clients")
        found.append(Relaxation(f"--rate {math.floor(capacity * 100) / 100:g}", f"the most any plan {within} serves ({labels[best]}) at saturation"))
        return Explanation(f"no plan {within} keeps up with {load} of {_lengths(workload)}: "
                           f"the largest capacity is {capacity:,.2f} requests/s ({labels[best]})", "request_rate", None, None, tuple(found))
    ttft = np.where(served, values["ttft_p99_s"], np.inf)
    tpot = np.where(served, values["tpot_s"], np.inf)
    ttft_ok = ttft <= ttft_target if ttft_target is not None else np.ones_like(served)
    tpot_ok = tpot <= tpot_target if tpot_target is not None else np.ones_like(served)
    if ttft_target is not None and not ttft_ok.any():
        fastest = int(np.argmin(np.where(served, values["prefill_tail_s"], np.inf)))
        prefill = float(values["prefill_tail_s"][fastest])
        candidates = np.where(tpot_ok, ttft, np.inf)
        if candidates.min() < np.inf:
            best = int(np.argmin(candidates))
            found.append(Relaxation(f"--ttft-p99-ms {math.ceil(candidates[best] * 1e3)}",
                                    f"the smallest p99 TTFT {within} that keeps the other targets ({labels[best]})"))
        if prefill > ttft_target:
            reason = (f"prefill of {_prompt(workload)} alone takes {prefill:,.2f} s on the fastest plan {within} "
                      f"({labels[fastest]}); the p99 TTFT target is {ttft_target:g} s")
        else:
            best = int(np.argmin(ttft))
            reason = (f"the smallest p99 TTFT {within} at this load is {ttft[best]:,.2f} s ({labels[best]}: queueing + prefill"
                      + ("" if tpot_ok.any() else "; and no plan meets the TPOT target") + f"); the target is {ttft_target:g} s")
        return Explanation(reason, "ttft_target", None, None, tuple(found))
    if tpot_target is not None and not (ttft_ok & tpot_ok).any():
        candidates = np.where(ttft_ok, tpot, np.inf)
        best = int(np.argmin(candidates))
        if candidates[best] < np.inf:
            found.append(Relaxation(f"--tpot-ms {math.ceil(candidates[best] * 1e4) / 10:g}",
                                    f"the smallest mean TPOT {within} that keeps the other targets ({labels[best]})"))
        fastest = int(np.argmin(tpot))
        if tpot_ok.any() and candidates[best] < np.inf:
            # Each target alone is met by some plan, never both by one.
            reason = (f"no plan {within} meets both targets: the smallest mean TPOT within the p99 TTFT target is "
                      f"{candidates[best] * 1e3:,.1f} ms ({labels[best]}: the decode step with its prefill share); the target is {tpot_target * 1e3:g} ms")
        else:
            reason = (f"the smallest mean TPOT {within} at this load is {tpot[fastest] * 1e3:,.1f} ms ({labels[fastest]}: the decode step "
                      f"with its prefill share); the target is {tpot_target * 1e3:g} ms")
        return Explanation(reason, "tpot_target", None, None, tuple(found))
    return None
