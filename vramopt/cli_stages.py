"""The per-stage checkpointing flags of ``estimate`` (``--stage-checkpointing``) and ``solve``
(``--per-stage``): the options, and the refusals of the requests they do not apply to."""

from __future__ import annotations

from typing import Any

import click

stage_checkpointing_option = click.option(
    "--stage-checkpointing", "stage_checkpointing", type=str, default=None, metavar="V0,V1,...",
    help="training with pipeline stages: also evaluate one checkpointing per stage, first to last (none, selective, "
         "full, every:K or block:N: the first N layers of the stage recomputed), e.g. block:4,block:2,none,none.")

per_stage_option = click.option(
    "--per-stage", "per_stage", is_flag=True, default=False,
    help="training: also search one activation checkpointing per pipeline stage (none, selective, every:K, block:N) "
         "and show that optimum and its gain next to the uniform answer, which stays as it is.")


def check_stage_checkpointing(stage_checkpointing: str | None, output_format: str, training: bool) -> None:
    """``estimate --stage-checkpointing``: a training plan, and a view that can hold the stages."""
    if stage_checkpointing is None:
        return
    if not training:
        raise click.UsageError("--stage-checkpointing applies to training plans with pipeline stages")
    if output_format == "csv":
        raise click.UsageError("--stage-checkpointing has no CSV view (one row cannot hold the stages); use --format json or table")


def check_per_stage(per_stage: bool, engine: str, output_format: str, workload: Any, space: Any) -> None:
    """``solve --per-stage``: CP-SAT, a view that can hold the stages, and a request the per-stage
    search takes (a training one maximizing tokens/s), refused before any search."""
    if not per_stage:
        return
    if engine != "cp-sat":
        raise click.UsageError("--per-stage is searched by CP-SAT; the exhaustive engine is the oracle over uniform plans")
    if output_format == "csv":
        raise click.UsageError("--per-stage has no CSV view (one row cannot hold the stages); use --format json or table")
    from vramopt.stage_checkpointing import check_per_stage_request

    check_per_stage_request(workload, space)
