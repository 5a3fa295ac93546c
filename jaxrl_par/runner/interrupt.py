"""Ctrl-C or a job scheduler's SIGTERM during a long run: finish the work in flight, keep
it, then stop.

A chunk of training runs as one compiled call whose input state is donated, so a
``KeyboardInterrupt`` raised while the host waits for it would lose the run's state (or,
with a log dir, everything since the last checkpoint) and could cut a ``metrics.jsonl``
line in half; SIGTERM's default action (the signal SLURM, Kubernetes and ``kill`` send
before they kill a job) ends the process as abruptly. Within :class:`GracefulStop`, the
first SIGINT or SIGTERM only sets a flag that the runner reads between chunks; after it
both signals act as before (a second Ctrl-C raises ``KeyboardInterrupt``, a second
SIGTERM ends the process).
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Self

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Terminated(Exception):
    """Raised by :func:`raise_terminated`: SIGTERM arrived while no chunk was in flight."""


# The signals whose raising handler (below) ran and whose exception may have been lost:
# Python drops an exception that a signal handler raises while a garbage-collection
# callback runs ("Exception ignored in: <function _xla_gc_callback ...>"; jax runs one
# at every collection), and the program then goes on as if no signal had come. Process
# state, as signal dispositions are; :func:`raise_pending` raises them again.
_pending: set[int] = set()


def raise_terminated(signum, frame) -> None:
    """A SIGTERM handler for a program's main thread outside training (imports, compiling,
    evaluating): raises :class:`Terminated`, so that cleanup runs and the program can say
    what stopped it. Within :class:`GracefulStop` the first SIGTERM finishes the chunk
    instead, and the second ends the process at once, as SIGTERM's default action does
    (this handler could only run once the compiled call in flight returned)."""
    _pending.add(signal.SIGTERM)
    raise Terminated


def raise_interrupt(signum, frame) -> None:
    """Python's own SIGINT handler (``KeyboardInterrupt``), noting the signal for
    :func:`raise_pending` as :func:`raise_terminated` does."""
    _pending.add(signal.SIGINT)
    raise KeyboardInterrupt


def raise_pending() -> None:
    """Raises what :func:`raise_terminated` or :func:`raise_interrupt` raised since the
    last call, in case Python dropped it (see ``_pending``); else nothing. Called where
    such an exception would have surfaced: right after a compile returns (the runner's,
    an evaluation's), before each entry of ``compare``, and when a CLI command returns."""
    if signal.SIGINT in _pending:
        _pending.clear()
        raise KeyboardInterrupt
    if signal.SIGTERM in _pending:
        _pending.clear()
        raise Terminated


def forget_pending() -> None:
    """Drops the noted signals once their exception was caught (it was not lost)."""
    _pending.clear()


def message(signum: int) -> str:
    """What the first ``signum`` prints: what happens now, and how to stop at once."""
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    return (f"\njaxrl_par: {name}: training stops after the running chunk and returns what "
            "finished (with a log dir, checkpointed: resume continues). "
            f"{name} again stops at once.")


class GracefulStop:
    """``with GracefulStop() as stop:``: the first SIGINT or SIGTERM sets
    ``stop.requested`` and ``stop.signum``.

    It installs its handler only where Python can (the main thread) and, per signal,
    where the signal has a Python-level disposition to restore (not ignored, as in a
    background job of a non-interactive shell, and not owned by C code); elsewhere, or
    with ``enabled=False`` (multi-host runs, where one process stopping alone would leave
    the others waiting in a collective), the signals behave as they did before.
    """

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.requested = False
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Self:
        self.requested = False
        self.signum = None
        self._previous = {}
        if self.enabled and threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                previous = signal.getsignal(signum)
                if previous is not None and previous is not signal.SIG_IGN:
                    self._previous[signum] = previous
                    signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        del frame
        self.requested = True
        self.signum = signum
        self._restore(after_signal=True)  # the next signal acts as before
        print(message(signum), file=sys.stderr, flush=True)

    def _restore(self, after_signal: bool = False) -> None:
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) == self._handle:
                if after_signal and previous is raise_terminated:
                    previous = signal.SIG_DFL  # the next SIGTERM ends the process at once
                signal.signal(signum, previous)
        self._previous = {}

    def __exit__(self, *exc) -> None:
        self._restore()
