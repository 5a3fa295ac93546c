"""One run per log dir at a time: an exclusive lock held while a run writes there.

Two processes given the same ``--log-dir`` (a job submitted twice, a ``--resume`` started
while the first run still goes) would both append to ``metrics.jsonl`` and overwrite each
other's checkpoints: the second resumes from a checkpoint that the first is still
advancing, and the log ends up with every update logged twice. :class:`LogDirLock` makes
the second one fail at once, before it compiles, with the first one's pid and host.

The lock is ``fcntl.flock`` on ``<log_dir>/.lock``: the kernel releases it when the holder
exits, however it exits (a crash or ``kill -9`` leaves no stale lock to clean up). The
file itself stays, holding the last holder's pid, host and start time; only a dir that
the lock created and nothing else wrote to (a run that failed on its arguments) is
removed again on release. Where ``fcntl`` is missing (Windows) there is no lock.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
from typing import Self

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None

LOCK_FILE = ".lock"


class LogDirLock:
    """``with LogDirLock(log_dir):`` holds ``log_dir`` (created if missing) for this process.

    Raises ``ValueError`` naming the holder if another process holds it. ``log_dir=None``
    does nothing (a run without a log dir, or a process that writes no logs).
    """

    def __init__(self, log_dir: str | None):
        self.log_dir = log_dir
        self._fd: int | None = None
        self._created = False

    def __enter__(self) -> Self:
        if self.log_dir is None or fcntl is None:
            return self
        self._created = not os.path.isdir(self.log_dir)
        os.makedirs(self.log_dir, exist_ok=True)
        path = os.path.join(self.log_dir, LOCK_FILE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 512).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ValueError(
                f"log dir {self.log_dir} is in use by another run ({holder}); wait for it "
                "to finish or stop it (Ctrl-C checkpoints it), or give another log dir"
            ) from None
        except OSError:  # a file system without locks: run unlocked rather than not at all
            os.close(fd)
            return self
        started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {started}\n".encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is None:
            return
        path = os.path.join(self.log_dir, LOCK_FILE)
        # A run that failed before writing anything (bad arguments, a config error)
        # leaves no trace: the dir this lock created goes again, still under the lock.
        if self._created and os.listdir(self.log_dir) == [LOCK_FILE]:
            with contextlib.suppress(OSError):
                os.unlink(path)
                os.rmdir(self.log_dir)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
