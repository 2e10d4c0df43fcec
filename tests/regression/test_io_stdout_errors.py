"""Issue 11 item 8: stdout on a full device (``> /dev/full``) used to exit 70 as an internal
bug, and a closed stdout exited 0 silently. Both are I/O errors: one line on stderr, exit 1.
The runs are real processes, since the failure is in the process's own standard output.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="/dev/full and closed descriptors are POSIX")

COMMANDS = (["gpus"], ["models", "--format", "json"], ["estimate", "--model", "8b"],
            ["solve", "--model", "8b", "--max-gpus", "2", "--workers", "1"])
LAUNCH = "import sys; from vramopt.cli import main; sys.argv[0] = 'vramopt'; main()"
HANG_GUARD_S = 300


def run_with_stdout(args: list[str], stdout) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LAUNCH, *args], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=HANG_GUARD_S)


def assert_output_error(result: subprocess.CompletedProcess) -> None:
    context = (result.returncode, result.stderr[-2000:])
    assert result.returncode == 1, context
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: cannot write the output to stdout"), context
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, context


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: args[0])
def test_full_device_is_an_output_error(args):
    """issue 11 item 8: `> /dev/full` is exit 1 with one line, not exit 70."""
    with open("/dev/full", "w") as full:
        result = run_with_stdout(args, full)
    assert_output_error(result)
    assert "No space left on device" in result.stderr


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: args[0])
def test_closed_stdout_is_an_output_error(args):
    """issue 11 item 8: `>&-` (no stdout at all) is exit 1 with one line, not a silent 0."""
    result = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-c", LAUNCH, *args],
                            stderr=subprocess.PIPE, text=True, timeout=HANG_GUARD_S)
    assert_output_error(result)


def test_a_reader_that_stops_early_ends_quietly():
    """A closed pipe (`| head`) is not an error to report: no traceback, no message."""
    process = subprocess.Popen([sys.executable, "-c", LAUNCH, "models", "--format", "json"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.read(10)
    process.stdout.close()
    stderr = process.stderr.read().decode()
    process.wait(HANG_GUARD_S)
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
