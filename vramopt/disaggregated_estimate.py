"""``vramopt estimate`` of one disaggregated prefill/decode (xPyD) plan: the figures
``vramopt.disaggregated.estimate_disaggregated`` computes, as a response and a table.

The plan is given with ``--prefill-replicas``, ``--prefill-tp``, ``--decode-replicas`` and
``--decode-tp`` (``--slots`` are the decode replicas' max-num-seqs; ``--gpu``,
``--quantization``, ``--kv-cache-dtype``, ``--paged-kv`` and ``--speculative`` apply to both
sides as in a solve's disaggregated plan). The response (docs/json-contract.md,
"Disaggregated estimate") has the plan and requests objects of a solve's ``disaggregation``
object, each side's memory, whether both sides fit, whether the rate is served, and each
request target checked.
"""

from __future__ import annotations

from typing import Any, Mapping

from vramopt.disaggregated import DisaggregatedPlan, estimate_disaggregated
from vramopt.display_formats import table
from vramopt.display_requests import render_disaggregation
from vramopt.errors import InputError
from vramopt.optimizer.disaggregated_answer import MODEL, _requests

PLAN_OPTIONS = {"prefill_replicas": "--prefill-replicas", "prefill_tensor_parallel": "--prefill-tp",
                "decode_replicas": "--decode-replicas", "decode_tensor_parallel": "--decode-tp"}
"""The options that make ``estimate`` evaluate a disaggregated plan, all four together."""
COLOCATED_ONLY = {"gpus": "--gpus", "tensor_parallel": "--tp", "pipeline_parallel": "--pp", "mig_profile": "--mig-profile"}
"""Options of a colocated plan that a disaggregated one does not take."""


def disaggregated_plan(options: Mapping[str, Any], given) -> DisaggregatedPlan | None:
    """The plan the options give, or None when none of PLAN_OPTIONS is given; ``given(name)``
    says whether the user typed an option. Partial or conflicting options are an InputError."""
    named = [flag for name, flag in PLAN_OPTIONS.items() if options.get(name) is not None]
    if not named:
        return None
    if len(named) < len(PLAN_OPTIONS):
        missing = [flag for name, flag in PLAN_OPTIONS.items() if options.get(name) is None]
        raise InputError(f"a disaggregated plan needs {', '.join(PLAN_OPTIONS.values())}; missing {', '.join(missing)}")
    if options.get("workload_kind") != "infer":
        raise InputError(f"{named[0]} applies to --workload infer")
    clash = [flag for name, flag in COLOCATED_ONLY.items() if given(name)]
    if clash:
        verb = "describes" if len(clash) == 1 else "describe"
        raise InputError(f"{', '.join(clash)} {verb} a colocated plan; a disaggregated one is {', '.join(PLAN_OPTIONS.values())}")
    return DisaggregatedPlan(
        gpu=options["gpu"], prefill_replicas=options["prefill_replicas"], prefill_tensor_parallel=options["prefill_tensor_parallel"],
        decode_replicas=options["decode_replicas"], decode_tensor_parallel=options["decode_tensor_parallel"],
        quantization=options["quantization"], kv_cache_dtype=options["kv_cache_dtype"], paged_kv=options["paged_kv"],
        decode_slots=options["slots"], speculative_decoding=options["speculative_decoding"],
    )


def disaggregated_estimate(workload, plan: DisaggregatedPlan) -> dict[str, Any]:
    """The response of ``estimate`` for a disaggregated plan."""
    figures = estimate_disaggregated(workload, plan)
    memory = {}
    for side in ("prefill", "decode"):
        used = figures[side]["memory"]
        limit = used["capacity_bytes"] * (1.0 - workload.headroom_fraction)
        memory[side] = {"total_bytes": used["total_bytes"], "limit_bytes": limit, "capacity_bytes": used["capacity_bytes"],
                        "fits": bool(used["total_bytes"] <= limit)}
    targets = {"fits": bool(figures["fits"]), "load served": bool(figures["sustainable"])}
    if workload.ttft_p99_ms is not None:
        targets["p99 TTFT"] = bool(figures["ttft_p99_s"] * 1e3 <= workload.ttft_p99_ms)
    if workload.tpot_ms is not None:
        targets["mean TPOT"] = bool(figures["tpot_s"] * 1e3 <= workload.tpot_ms)
    failed = [name for name, met in targets.items() if not met]
    why = ("meets every requirement" if not failed else "fails: " + ", ".join(failed))
    return {
        "format": "vramopt/v1", "workload": "infer", "estimate": "disaggregated",
        "model": {"name": figures["case"].model.name},
        "plan": plan.to_dict(), "requests": _requests(figures), "memory": memory, "requirements": targets,
        "fits": targets["fits"], "served": targets["load served"],
        "why": f"{plan.label()} ({plan.gpus:,} GPUs) at {workload.rate_per_s:g} requests/s {why}",
        "queueing_model": MODEL,
    }


def render_disaggregated_estimate(result: Mapping[str, Any]) -> str:
    """The table view: the plan block of a solve's disaggregated answer, each side's memory
    per GPU, and each requirement."""
    shown = render_disaggregation({"disaggregation": {**result, "why": result["why"]}})
    rows = []
    for side in ("prefill", "decode"):
        memory = result["memory"][side]
        rows.append([side, f"{memory['total_bytes'] / 1e9:,.1f}", f"{memory['limit_bytes'] / 1e9:,.1f}",
                     "fits" if memory["fits"] else "DOES NOT FIT"])
    checks = "\n".join(f"  {name:<11} {'ok' if met else 'NOT MET'}" for name, met in result["requirements"].items())
    return "\n".join([f"model     {result['model']['name']}", shown, "", table(rows, ["memory per GPU", "GB", "limit GB", ""]), checks,
                      f"model     {result['queueing_model']}"])
