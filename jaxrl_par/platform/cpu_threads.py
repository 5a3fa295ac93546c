"""XLA:CPU's thread pool and CPU device count, chosen before jax starts.

XLA's CPU client runs every program on one pool of threads, one per core by default. An
RL update is many small kernels (small networks, scans over env steps); on a pool of
several threads XLA hands ready kernels to the other threads, and on a few cores those
hand-offs can cost more than the kernels. :func:`limit` asks for a smaller pool, and
:func:`devices` for several CPU devices (one per core, for data parallelism). Both set
environment variables that XLA reads once, when jax creates its CPU client (the first
use of a device; importing gymnax is one), so they must run before that::

    from jaxrl_par.platform import cpu_threads
    cpu_threads.limit()          # before anything runs on a device
    cpu_threads.devices(2)       # optional: a CPU device per core, for train(..., devices=2)

The CLI does this for its runs (``--cpu-threads``). Programs that run at the same time
from several host threads (``--async-workers``, ``--actor-learner``) need a thread each;
the CLI keeps XLA's default for those. docs/scaling.md describes CPU devices and threads.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

#: The environment variables XLA's CPU client sizes its pool from, the first one set wins.
VARIABLES = ("PORTABLE_NPROC", "NPROC")


def backend_started() -> bool:
    """Whether XLA's CPU client exists in this process, so that its pool's size is fixed.

    jax has no public query for this. On Linux the client's pool threads are named
    ``*XLAEigen*`` from the moment it is created, so their presence in ``/proc/self/task``
    answers it; elsewhere this returns False (a call after the start then changes the
    environment but not the pool).
    """
    tasks = "/proc/self/task"
    if not os.path.isdir(tasks):
        return False
    for tid in os.listdir(tasks):
        try:
            with open(os.path.join(tasks, tid, "comm")) as f:
                if "XLAEigen" in f.read():
                    return True
        except OSError:  # the thread ended meanwhile
            continue
    return False


def chosen() -> int | None:
    """The pool size the environment asks XLA for (``PORTABLE_NPROC`` or ``NPROC``), or
    None for XLA's default (one thread per core)."""
    for name in VARIABLES:
        value = os.environ.get(name, "")
        if value.strip().isdigit() and int(value) > 0:
            return int(value)
    return None


_TOO_LATE = ("jax has already started in this process (importing jaxrl_par.runner.training, "
             "jaxrl_par.envs or gymnax starts it), so this has no effect; call it first "
             "thing, before those imports, or restart the kernel")


def limit(threads: int = 1, *, override: bool = False, warn: bool = True) -> bool:
    """Asks XLA:CPU for a pool of ``threads`` threads in this process; returns whether the
    request takes effect.

    It does not when JAX has already created its CPU client (nothing is changed then;
    with ``warn``, a warning says so unless the environment had chosen ``threads``), or,
    unless ``override``, when ``PORTABLE_NPROC`` or ``NPROC`` already chose a size (the
    user's choice is kept).
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads={threads!r}: give a number of threads >= 1")
    if backend_started():
        if warn and chosen() != threads:
            warnings.warn(f"cpu_threads.limit({threads}): {_TOO_LATE}", stacklevel=2)
        return False
    if chosen() is not None and not override:
        return chosen() == threads
    os.environ.pop("PORTABLE_NPROC", None)  # it would win over NPROC
    os.environ["NPROC"] = str(threads)
    return True


#: The XLA flag that sets how many CPU devices the CPU client makes (one by default).
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def device_count_asked() -> int | None:
    """The CPU device count ``XLA_FLAGS`` asks for, or None when it does not set one."""
    count = None
    for flag in os.environ.get("XLA_FLAGS", "").split():
        name, _, value = flag.partition("=")
        if name == DEVICE_COUNT_FLAG and value.strip().isdigit():
            count = int(value)  # XLA takes the last one given
    return count


def devices(count: int, *, warn: bool = True) -> bool:
    """Asks XLA for ``count`` CPU devices in this process (``XLA_FLAGS``); returns whether
    the request takes effect.

    On a multi-core CPU, ``train(..., devices=count)`` then runs data parallel with one
    device per core, each device's part of every program on a thread of its own (also on
    a pool of one, :func:`limit`). GPUs and TPUs are not affected.

    It does not take effect when JAX has already created its CPU client (with ``warn``, a
    warning says so unless the CPU already has ``count`` devices), or when ``XLA_FLAGS``
    already sets a count (the user's choice is kept; True if it is ``count``).
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count={count!r}: give a number of CPU devices >= 1")
    if backend_started():
        if warn:
            import jax

            if len(jax.devices("cpu")) != count:
                warnings.warn(f"cpu_threads.devices({count}): {_TOO_LATE}", stacklevel=2)
        return False
    asked = device_count_asked()
    if asked is not None:
        return asked == count
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{flags} {DEVICE_COUNT_FLAG}={count}".strip()
    return True


def parse(setting: str) -> int | None:
    """``--cpu-threads``' value: ``"auto"`` -> -1, ``"default"`` or ``"0"`` -> None (XLA's
    own choice), ``"N"`` -> N. Anything else is an error that lists the forms."""
    text = str(setting).strip().lower()
    if text == "auto":
        return -1
    if text in ("default", "0"):
        return None
    if text.isdigit():
        return int(text)
    raise ValueError(f"--cpu-threads={setting!r}: give auto (one thread unless programs run "
                     "at the same time from host threads), default or 0 (XLA's: one per "
                     "core), or a number of threads")


#: ``auto`` keeps XLA's pool (one thread per core) for a run whose envs' observations at
#: one step hold at least this many numbers together (``num_envs`` x the observation's
#: size, over the seeds a program steps at once): there the update's kernels are large,
#: and XLA runs independent ones (the actor's and the critic's) on threads of their own.
#: Below it one thread is faster: XLA's hand-offs between threads cost more than the
#: small kernels (docs/performance.md has the runs that chose it).
POOL_FROM_NUMBERS = 2**12


def auto_threads(observation_numbers: int) -> int | None:
    """``--cpu-threads auto``'s pool for a run of one program at a time: one thread, or
    None (XLA's default) when ``observation_numbers`` (``num_envs`` x the observation's
    size) reaches :data:`POOL_FROM_NUMBERS`."""
    return None if observation_numbers >= POOL_FROM_NUMBERS else 1


def auto_gives_one(setting: str, concurrent: bool) -> bool:
    """Whether :func:`apply` with ``setting`` starts the run on one thread because of
    ``auto`` (neither the run's concurrency nor the environment decided): the runs whose
    size may still give them XLA's pool (:func:`auto_threads`)."""
    return parse(setting) == -1 and not concurrent and chosen() is None


def apply(setting: str, concurrent: bool) -> int | None:
    """Sets the pool for a CLI run from ``--cpu-threads``' ``setting``; ``concurrent``: the
    run executes programs from several host threads at once. Returns the size asked for
    (None: XLA's default). ``auto`` is one thread, or XLA's default for a concurrent run or
    when the environment already chose; a number is set even over the environment."""
    threads = parse(setting)
    if threads == -1:
        if not auto_gives_one(setting, concurrent):
            return chosen()
        threads = 1
    if threads is None:
        return chosen()
    limit(threads, override=True, warn=False)  # a CLI run starts jax after this
    return chosen()


def restart_with_default_pool(argv: list[str]) -> None:
    """Replaces this process with the same command, ``ARGV`` its arguments, on XLA's
    default pool (``NPROC`` set to this process's cores, which ``auto`` then keeps); does
    not return. The command is run as it was started: ``python -m jaxrl_par ARGV`` or,
    from the ``jaxrl-par`` script, that script.

    For the CLI, whose ``auto`` starts every run on one thread, before it can see the
    run's size (jax starts when the env is made): a run that :func:`auto_threads` gives
    XLA's pool restarts once, before it has written anything. POSIX only (``os.execv``).
    """
    import sys

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    os.environ.pop("PORTABLE_NPROC", None)
    os.environ["NPROC"] = str(cores or 1)
    script = sys.argv[0]
    if os.path.basename(script) == "__main__.py" or not os.path.isfile(script):
        command = [sys.executable, "-m", "jaxrl_par", *argv]
    else:  # the installed jaxrl-par script
        command = [sys.executable, script, *argv]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)


def can_restart() -> bool:
    """Whether :func:`restart_with_default_pool` can run here (POSIX ``os.execv``)."""
    return os.name == "posix"


_hinted = False


def hint_once(observation_numbers: Callable[[], int]) -> str | None:
    """A one-line tip, the first time per process it applies: jax runs on CPU with XLA's
    default pool of several threads, which nobody chose (no ``NPROC`` or
    ``PORTABLE_NPROC``), for a run that :func:`auto_threads` gives one thread
    (``observation_numbers()``, asked only when the rest holds). None otherwise. The
    runner shows it with its progress."""
    global _hinted
    import jax

    cores = os.cpu_count() or 1
    if (_hinted or chosen() is not None or cores < 2 or jax.default_backend() != "cpu"
            or auto_threads(observation_numbers()) != 1):
        return None
    _hinted = True
    return (f"jaxrl_par: tip: XLA:CPU runs this on its default {cores} threads; one thread is "
            "usually faster for a run this small: call jaxrl_par.platform.cpu_threads.limit() "
            "before jax starts (the CLI's --cpu-threads auto does)")
