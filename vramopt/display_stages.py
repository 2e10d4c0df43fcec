"""The table view of a response's per-stage checkpointing block (``per_stage``: issue 18 item 1)."""

from __future__ import annotations

from typing import Any, Mapping

from vramopt.units import format_bytes


def render_stages(response: Mapping[str, Any]) -> str:
    """The per-stage lines, or '' when the response has no per-stage block."""
    block = response.get("per_stage")
    if not block:
        return ""
    uniform = block.get("uniform_tokens_per_s")
    compared = "" if uniform is None else (
        f" ({block['gain_fraction']:+.2%} against the uniform plan, checkpointing {block['uniform_checkpointing']}: {uniform:,.1f} tokens/s"
        f"{'' if block.get('uniform_fits', True) else ', which does not fit'})")
    lines = ["per-stage checkpointing:",
             f"  {block['tokens_per_s']:,.1f} tokens/s, step {block['step_time_s']:.3f} s set by stage {block['slowest_stage']}{compared}"]
    plan = block.get("plan")
    if plan:
        lines.append(f"  layout: {plan['gpus']}x {plan['gpu']} tp={plan['tensor_parallel']} pp={plan['pipeline_parallel']} "
                     f"dp={plan['data_parallel']} v={plan['virtual_stages']} mb={plan['micro_batch']} zero={plan['zero_stage']} "
                     f"offload={plan['offload']}")
    for row in block["stages"]:
        lines.append(f"  stage {row['stage']}: {row['layers']} layers, {row['checkpointing']:<10} {row['in_flight_micro_batches']:.3g} "
                     f"in flight, {format_bytes(row['memory_bytes'])} of {format_bytes(row['budget_bytes'])} "
                     f"({format_bytes(row['headroom_bytes'])} to spare), {row['slot_seconds']:.3f} s; {row['why']}")
    if not block["fits"]:
        over = block["not_fitting_stages"]
        lines.append(f"  does not fit: stage{'s' if len(over) > 1 else ''} {', '.join(map(str, over))} over budget" if over else
                     "  does not fit: host RAM or NVMe")
    cannot = [name for name, expression in block["exports"].items() if not expression["expressible"]]
    if cannot:
        lines.append(f"  not expressible in {', '.join(cannot)} (--format json: per_stage.exports says why for each)")
    return "\n\n" + "\n".join(lines)
