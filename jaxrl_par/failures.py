"""What the command line says when a command fails: one line naming the fix for what a
user can cause, a traceback only for a bug.

A user causes bad arguments and settings (``ValueError``), a run that diverged
(``FloatingPointError``), a missing run or file (``FileNotFoundError``), a log dir that
is a file or cannot be written, a full disk (``OSError``), a missing optional package
(``ImportError``), an env that needs a download while offline (``urllib``'s
``URLError``, a refused or failed connection). Anything else is a bug in jaxrl_par.
"""

from __future__ import annotations

import errno
import traceback

REPORT = ("this is a bug in jaxrl_par: please report it with the command and the "
          "traceback above")

_NETWORK = (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ECONNREFUSED, errno.ECONNRESET,
            errno.ETIMEDOUT)


def _network_error(e: BaseException) -> bool:
    """Whether ``e`` is a download that found no network."""
    import socket
    import urllib.error

    return (isinstance(e, (urllib.error.URLError, socket.gaierror, socket.timeout,
                           ConnectionError))
            or (isinstance(e, OSError) and e.errno in _NETWORK))


def user_error(e: BaseException, log_dir: str | None = None) -> str | None:
    """The one line (without the ``jaxrl-par: error:`` prefix) for an error the user can
    cause and fix, or None for a bug.

    Args:
      e: the exception that ended the command.
      log_dir: the run's ``--log-dir``, if any (named in the lines about the disk).
    """
    where = f" (--log-dir {log_dir})" if log_dir else ""
    kept = ("; what was written before is kept (--resume continues from the last "
            "checkpoint)" if log_dir else "")
    if isinstance(e, (ValueError, FloatingPointError)):
        return str(e)
    if isinstance(e, ImportError):
        name = getattr(e, "name", None)
        text = str(e)
        if "pip install" in text:
            return text
        return (f"{text}: this needs the package {name or 'named above'}; pip install "
                f"{name or 'it'}")
    if _network_error(e):
        return (f"{type(e).__name__}: {e}: this needs a download (an env's data set?) and "
                "there is no network here; run it once where there is, or pick another env")
    if isinstance(e, FileNotFoundError):
        return str(e)
    if isinstance(e, OSError):
        path = e.filename or log_dir or "a file"
        if e.errno == errno.ENOSPC or e.errno == errno.EDQUOT:
            return (f"no space left on the device writing {path}{where}: free some space "
                    f"or give a --log-dir on another disk{kept}")
        if isinstance(e, (NotADirectoryError, FileExistsError)) or e.errno in (
                errno.ENOTDIR, errno.EEXIST):
            return (f"{path} is a file, not a directory{where}: give --log-dir a directory "
                    "(a new or existing one)")
        if isinstance(e, PermissionError) or e.errno in (errno.EACCES, errno.EPERM,
                                                         errno.EROFS):
            return (f"cannot write {path} ({e.strerror}){where}: give a --log-dir you can "
                    f"write to{kept}")
        return f"{type(e).__name__}: {e}{where}{kept}"
    return None


def bug_report(e: BaseException) -> str:
    """The traceback of ``e`` and the line asking to report it."""
    return "".join(traceback.format_exception(e)) + f"jaxrl-par: {REPORT}"
