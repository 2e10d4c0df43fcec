"""One-line plan descriptions for messages, from the techniques' ``Contribution.brief``.

'16x b200, tp=8 ep=8 etp=1 pp=1 dp=2, zero=3, micro_batch=1': the layout part is every
technique's brief phrase in ``registry.PLAN_ORDER`` (tp always, cp and ep above 1, etp where
it differs from tp, uneven stage counts, dp), so a new layout technique shows itself.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any, Mapping

from vramopt.constraints import registry
from vramopt.parallel_layout import ParallelLayout


def layout_brief(plan: Mapping[str, Any], *, data_parallel: bool = True) -> str:
    """'tp=2 cp=2 pp=4 dp=8' of a plan dict (with its data_parallel)."""
    phrases = [technique.contribution.brief(plan) for technique in registry.training_techniques()
               if technique.contribution.brief is not None and (data_parallel or technique.field != "data_parallel")]
    return " ".join(phrase for phrase in phrases if phrase)


def compact_layout_brief(plan: Mapping[str, Any]) -> str:
    """'tp2 cp2 ep8 pp4 dp8' of a plan dict: the same phrases as ``layout_brief`` with each
    'name=degree' closed up, for the one-line rows of the front and pack tables."""
    return re.sub(r"\b([a-z]+)=(\d+)\b", r"\1\2", layout_brief(plan))


def training_brief(plan: Mapping[str, Any]) -> str:
    """'tp2 pp4 dp8 ZeRO-1 bf16 offload=none ckpt=selective' of a training plan dict: the
    layout (hybrid sharding's group among its phrases), then the memory techniques the front,
    cost-front and pack tables compare."""
    return (f"{compact_layout_brief(plan)} ZeRO-{plan['zero_stage']} {plan['precision']} offload={plan['offload']} "
            f"ckpt={plan['checkpointing']}")


def plan_mapping(plan) -> dict[str, Any]:
    """A TrainingPlan as the dict the briefs read, with its data-parallel degree."""
    return {**asdict(plan), "data_parallel": ParallelLayout.from_plan(plan).data_parallel}
