"""The fuzz tally: printed at the end of the session and kept in the pytest cache
(``.pytest_cache/v/vramopt/fuzz_tally``); ``VRAMOPT_FUZZ_REPORT=path`` also writes it there."""

from __future__ import annotations

import json
import os

from fuzz_support import TALLY


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if TALLY.generated:
        terminalreporter.write_line(TALLY.line())


def pytest_sessionfinish(session, exitstatus):
    if not TALLY.generated:
        return
    data = TALLY.as_dict()
    if getattr(session.config, "cache", None) is not None:
        session.config.cache.set("vramopt/fuzz_tally", data)
    path = os.environ.get("VRAMOPT_FUZZ_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as stream:
            json.dump(data, stream, indent=2)
