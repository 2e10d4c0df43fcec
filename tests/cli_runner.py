"""One way for tests to run the CLI: click's runner with stderr kept apart."""

from __future__ import annotations

from click.testing import CliRunner

from vramopt import cli


def make_runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        return CliRunner()  # click >= 8.2 keeps stderr apart by default


def invoke(args, stdin=None):
    return make_runner().invoke(cli.main, args, input=stdin)
