"""Ctrl-C during a long run: finish the work in flight, keep it, then stop.

A chunk of training runs as one compiled call whose input state is donated, so a
``KeyboardInterrupt`` raised while the host waits for it would lose the run's state (or,
with a log dir, everything since the last checkpoint) and could cut a ``metrics.jsonl``
line in half. Within :class:`GracefulStop`, the first SIGINT only sets a flag that the
runner reads between chunks; a second SIGINT raises ``KeyboardInterrupt`` as usual.
"""

from __future__ import annotations

import signal
import sys
import threading

MESSAGE = ("\njaxrl_par: Ctrl-C: training stops after the running chunk and returns what "
           "finished (with a log dir, checkpointed: resume continues). Ctrl-C again stops "
           "at once.")


class GracefulStop:
    """``with GracefulStop() as stop:``: the first SIGINT sets ``stop.requested``.

    It installs its handler only where Python can (the main thread) and where SIGINT has
    a Python handler to restore (not ignored, not owned by C code); elsewhere, or with
    ``enabled=False`` (multi-host runs, where one process stopping alone would leave the
    others waiting in a collective), SIGINT behaves as it did before.
    """

    def __init__(self, enabled: bool = True, message: str = MESSAGE):
        self.enabled = enabled
        self.message = message
        self.requested = False
        self._previous = None

    def __enter__(self) -> "GracefulStop":
        self.requested = False
        self._previous = None
        if self.enabled and threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if previous is not None and previous is not signal.SIG_IGN:
                self._previous = previous
                signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        del signum, frame
        self.requested = True
        signal.signal(signal.SIGINT, self._previous)  # the next Ctrl-C acts as before
        print(self.message, file=sys.stderr, flush=True)

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            if signal.getsignal(signal.SIGINT) == self._handle:
                signal.signal(signal.SIGINT, self._previous)
            self._previous = None
