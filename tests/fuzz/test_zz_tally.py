"""Runs last in tests/fuzz (file order): the session's fuzz tally meets the issue's bar --
at least 1,000 bad inputs, every one refused with a one-line error, zero tracebacks.

The count is printed at the end of the session ("vramopt fuzz: ...") and stored in
``.pytest_cache/v/vramopt/fuzz_tally``; skipped when only part of the fuzz tests ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz_support import TALLY

FUZZ_MODULES = ("test_api_fuzz.py", "test_cli_fuzz.py")
REQUIRED_BAD_INPUTS = 1000


def test_at_least_a_thousand_bad_inputs_and_no_traceback(request):
    here = Path(__file__).parent
    selected: dict[str, set[str]] = {}
    modules = {}
    for item in request.session.items:
        path = Path(str(item.fspath))
        if path.parent == here and path.name in FUZZ_MODULES:
            selected.setdefault(path.name, set()).add(item.name)
            modules[path.name] = item.module
    everything = all(
        name in modules and selected[name] == {test for test in dir(modules[name]) if test.startswith("test_")}
        for name in FUZZ_MODULES
    )
    if not everything or request.session.testsfailed:
        pytest.skip("the tally is only meaningful after every fuzz test ran and passed")
    assert TALLY.tracebacks == 0 and TALLY.internal_errors == 0, TALLY.line()
    assert TALLY.rejected >= REQUIRED_BAD_INPUTS, TALLY.line()
