"""Issue 11 item 9: ``--output``/``--export``/``--plot`` used to replace a device node or a
symbolic link with a regular file, and ``--output x.csv --plot link-to-x.csv`` was not seen
as the same file. Non-regular targets are refused, links are resolved before comparing, and
only regular files are ever replaced (a link to one is followed, the link stays).
"""

from __future__ import annotations

import os
import stat
import sys

import pytest

from tests.cli_runner import invoke

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symbolic links, FIFOs and /dev/null are POSIX")

PARETO = ["pareto", "--model", "8b", "--max-gpus", "2"]
SOLVE = ["solve", "--model", "8b", "--max-gpus", "2", "--workers", "1"]


def assert_refused(result, *fragments: str) -> None:
    context = (result.exit_code, result.stderr[-1000:])
    assert result.exit_code == 2, context
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, context
    for fragment in fragments:
        assert fragment in result.stderr, context


def no_temporaries(directory) -> bool:
    return not [name for name in os.listdir(directory) if name.startswith(".vramopt-")]


@pytest.fixture
def targets(tmp_path):
    """A regular file, a link to it, a link to /dev/null, a FIFO and a dangling link."""
    regular = tmp_path / "x.csv"
    regular.write_text("keep me\n")
    (tmp_path / "link-to-x.csv").symlink_to("x.csv")
    (tmp_path / "link-to-null").symlink_to(os.devnull)
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


def private_null_device(directory):
    """A character device of our own (the null device's numbers), or None without the
    right to make one. Never the system's /dev/null: the old code replaced its target, and
    run as root against that code this test must not replace the real device."""
    device = directory / "null-device"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        return None
    return device


def test_a_device_node_is_not_replaced(targets):
    """issue 11 item 9: a device node (and a link to one) is refused; the device stays."""
    link = targets / "link-to-null"  # replacing the link itself is what the old code did
    for flag in ("--output", "--plot"):
        assert_refused(invoke(PARETO + [flag, str(link)]), "character device", "not a regular file")
    assert_refused(invoke(SOLVE + ["--export", "vllm", str(link)]), "character device")
    assert link.is_symlink() and os.readlink(link) == os.devnull
    device = private_null_device(targets)
    if device is not None:
        assert_refused(invoke(PARETO + ["--output", str(device)]), "character device")
        assert_refused(invoke(SOLVE + ["--export", "deepspeed", str(device)]), "character device")
        assert stat.S_ISCHR(os.lstat(device).st_mode)
    assert no_temporaries(targets)


def test_a_fifo_is_not_replaced(targets):
    """issue 11 item 9: a named pipe is refused (writing to it would block or be lost)."""
    assert_refused(invoke(SOLVE + ["--export", "deepspeed", str(targets / "fifo")]), "named pipe")
    assert_refused(invoke(PARETO + ["--output", str(targets / "fifo")]), "named pipe")
    assert os.path.exists(targets / "fifo") and not os.path.isfile(targets / "fifo")


def test_a_link_to_a_regular_file_is_followed_and_kept(targets):
    """issue 11 item 9: the link stays a link; the file it points to gets the output."""
    link = targets / "link-to-x.csv"
    result = invoke(PARETO + ["--output", str(link)])
    assert result.exit_code == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == "x.csv"
    assert (targets / "x.csv").read_text().startswith("chosen,plan.gpu")
    result = invoke(SOLVE + ["--export", "deepspeed", str(link)])
    assert result.exit_code == 0, result.stderr
    assert link.is_symlink() and (targets / "x.csv").read_text().lstrip().startswith("{")
    assert no_temporaries(targets)


def test_output_and_plot_through_a_link_are_the_same_file(targets):
    """issue 11 item 9: --output x.csv --plot link-to-x.csv is one file, refused before work."""
    for output, plot in (("x.csv", "link-to-x.csv"), ("link-to-x.csv", "x.csv"), ("x.csv", "./sub/../x.csv")):
        (targets / "sub").mkdir(exist_ok=True)
        result = invoke(PARETO + ["--output", str(targets / output), "--plot", str(targets / plot)])
        assert_refused(result, "same file")
    assert (targets / "x.csv").read_text() == "keep me\n"
    hard = targets / "hard-link.csv"
    os.link(targets / "x.csv", hard)
    assert_refused(invoke(PARETO + ["--output", str(targets / "x.csv"), "--plot", str(hard)]), "same file")
