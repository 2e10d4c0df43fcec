"""Writing the files a user names (``--output``, ``--plot``, ``--export``): all or none.

Each file is written next to its target under a temporary name, then renamed over it, so
a failure never leaves a half-written or partial set of outputs. Only regular files are
ever replaced: a target that is a device, a FIFO, a socket or a directory (or a link to
one) is refused, and a symbolic link to a regular file is followed, so the file it points
to is updated and the link stays. Every failure is an ``InputError`` naming the file.
"""

from __future__ import annotations

import os
import signal
import stat
import tempfile
import threading
from contextlib import contextmanager
from typing import Iterator, Mapping

from vramopt.errors import InputError
from vramopt.input_files import display_path

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def resolve_target(path: str) -> str:
    """The real file ``path`` names (links followed), refused unless it is a regular file
    or does not exist yet."""
    if not path or not path.strip():
        raise InputError("an output needs a file name")
    try:
        resolved = os.path.realpath(path)
        mode = os.stat(resolved).st_mode
    except FileNotFoundError:
        return resolved  # a new file (or a link to one that does not exist yet)
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the name
        raise InputError(f"cannot write {display_path(path)}: {getattr(error, 'strerror', None) or error}") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        shown = display_path(path) if resolved == os.path.abspath(path) else f"{display_path(path)} (-> {display_path(resolved)})"
        raise InputError(f"cannot write {shown}: it is {kind}, not a regular file; vramopt replaces only regular files")
    return resolved


def same_file(first: str, second: str) -> bool:
    """Whether two output names reach one file (through links, '..', or hard links)."""
    first_resolved, second_resolved = os.path.realpath(first), os.path.realpath(second)
    if first_resolved == second_resolved:
        return True
    try:
        return os.path.samefile(first_resolved, second_resolved)
    except (OSError, ValueError):
        return False


def write_text_atomically(path: str, text: str) -> None:
    write_files_atomically({path: text})


def write_files_atomically(contents: Mapping[str, str | bytes]) -> None:
    """Write every file next to its target, then rename them all: a failure leaves no
    temporary file and no new or half-written output (text is written as UTF-8)."""
    names = list(contents)
    for index, path in enumerate(names):
        for other in names[:index]:
            if same_file(path, other):
                raise InputError(f"{display_path(other)} and {display_path(path)} are the same file: each output needs its own")
    targets = [(path, resolve_target(path)) for path in names]
    temporaries: list[tuple[str, str, str]] = []
    try:
        for path, target in targets:
            content = contents[path]
            data = content.encode("utf-8", "backslashreplace") if isinstance(content, str) else content
            try:
                handle, temporary = tempfile.mkstemp(prefix=".vramopt-", dir=os.path.dirname(target))
                temporaries.append((temporary, path, target))
                with os.fdopen(handle, "wb") as stream:
                    stream.write(data)
                # mkstemp makes the file owner-only; give it what a plain open() would.
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(temporary, 0o666 & ~umask)
            except OSError as error:
                raise InputError(f"cannot write {display_path(path)}: {error.strerror or error}") from None
        with _interrupts_held():
            for _, _, target in temporaries:
                resolve_target(target)  # again, just before the renames: it may have changed
            for temporary, path, target in temporaries:
                try:
                    os.replace(temporary, target)
                except OSError as error:
                    raise InputError(f"cannot write {display_path(path)}: {error.strerror or error}") from None
    finally:
        for temporary, _, _ in temporaries:
            if os.path.exists(temporary):
                os.unlink(temporary)


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Hold SIGINT back while the renames run, so that Ctrl-C cannot leave some outputs
    replaced and others not. An interrupt that came meanwhile is dropped when every rename
    succeeded (the run has delivered its outputs and ends normally), else delivered."""
    holdable = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    if not holdable:
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
        if signal.SIGINT in signal.sigpending() and signal.SIGINT not in previous:
            signal.sigwait({signal.SIGINT})
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
