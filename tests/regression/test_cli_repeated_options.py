"""Issue 11 item 12 (flags part): a single-value flag given twice (``--max-gpus 1
--max-gpus 64``) used to keep the last value silently. Every command refuses it with one
line; options meant to repeat (``--gpu`` of solve/pareto, ``--allow``, ``--forbid``,
``--pin``) still may.
"""

from __future__ import annotations

import click
import pytest

from tests.cli_runner import invoke
from vramopt import cli

BASE = {
    "solve": ["--model", "8b", "--max-gpus", "2", "--workers", "1"],
    "pareto": ["--model", "8b", "--max-gpus", "2"],
    "estimate": ["--model", "8b"],
    "gpus": [],
    "models": [],
    "pack": ["--cluster", "cluster.json", "--jobs", "jobs.json"],
    "sweep": ["--model", "8b", "--gpu", "h100", "--max-gpus", "1", "--workers", "1", "--output", "out.csv"],
    "validate": [],
}


def repeated(option: click.Option) -> list[str]:
    """The option twice, with a value its type accepts."""
    flag = option.opts[0]
    if option.is_flag:
        return [flag, option.secondary_opts[0] if option.secondary_opts else flag]
    if option.nargs == 2:  # --export TARGET PATH
        return [flag, "vllm", "a.json", flag, "vllm", "b.json"]
    if isinstance(option.type, click.Choice):
        values = list(option.type.choices)
        return [flag, str(values[0]), flag, str(values[-1])]
    if isinstance(option.type, (click.IntRange, click.FloatRange)) or option.type in (click.INT, click.FLOAT):
        return [flag, "1", flag, "2"]
    return [flag, "x", flag, "y"]


SINGLE_VALUE = [
    (command, option)
    for command, group in cli.main.commands.items()
    for option in group.params
    if isinstance(option, click.Option) and not option.multiple and not option.count and not option.is_eager and not option.hidden
]


@pytest.mark.parametrize("command, option", SINGLE_VALUE, ids=lambda item: item if isinstance(item, str) else item.name)
def test_every_single_value_option_given_twice_is_refused(command, option, tmp_path, monkeypatch):
    """issue 11 item 12: each single-value option of each command, given twice."""
    monkeypatch.chdir(tmp_path)
    base = list(BASE[command])
    if option.opts[0] in base:  # the baseline's own value goes: the option comes twice below
        index = base.index(option.opts[0])
        del base[index:index + 2]
    args = [command] + base + repeated(option)
    result = invoke(args)
    context = (args, result.exit_code, result.stderr[-500:])
    assert result.exit_code == 2, context
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, context
    assert "given more than once" in result.stderr and option.opts[0] in result.stderr, context


def test_the_issue_example_and_flag_pairs():
    """issue 11 item 12: the issue's example, and a flag with its negation."""
    result = invoke(["solve", "--model", "8b", "--max-gpus", "1", "--max-gpus", "64"])
    assert result.exit_code == 2 and "--max-gpus is given more than once" in result.stderr, result.stderr
    result = invoke(["solve", "--model", "8b", "--max-gpus", "2", "--whole-nodes", "--no-whole-nodes"])
    assert result.exit_code == 2 and "--whole-nodes/--no-whole-nodes" in result.stderr, result.stderr
    result = invoke(["--debug", "--debug", "gpus"])
    assert result.exit_code == 2 and "--debug" in result.stderr, result.stderr


def test_options_meant_to_repeat_still_do():
    """--gpu (solve/pareto), --allow/--forbid/--pin of different fields: accepted."""
    result = invoke(["solve", "--model", "8b", "--max-gpus", "2", "--workers", "1", "--gpu", "h100", "--gpu", "b200",
                     "--forbid", "offload=nvme", "--forbid", "precision=fp32", "--format", "json"])
    assert result.exit_code == 0, result.stderr
