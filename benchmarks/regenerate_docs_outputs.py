"""Re-run every documented example and rewrite the output the docs show, in place.

Run from anywhere: python benchmarks/regenerate_docs_outputs.py [--check] [--only NAME] [--artifacts]

The docs-snapshot tests (pytest marker ``docs_snapshot``) fail when a number shown in
README.md or docs/*.md no longer matches what vramopt prints. Those tests are change
detectors, not validation: a shown number is whatever the code printed when the page was
written. When a change alters numbers on purpose, run this script and read
``git diff README.md docs`` to see every shown figure that moved; review that diff as part
of the change.

What is re-run, and how:

- ```console blocks: each ``$ COMMAND`` line and the output under it. docs/guide.md's
  commands run in-process as tests/cli/test_guide_examples.py runs them (click's runner,
  stdout and stderr together, a fresh directory holding the guide's ``<!-- file: -->``
  inputs); its ``[exit status N]`` lines are kept and updated. The other pages' commands
  run through bash (pipes to ``grep``, ``cut``, ``python -c``, ``; echo "exit status $?"``)
  in a scratch copy of docs/, one directory per page, so ``cat ds.json`` sees what the
  export before it wrote. A block in which no command shows any output is a synopsis and
  is left alone; so are the commands in SKIPPED (benchmarks whose figures are timings).
- ```pycon blocks: re-run as doctests (one namespace per page, per block in the guide);
  an example whose shown result no longer passes doctest's check (ELLIPSIS,
  NORMALIZE_WHITESPACE) gets the new result.
- ``<!-- written: NAME -->`` JSON blocks of the guide: replaced by the file the command
  before them writes, when its JSON differs.

The shown output keeps its shape: a line ``...`` still stands for the rows it stood for
(each run of shown lines between ``...`` is anchored on its first and last line, found
in the new output exactly or, failing that, by the most similar line, which the script
reports), ``<ms>`` and ``<s>`` stay where the page writes a run time, and a literal run
time on a ``solver`` line is kept when only the time changed. Exit status: 0, or 1 with
--check when some page would change (the diff is printed), or when a block could not be
aligned or an example failed to run (the script says which; such blocks are left as
they are). Prose is not rewritten: a figure quoted in a sentence (docs/pareto.md's "183
non-dominated plans", README's runner-up discussion) is the reviewer's to update, and the
tests that compare prose fail until it is.
"""

from __future__ import annotations

import argparse
import difflib
import doctest
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from docs_output_alignment import Report, output_lines, rewrite_output

ROOT = Path(__file__).resolve().parents[1]
GUIDE = "docs/guide.md"
EXIT_LINE = re.compile(r"^\[exit status (\d+)\]$")
FILE_MARK = re.compile(r"^<!-- file: (\S+) -->$")
WRITTEN_MARK = re.compile(r"^<!-- written: (\S+) -->$")
FENCE = re.compile(r"^```(\S*)$")
COMMAND_TIMEOUT_S = 600  # a hang guard per command; the slowest example takes seconds
SKIPPED = {
    "python benchmarks/pack_scale.py": "a benchmark: its figures are timings of this machine; no test checks them",
}


@dataclass
class Page(Report):
    """One markdown file being regenerated: its lines, its edits, and what the run found."""

    name: str = ""
    lines: list[str] = field(default_factory=list)
    edits: dict[int, tuple[int, list[str]]] = field(default_factory=dict)  # start -> (end, new lines)

    def replace(self, start: int, end: int, new: list[str]) -> None:
        if self.lines[start:end] != new:
            self.edits[start] = (end, new)

    def text(self) -> str:
        lines = list(self.lines)
        for start in sorted(self.edits, reverse=True):
            end, new = self.edits[start]
            lines[start:end] = new
        return "\n".join(lines)


def fenced_blocks(lines: list[str]):
    """(info string, index of the first body line, index of the closing fence, line before)."""
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        start = index + 1
        index = start
        while index < len(lines) and lines[index] != "```":
            index += 1
        yield match.group(1), start, index, lines[start - 2] if start >= 2 else ""
        index += 1


# ---------------------------------------------------------------------------------------
# Running commands


def guide_inputs(page: Page) -> dict[str, str]:
    return {match.group(1): "\n".join(page.lines[start:end]) + "\n"
            for _, start, end, before in fenced_blocks(page.lines) if (match := FILE_MARK.match(before))}


def run_in_process(command: str, inputs: dict[str, str]) -> tuple[str, int, dict[str, str]]:
    """As tests/cli/test_guide_examples.py runs a guide command: output, status, new files."""
    from click.testing import CliRunner

    from vramopt import cli

    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        for name, content in inputs.items():
            (directory / name).write_text(content, encoding="utf-8")
        before = {path.name for path in directory.iterdir()}
        previous = Path.cwd()
        os.chdir(directory)
        try:
            result = CliRunner().invoke(cli.main, shlex.split(command)[1:], prog_name="vramopt")
        finally:
            os.chdir(previous)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise RuntimeError(f"`{command}` raised {result.exception!r}")
        written = {path.name: path.read_text(encoding="utf-8") for path in directory.iterdir()
                   if path.name not in before and path.suffix == ".json"}
        return result.output, result.exit_code, written


def command_directory(scratch_root: Path) -> Path:
    """`vramopt` and `python` for the shell lines: this interpreter and this tree's vramopt."""
    directory = scratch_root / "bin"
    directory.mkdir(exist_ok=True)
    launcher = directory / "vramopt"
    launcher.write_text(f"#!{sys.executable}\nimport sys\nfrom vramopt.cli import main\nsys.exit(main())\n", encoding="utf-8")
    launcher.chmod(0o755)
    python = directory / "python"  # a script, not a link: a virtual environment is found from the path run
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n', encoding="utf-8")
    python.chmod(0o755)
    return directory


def run_in_shell(command: str, directory: Path) -> str:
    """A documented shell line, in a scratch copy of the repository's docs/: its terminal output."""
    environment = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    environment["PATH"] = os.pathsep.join([str(directory.parent / "bin"), environment.get("PATH", "")])
    completed = subprocess.run(["bash", "-c", command], cwd=directory, env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    for sign in ("command not found", "Traceback (most recent call last)"):
        if sign in completed.stdout:
            raise RuntimeError(f"`{command}` did not run ({sign}):\n{completed.stdout[-2000:]}")
    return completed.stdout


# ---------------------------------------------------------------------------------------
# Console, pycon and written-file blocks


def console_commands(body: list[str]) -> list[tuple[int, int]]:
    """(index of the `$` line, index after its output) for each command of a block."""
    starts = [index for index, line in enumerate(body) if line.startswith("$ ")]
    return [(start, starts[number + 1] if number + 1 < len(starts) else len(body)) for number, start in enumerate(starts)]


def regenerate_console(page: Page, scratch: Path, produced: dict[int, dict[str, str]]) -> None:
    inputs = guide_inputs(page) if page.name == GUIDE else {}
    for info, start, end, _ in fenced_blocks(page.lines):
        if info != "console":
            continue
        body = page.lines[start:end]
        commands = console_commands(body)
        if not commands or all(stop - first == 1 for first, stop in commands):
            page.notes.append(f"{page.name} line {start + 1}: a synopsis (no output shown), left alone")
            continue
        new_body = list(body[:commands[0][0]])
        for first, stop in commands:
            command, shown = body[first][2:], [line.rstrip() for line in body[first + 1:stop]]
            where = f"{page.name} line {start + first + 1}"
            new_body.append(body[first])
            if command in SKIPPED:
                page.notes.append(f"{where}: `{command}` skipped: {SKIPPED[command]}")
                new_body.extend(body[first + 1:stop])
                continue
            try:
                if page.name == GUIDE:
                    new_body.extend(regenerate_guide_command(page, command, shown, inputs, start + first, produced, where))
                else:
                    new_body.extend(rewrite_output(shown, output_lines(run_in_shell(command, scratch)), where, page))
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                page.problems.append(f"{where}: {error}")
                new_body.extend(body[first + 1:stop])
        page.replace(start, end, new_body)


def regenerate_guide_command(page: Page, command: str, shown: list[str], inputs: dict[str, str], line: int,
                             produced: dict[int, dict[str, str]], where: str) -> list[str]:
    if not command.startswith("vramopt "):
        raise RuntimeError(f"only vramopt commands run in the guide: {command}")
    output, status, written = run_in_process(command, inputs)
    produced[line] = written
    had_status_line = any(EXIT_LINE.match(item) for item in shown)
    text_lines = rewrite_output([item for item in shown if not EXIT_LINE.match(item)], output_lines(output), where, page)
    implied = 2 if any(item.startswith("error:") for item in text_lines) else 0
    if had_status_line or status != implied:
        text_lines.append(f"[exit status {status}]")
    return text_lines


def regenerate_written_files(page: Page, produced: dict[int, dict[str, str]]) -> None:
    for _, start, end, before in fenced_blocks(page.lines):
        if (match := WRITTEN_MARK.match(before)) is None:
            continue
        name = match.group(1)
        writers = [line for line in sorted(produced) if name in produced[line]]
        earlier = [line for line in writers if line < start]
        if not writers:
            page.problems.append(f"{page.name} line {start}: no example writes {name}")
            continue
        text = produced[(earlier or writers)[-1 if earlier else 0]][name]
        if json.loads(text) != json.loads("\n".join(page.lines[start:end])):
            page.replace(start, end, text.rstrip("\n").split("\n"))


class RecordingRunner(doctest.DocTestRunner):
    """A doctest runner that keeps, instead of printing, what each failing example printed."""

    def __init__(self) -> None:
        super().__init__(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        self.failed: list[tuple[doctest.Example, str]] = []
        self.errors: list[tuple[doctest.Example, str]] = []

    def report_failure(self, out, test, example, got):
        self.failed.append((example, got))

    def report_unexpected_exception(self, out, test, example, exc_info):
        self.errors.append((example, f"{exc_info[0].__name__}: {exc_info[1]}"))


def regenerate_pycon(page: Page, scratch: Path) -> None:
    namespace: dict = {}
    previous = Path.cwd()
    for info, start, end, _ in fenced_blocks(page.lines):
        if info != "pycon":
            continue
        if page.name == GUIDE:
            namespace, directory = {}, Path(tempfile.mkdtemp(prefix="guide-pycon-"))
        else:
            directory = scratch
        body = page.lines[start:end]
        test = doctest.DocTestParser().get_doctest("\n".join(body) + "\n", namespace, page.name, page.name, start)
        runner = RecordingRunner()
        os.chdir(directory)
        try:
            runner.run(test, out=lambda text: None, clear_globs=False)
        finally:
            os.chdir(previous)
        namespace = test.globs
        for example, message in runner.errors:
            page.problems.append(f"{page.name} line {start + example.lineno + 1}: the example raised {message}")
        new_body = list(body)
        for example, got in sorted(runner.failed, key=lambda item: -item[0].lineno):
            want_start = example.lineno + example.source.count("\n")
            if example.exc_msg is not None:  # a different exception: show it as the page does, the stack elided
                got = "Traceback (most recent call last):\n  ...\n" + "\n".join(
                    line for line in got.split("Traceback (most recent call last):")[-1].split("\n")[1:]
                    if line and not line.startswith(" "))
            got_lines = [" " * example.indent + (line if line.strip() else "<BLANKLINE>") for line in got.rstrip("\n").split("\n")]
            new_body[want_start:want_start + example.want.count("\n")] = got_lines
        page.replace(start, end, new_body)


# ---------------------------------------------------------------------------------------


def pages(only: str | None) -> list[str]:
    names = ["README.md", *sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").glob("*.md"))]
    return [name for name in names if only is None or name == only or Path(name).name == only]


def regenerate(name: str, scratch_root: Path) -> Page:
    page = Page(name=name, lines=(ROOT / name).read_text(encoding="utf-8").split("\n"))
    scratch = scratch_root / Path(name).stem
    shutil.copytree(ROOT / "docs", scratch / "docs")
    produced: dict[int, dict[str, str]] = {}
    regenerate_console(page, scratch, produced)
    regenerate_pycon(page, scratch)
    if name == GUIDE:
        regenerate_written_files(page, produced)
    return page


def copy_back_artifacts(scratch_root: Path) -> list[str]:
    """Files under docs/examples/ that a page's commands rewrote and that the repository holds."""
    copied = []
    for scratch in sorted(path for path in scratch_root.iterdir() if (path / "docs").is_dir()):
        for path in sorted((scratch / "docs" / "examples").iterdir()):
            original = ROOT / "docs" / "examples" / path.name
            if original.is_file() and original.read_bytes() != path.read_bytes():
                shutil.copyfile(path, original)
                copied.append(str(original.relative_to(ROOT)))
    return copied


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; print the diff and exit 1 if a page would change")
    parser.add_argument("--only", help="one page, e.g. docs/guide.md or guide.md")
    parser.add_argument("--artifacts", action="store_true",
                        help="also copy back the files under docs/examples/ the commands rewrote (the Pareto plot)")
    arguments = parser.parse_args()
    sys.path.insert(0, str(ROOT))  # the in-process runs use this tree's vramopt, as the subprocesses do
    try:
        import vramopt.cli  # noqa: F401 - every dependency the examples need, before any page is touched
    except ImportError as error:
        print(f"error: vramopt does not import with {sys.executable}: {error}", file=sys.stderr)
        return 2
    names = pages(arguments.only)
    if not names:
        parser.error(f"no page named {arguments.only}")
    changed, problems = [], []
    with tempfile.TemporaryDirectory(prefix="vramopt-docs-") as scratch_root:
        command_directory(Path(scratch_root))
        for name in names:
            page = regenerate(name, Path(scratch_root))
            for note in page.notes:
                print(f"note: {note}")
            problems += page.problems
            old, new = (ROOT / name).read_text(encoding="utf-8"), page.text()
            if new == old:
                print(f"{name}: unchanged")
                continue
            changed.append(name)
            if arguments.check:
                sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{name}", f"b/{name}"))
            else:
                (ROOT / name).write_text(new, encoding="utf-8")
                print(f"{name}: rewrote {len(page.edits)} block(s)")
        if arguments.artifacts and not arguments.check:
            for path in copy_back_artifacts(Path(scratch_root)):
                print(f"{path}: regenerated")
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    if arguments.check and changed:
        print(f"would change: {', '.join(changed)} (run without --check, then read git diff)", file=sys.stderr)
    return 1 if problems or (arguments.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
