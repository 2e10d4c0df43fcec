"""Cancelling a run from outside: a ``Cancellation`` stops the CP-SAT searches in flight
and makes the run raise ``Interrupted`` instead of returning an answer it did not reach.

A caller (the CLI on Ctrl-C, a scheduler on a deadline) creates a ``Cancellation``, runs
vramopt inside ``with cancellable(token):`` and calls ``token.request()`` from any thread.
The library calls ``run_solver`` for every CP-SAT search and ``check_cancelled()`` between
steps of its Python loops. Nothing here prints or touches signal handlers; the token in
use is a context variable, so concurrent runs in other threads are not affected.

CP-SAT catches SIGINT itself by default (``catch_sigint_signal``): it then stops the
search and returns a status as if nothing happened, and leaves SIGINT at its default
action afterwards. ``run_solver`` turns that off, so that Ctrl-C reaches the caller.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

from vramopt.errors import Interrupted


class Cancellation:
    """A request to stop, shared between the thread that runs vramopt and the one that
    wants it stopped. Thread-safe; ``request`` may also be called from a signal handler."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entrant: a signal handler may run inside the lock's holder
        self._requested = False
        self._solvers: list[Any] = []

    @property
    def requested(self) -> bool:
        return self._requested

    def request(self) -> None:
        """Ask the run to stop: every CP-SAT search in flight stops now, the next one
        does not start, and the run raises ``Interrupted``. Calling it again re-sends the
        stop to the searches in flight (one that was just starting may have missed it)."""
        self._requested = True
        with self._lock:
            solvers = list(self._solvers)
        for solver in solvers:
            solver.stop_search()

    def check(self) -> None:
        if self._requested:
            raise Interrupted("interrupted")

    @contextmanager
    def _searching(self, solver: Any) -> Iterator[None]:
        with self._lock:
            self._solvers.append(solver)
        try:
            yield
        finally:
            with self._lock:
                self._solvers.remove(solver)


_CURRENT: ContextVar[Cancellation | None] = ContextVar("vramopt_cancellation", default=None)


@contextmanager
def cancellable(token: Cancellation) -> Iterator[Cancellation]:
    """Run the block under ``token``: its ``request()`` interrupts what runs inside."""
    reset = _CURRENT.set(token)
    try:
        yield token
    finally:
        _CURRENT.reset(reset)


def check_cancelled() -> None:
    """Raise ``Interrupted`` when the run's cancellation was requested (no-op outside one)."""
    token = _CURRENT.get()
    if token is not None:
        token.check()


def run_solver(solver: Any, model: Any) -> Any:
    """``solver.solve(model)`` that a cancellation can stop; returns CP-SAT's status.

    Raises ``Interrupted`` when the cancellation was requested before or during the
    search, whatever status the stopped search reported.
    """
    solver.parameters.catch_sigint_signal = False
    token = _CURRENT.get()
    if token is None:
        return solver.solve(model)
    token.check()
    with token._searching(solver):
        token.check()  # a request between the first check and the registration
        status = solver.solve(model)
    token.check()
    return status
