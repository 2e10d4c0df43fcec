"""One-line plan descriptions for messages, from the techniques' ``Contribution.brief``.

'16x b200, tp=8 ep=8 etp=1 pp=1 dp=2, zero=3, micro_batch=1': the layout part is every
technique's brief phrase in ``registry.PLAN_ORDER`` (tp always, cp and ep above 1, etp where
it differs from tp, uneven stage counts, dp), so a new layout technique shows itself.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping

from vramopt.constraints import registry
from vramopt.parallel_layout import ParallelLayout


def layout_brief(plan: Mapping[str, Any], *, data_parallel: bool = True) -> str:
    """'tp=2 cp=2 pp=4 dp=8' of a plan dict (with its data_parallel)."""
    phrases = [technique.contribution.brief(plan) for technique in registry.training_techniques()
               if technique.contribution.brief is not None and (data_parallel or technique.field != "data_parallel")]
    return " ".join(phrase for phrase in phrases if phrase)


def plan_mapping(plan) -> dict[str, Any]:
    """A TrainingPlan as the dict the briefs read, with its data-parallel degree."""
    return {**asdict(plan), "data_parallel": ParallelLayout.from_plan(plan).data_parallel}
