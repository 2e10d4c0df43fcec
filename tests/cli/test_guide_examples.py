"""docs/guide.md cannot drift: every `$ vramopt ...` example is run and its shown output checked.

These are change detectors, not validation (pytest marker ``docs_snapshot``): a number the
guide shows is whatever vramopt printed when the page was written, so a passing test says
the guide matches the code, not that the code is right; the unit, golden and property tests
do that. After a change that moves numbers on purpose, run
``python benchmarks/regenerate_docs_outputs.py`` and review ``git diff docs``; deselect
these tests with ``-m "not docs_snapshot"`` (as benchmarks/mutation_test.py does).

The guide's conventions, read here:

- A ```console block holds one or more commands, each a line `$ vramopt ...` followed by
  the output it prints (stdout and stderr together, as a terminal shows them). A line
  `...` stands for output left out. Every other output line must appear in the real
  output, in the same order, as a whole line (trailing spaces ignored). `<ms>` (and
  `<s>`) stand for a run time that varies from run to run: any number.
- `[exit status N]` after the output gives the exit status; without it the status is 0,
  or 2 (vramopt's status for bad input and infeasible requests) when an `error:` line is
  shown.
- `<!-- file: NAME -->` before a fenced block makes the block an input file: it is
  written under NAME into the command's working directory (a fresh tmp_path) first.
- `<!-- written: NAME -->` before a ```json block shows a file a command writes: after
  any command that produces NAME, the file must hold the same JSON.
- ```pycon blocks are doctests, run in the same way.

Commands run in-process through click's CliRunner with the working directory set to
tmp_path, so the relative file names of the guide (front.csv, ds.json, ...) land there.
"""

from __future__ import annotations

import doctest
import importlib.util
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from vramopt import cli

pytestmark = pytest.mark.docs_snapshot

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide.md"
PLACEHOLDERS = {"<ms>": r"[0-9][0-9,.]*", "<s>": r"[0-9][0-9,.e+-]*"}
EXIT_LINE = re.compile(r"^\[exit status (\d+)\]$")
FILE_MARK = re.compile(r"^<!-- file: (\S+) -->$")
WRITTEN_MARK = re.compile(r"^<!-- written: (\S+) -->$")
FENCE = re.compile(r"^```(\S*)$")


@dataclass(frozen=True)
class Example:
    line: int  # 1-based line of the command in the guide
    command: str
    expected_lines: tuple[str, ...]
    exit_status: int


@dataclass(frozen=True)
class Guide:
    examples: tuple[Example, ...]
    input_files: dict[str, str]
    written_files: dict[str, str]
    doctests: tuple[tuple[int, str], ...]


def fenced_blocks(lines: list[str]):
    """(info string, index of the opening fence, body lines, the line before the fence)."""
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        start = index
        index += 1
        body = []
        while index < len(lines) and lines[index] != "```":
            body.append(lines[index])
            index += 1
        if index == len(lines):
            raise AssertionError(f"docs/guide.md line {start + 1}: unclosed code block")
        before = lines[start - 1] if start > 0 else ""
        yield match.group(1), start, body, before
        index += 1


def parse_guide(text: str) -> Guide:
    lines = text.split("\n")
    examples: list[Example] = []
    input_files: dict[str, str] = {}
    written_files: dict[str, str] = {}
    doctests: list[tuple[int, str]] = []
    for info, start, body, before in fenced_blocks(lines):
        if (match := FILE_MARK.match(before)) is not None:
            input_files[match.group(1)] = "\n".join(body) + "\n"
        if (match := WRITTEN_MARK.match(before)) is not None:
            written_files[match.group(1)] = "\n".join(body)
        if info == "pycon":
            doctests.append((start + 1, "\n".join(body) + "\n"))
        if info != "console":
            continue
        commands = [offset for offset, line in enumerate(body) if line.startswith("$ ")]
        assert commands and commands[0] == 0, f"docs/guide.md line {start + 2}: a console block starts with `$ vramopt ...`"
        for number, offset in enumerate(commands):
            end = commands[number + 1] if number + 1 < len(commands) else len(body)
            command = body[offset][2:]
            assert command.startswith("vramopt "), f"docs/guide.md line {start + offset + 2}: only vramopt commands run here: {command}"
            output = [line.rstrip() for line in body[offset + 1:end]]
            statuses = [int(match.group(1)) for line in output if (match := EXIT_LINE.match(line))]
            shown = tuple(line for line in output if not EXIT_LINE.match(line))
            if statuses:
                status = statuses[-1]
            else:
                status = 2 if any(line.startswith("error:") for line in shown) else 0
            examples.append(Example(start + offset + 2, command, shown, status))
    return Guide(tuple(examples), input_files, written_files, tuple(doctests))


GUIDE_CONTENT = parse_guide(GUIDE.read_text(encoding="utf-8"))


def line_pattern(line: str) -> re.Pattern:
    parts = re.split("(" + "|".join(re.escape(key) for key in PLACEHOLDERS) + ")", line)
    return re.compile("".join(PLACEHOLDERS.get(part, re.escape(part)) for part in parts))


def first_missing_line(shown: tuple[str, ...], actual: list[str]) -> str | None:
    """The first shown line (not `...`) that the real output lacks in order, or None."""
    position = 0
    for line in shown:
        if line == "...":
            continue
        pattern = line_pattern(line)
        while position < len(actual) and not pattern.fullmatch(actual[position]):
            position += 1
        if position == len(actual):
            return line
        position += 1
    return None


def write_input_files(directory: Path) -> None:
    for name, content in GUIDE_CONTENT.input_files.items():
        (directory / name).write_text(content, encoding="utf-8")


def test_the_guide_has_examples_of_every_command():
    commands = {shlex.split(example.command)[1] for example in GUIDE_CONTENT.examples if len(shlex.split(example.command)) > 1}
    assert {"solve", "estimate", "pareto", "pack", "gpus", "models"} <= commands
    assert len(GUIDE_CONTENT.examples) >= 30
    assert any(example.exit_status == 2 for example in GUIDE_CONTENT.examples)
    assert {"request.json", "cluster.json", "jobs.json"} <= set(GUIDE_CONTENT.input_files)
    assert GUIDE_CONTENT.doctests


def test_the_matcher_checks_lines_in_order_with_wildcards():
    actual = ["a", "solver    cp-sat: optimal in 53 ms (x)", "b", "c"]
    assert first_missing_line(("a", "...", "solver    cp-sat: optimal in <ms> ms (x)", "c"), actual) is None
    assert first_missing_line(("c", "a"), actual) == "a"
    assert first_missing_line(("solver    cp-sat: optimal in <ms> ms (y)",), actual) is not None
    assert first_missing_line(("b ",), actual) is not None  # whole lines only, no prefix match


@pytest.mark.parametrize("example", GUIDE_CONTENT.examples, ids=lambda example: f"line{example.line}")
def test_guide_example(example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    if "--plot" in shlex.split(example.command) and importlib.util.find_spec("matplotlib") is None:
        pytest.skip("--plot needs the 'plot' extra (matplotlib)")
    write_input_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = {path.name for path in tmp_path.iterdir()}
    result = CliRunner().invoke(cli.main, shlex.split(example.command)[1:], prog_name="vramopt")
    output = result.output
    where = f"docs/guide.md line {example.line}: `{example.command}`"
    assert result.exit_code == example.exit_status, (
        f"{where} exited with {result.exit_code}, the guide shows {example.exit_status}\n{output}"
        + (f"\n{result.exc_info}" if result.exception and not isinstance(result.exception, SystemExit) else "")
    )
    actual = [line.rstrip() for line in output.split("\n")]
    missing = first_missing_line(example.expected_lines, actual)
    assert missing is None, f"{where}: the guide shows this line, the real output (in order) lacks it:\n{missing}\n--- real output ---\n{output}"
    for name in sorted({path.name for path in tmp_path.iterdir()} - before):
        if name in GUIDE_CONTENT.written_files:
            written = json.loads((tmp_path / name).read_text(encoding="utf-8"))
            assert written == json.loads(GUIDE_CONTENT.written_files[name]), f"{where}: {name} differs from the guide's copy"


@pytest.mark.parametrize("pycon", GUIDE_CONTENT.doctests, ids=lambda item: f"line{item[0]}")
def test_guide_python_example(pycon: tuple[int, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    line, source = pycon
    monkeypatch.chdir(tmp_path)
    test = doctest.DocTestParser().get_doctest(source, {}, f"docs/guide.md:{line}", str(GUIDE), line)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    messages: list[str] = []
    runner.run(test, out=messages.append)
    assert runner.failures == 0, "".join(messages)


def test_every_written_file_is_produced_by_some_example():
    produced = {Path(word).name for example in GUIDE_CONTENT.examples for word in shlex.split(example.command)}
    assert set(GUIDE_CONTENT.written_files) <= produced
