"""How benchmarks/regenerate_docs_outputs.py rewrites the output a page shows from a new run.

A page shows a command's output with conventions (docs/guide.md section 1 and
tests/cli/test_guide_examples.py): a line ``...`` stands for lines left out; ``<ms>`` and
``<s>`` stand for a run time. Rewriting keeps them: each run of shown lines between
``...`` is anchored on its first and last line in the new output (a line the shown one
still matches, else a line that differs only in its numbers, else the most similar line,
which is reported), the lines between the anchors are taken from the new output, and a
shown line that is still true (placeholders matching, or only a literal run time changed)
is kept as it was written.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

PLACEHOLDERS = {"<ms>": r"[0-9][0-9,.]*", "<s>": r"[0-9][0-9,.e+-]*"}
PLACEHOLDER_SPLIT = re.compile("(" + "|".join(re.escape(key) for key in PLACEHOLDERS) + ")")
TIMING_LINE = re.compile(r"^solver\s|exact enumeration")
TIMING_NUMBER = re.compile(r"[0-9][0-9,.]*(?= m?s\b)")
STANDALONE_NUMBER = re.compile(r"(?<![\w.])[0-9][0-9,]*(?:\.[0-9]+)?(?![\w])")
ELISION = "..."
FUZZY_FLOOR = 0.6  # below this similarity a shown line has no counterpart in the new output


@dataclass
class Report:
    """What rewriting found: notes for the reviewer, problems that left a block unchanged."""

    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)




def line_pattern(line: str) -> re.Pattern:
    parts = PLACEHOLDER_SPLIT.split(line)
    return re.compile("".join(PLACEHOLDERS.get(part, re.escape(part)) for part in parts))


def alignment_key(line: str) -> str:
    """The line with run times and placeholders masked: what must stay equal to align."""
    return TIMING_NUMBER.sub("#", PLACEHOLDER_SPLIT.sub("#", line))


def still_true(shown: str, actual: str) -> bool:
    if line_pattern(shown).fullmatch(actual):
        return True
    return bool(TIMING_LINE.search(shown)) and TIMING_NUMBER.sub("#", shown) == TIMING_NUMBER.sub("#", actual)


def with_placeholders(shown: str, actual: str) -> str:
    """The new line, with each `<ms>`/`<s>` of the old one put back where its context is.

    A literal run time of the old line is kept too (a `solver` line that changed for
    another reason), so that the diff shows the change and not the machine's speed.
    """
    pieces = PLACEHOLDER_SPLIT.split(shown)
    result = actual
    old_times, new_times = TIMING_NUMBER.findall(shown), TIMING_NUMBER.findall(actual)
    if TIMING_LINE.search(shown) and TIMING_LINE.search(actual) and len(old_times) == len(new_times):
        kept = iter(old_times)
        result = TIMING_NUMBER.sub(lambda match: next(kept), actual)
    for index in range(1, len(pieces), 2):
        before, after = pieces[index - 1][-12:], pieces[index + 1][:12]
        pattern = re.escape(before) + "(" + PLACEHOLDERS[pieces[index]] + ")" + re.escape(after)
        result = re.sub(pattern, lambda match: before + pieces[index] + after, result, count=1)
    return result


def merge_run(shown: list[str], actual: list[str]) -> list[str]:
    """New lines for one run of shown lines: unchanged where still true, else the new line."""
    matcher = difflib.SequenceMatcher(None, [alignment_key(line) for line in shown],
                                      [alignment_key(line) for line in actual], autojunk=False)
    merged: list[str] = []
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        old, new = shown[old_start:old_end], actual[new_start:new_end]
        if tag in ("equal", "replace"):
            for offset, line in enumerate(new):
                counterpart = old[min(offset, len(old) - 1)] if old else line
                merged.append(counterpart if still_true(counterpart, line) else with_placeholders(counterpart, line))
        elif tag == "insert":
            merged.extend(new)
    return merged


def shape(line: str) -> str:
    """The line with its free-standing numbers masked and spaces collapsed: a table row's identity."""
    return " ".join(STANDALONE_NUMBER.sub("#", PLACEHOLDER_SPLIT.sub("#", line)).split())


def locate(line: str, actual: list[str], low: int, expected: int) -> tuple[int | None, str]:
    """Where the shown line is in the new output, at or after `low`, and how it was found.

    First a line it still matches; then a line of the same shape (only numbers changed);
    then the most similar line. Ties go to the line nearest `expected`.
    """
    candidates = range(low, len(actual))

    def closeness(index: int) -> float:
        return difflib.SequenceMatcher(None, line, actual[index]).ratio() - 0.002 * abs(index - expected)

    for how, accepts in (("exact", lambda index: still_true(line, actual[index])),
                         ("numbers", lambda index: shape(line) == shape(actual[index])),
                         ("similar", lambda index: difflib.SequenceMatcher(
                             None, alignment_key(line), alignment_key(actual[index])).ratio() >= FUZZY_FLOOR)):
        found = [index for index in candidates if accepts(index)]
        if found:
            key = (lambda index: -abs(index - expected)) if how == "exact" else closeness
            return max(found, key=lambda index: (key(index), -index)), how
    return None, ""


def anchor(line: str, actual: list[str], low: int, expected: int, where: str, report: Report) -> int | None:
    index, how = locate(line, actual, low, expected)
    if index is None:
        report.problems.append(f"{where}: no line of the new output resembles the shown line {line!r}; block left as it was")
    elif how == "similar":
        report.notes.append(f"{where}: `...` anchor {line!r} matched by similarity to {actual[index]!r}; check the diff")
    return index


def rewrite_output(shown: list[str], actual: list[str], where: str, report: Report) -> list[str]:
    """The shown output rewritten from the new output, `...` elisions kept in place."""
    if ELISION not in shown:
        return merge_run(shown, actual)
    runs: list[list[str]] = [[]]
    for line in shown:
        if line == ELISION:
            runs.append([])
        else:
            runs[-1].append(line)
    result: list[str] = []
    position = 0
    for number, run in enumerate(runs):
        if number > 0:
            result.append(ELISION)
        if not run:
            continue
        anchors = []
        if number == 0:
            start = 0
        else:
            start = anchor(run[0], actual, position, position, where, report)
            if start is None:  # the anchor line is gone from the new output: keep what is shown
                return shown
            anchors.append(start)
        if number == len(runs) - 1:
            end = len(actual)
        elif number > 0 and len(run) == 1:
            end = start + 1
        else:
            last = anchor(run[-1], actual, start + (len(run) > 1), start + len(run) - 1, where, report)
            anchors.append(last)
            end = last + 1 if last is not None else None
        if None in anchors:
            return shown
        result.extend(merge_run(run, actual[start:end]))
        position = end
    return result


def output_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines
