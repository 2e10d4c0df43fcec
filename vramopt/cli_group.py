"""The ``vramopt`` group's error handling: every failure becomes one ``error:`` line on
stderr with the exit status that vramopt/cli.py's docstring lists, never a traceback by
default; Ctrl-C stops the searches in flight and ends with status 130."""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

import click

from vramopt.errors import Interrupted, VramoptError
from vramopt.optimizer.cancel import Cancellation, cancellable

EXIT_OUTPUT = 1
"""stdout cannot take the output (closed, full, an I/O error); 1 is what click gives a
closed pipe too."""
EXIT_USAGE = 2
"""Bad input of any kind: a usage error, a VramoptError (click uses 2 for usage errors)."""
EXIT_INTERNAL = 70
"""An unexpected exception: a bug in vramopt (EX_SOFTWARE of sysexits.h)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C: 128 + SIGINT, what a shell reports for a command that SIGINT ended."""


# ---------------------------------------------------------------------------------------
# Error handling: one line on stderr, never a traceback by default


class StdoutUnwritable(Exception):
    """stdout cannot take the output: closed, a full device, an I/O error (exit 1)."""


def echo(text: str, err: bool = False) -> None:
    """click.echo, with text that UTF-8 cannot encode (lone surrogates from a file name or a
    JSON escape such as "\\ud800") written as backslash escapes instead of failing.
    stdout that cannot be written raises ``StdoutUnwritable`` (a closed pipe stays an
    EPIPE ``OSError``, which click ends quietly); stderr that cannot is given up on."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:  # the descriptor was closed when Python started
        if err:
            return
        raise StdoutUnwritable("stdout is closed")
    try:
        click.echo(text.encode("utf-8", "backslashreplace").decode("utf-8"), err=err)
    except OSError as error:
        if err:
            return  # nowhere left to report it; the exit status still says it
        if error.errno == errno.EPIPE:
            raise
        raise StdoutUnwritable(error.strerror or str(error)) from None


def fail_line(message: str) -> None:
    echo(f"error: {message}", err=True)


def _silence_stdout() -> None:
    """After a failed write, point stdout at the null device so that the interpreter's
    final flush of what is still buffered cannot print a second error."""
    try:
        descriptor = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
    except (AttributeError, OSError, ValueError):
        return
    os.dup2(null, descriptor)
    os.close(null)


class _InterruptedRun(Exception):
    """Carries an interrupt through click's main, which would turn it into "Aborted!"."""


@contextmanager
def interrupt_watch() -> Iterator[Cancellation]:
    """Run the command under a ``Cancellation`` that Ctrl-C requests.

    While CP-SAT searches, the main thread is inside the solver and Python's SIGINT
    handler cannot run, so the signal is also written to a wake-up pipe that a helper
    thread reads: it stops the searches in flight (again every 0.1 s, for one that was just
    starting). Python's own handler then raises KeyboardInterrupt as soon as the main
    thread is back in Python. Nothing is installed outside the main thread, off POSIX, or when
    SIGINT is not Python's default handler (ignored, or handled by an embedding program).
    """
    token = Cancellation()
    watchable = os.name == "posix" and threading.current_thread() is threading.main_thread()
    if not watchable or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        with cancellable(token):
            yield token
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    finished = threading.Event()

    def watch() -> None:
        while True:
            try:
                received = os.read(read_end, 64)
            except OSError:
                return
            if not received:  # the write end closed: the command is over
                return
            if signal.SIGINT in received:
                while not finished.is_set():
                    token.request()
                    finished.wait(0.1)
                return

    watcher = threading.Thread(target=watch, name="vramopt-interrupt-watch", daemon=True)
    watcher.start()
    try:
        with cancellable(token):
            yield token
    finally:
        signal.set_wakeup_fd(previous)
        finished.set()
        os.close(write_end)
        watcher.join(5.0)
        if not watcher.is_alive():
            os.close(read_end)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


class SingleValueOptions:
    """Refuses an option given twice (``--max-gpus 1 --max-gpus 64``): click would keep
    the last silently. Options that take several values (``multiple``, ``count``) and the
    eager ones (``--help``, ``--version``) may repeat."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            _, _, order = self.make_parser(ctx).parse_args(args=list(args))  # a copy: the parser consumes it
            seen: set[str] = set()
            for param in order:
                if not isinstance(param, click.Option) or param.multiple or param.count or param.is_eager:
                    continue
                if param.name in seen:
                    names = "/".join(param.opts + param.secondary_opts)
                    raise click.UsageError(f"{names} is given more than once; give it once", ctx)
                seen.add(param.name)
        return super().parse_args(ctx, args)


class VramoptCommand(SingleValueOptions, click.Command):
    """Every subcommand: repeated single-value options are refused."""


class VramoptGroup(SingleValueOptions, click.Group):
    """A click group that reports every failure as one ``error:`` line."""

    command_class = VramoptCommand

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt:
            raise _InterruptedRun() from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except (KeyboardInterrupt, Interrupted):
            raise _InterruptedRun() from None
        except VramoptError as error:
            fail_line(one_line(str(error)))
            raise click.exceptions.Exit(EXIT_USAGE) from None
        except StdoutUnwritable as error:
            _silence_stdout()
            fail_line(f"cannot write the output to stdout: {error}")
            raise click.exceptions.Exit(EXIT_OUTPUT) from None
        except OSError as error:
            if error.errno == errno.EPIPE:
                raise  # click's main() handles a closed pipe (e.g. `| head`)
            return self._internal_error(ctx, error)
        except Exception as error:  # noqa: BLE001 - the last line of defence for users
            return self._internal_error(ctx, error)

    @staticmethod
    def _internal_error(ctx: click.Context, error: Exception) -> Any:
        if ctx.params.get("debug"):
            raise error
        fail_line(f"internal error: {type(error).__name__}: {one_line(str(error))} (please report; `vramopt --debug ...` shows the traceback)")
        raise click.exceptions.Exit(EXIT_INTERNAL) from None

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        """As click's, but a usage error prints one line instead of usage + hint + error."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            with interrupt_watch():
                try:
                    status = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
                except click.exceptions.ClickException as error:
                    message = one_line(error.format_message())
                    context = getattr(error, "ctx", None)
                    if context is not None:
                        message += f" (see '{context.command_path} --help')"
                    fail_line(message)
                    status = error.exit_code
                except click.exceptions.Abort as error:
                    if isinstance(error.__cause__, KeyboardInterrupt):
                        raise _InterruptedRun() from None
                    click.echo("Aborted!", err=True)
                    status = 1
                status = status if isinstance(status, int) else 0
                if status == 0:
                    status = self._flush_stdout()
        except (_InterruptedRun, KeyboardInterrupt):
            status = self._interrupted()
        sys.exit(status)

    @staticmethod
    def _flush_stdout() -> int:
        """What is still buffered goes out now, while a failure can be reported."""
        try:
            if sys.stdout is not None:
                sys.stdout.flush()
        except OSError as error:
            if error.errno == errno.EPIPE:
                _silence_stdout()
                return EXIT_OUTPUT
            _silence_stdout()
            fail_line(f"cannot write the output to stdout: {error.strerror or error}")
            return EXIT_OUTPUT
        return 0

    @staticmethod
    def _interrupted() -> int:
        """One line, status 130; a second Ctrl-C while saying so is ignored."""
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            echo("interrupted", err=True)
        finally:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, previous)
        return EXIT_INTERRUPTED
