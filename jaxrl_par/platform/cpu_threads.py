"""How many threads XLA:CPU runs a program's kernels on, and on how many CPU devices,
chosen before JAX starts.

XLA's CPU client runs every program on one pool of threads, one per core by default. A
program whose kernels are small (an RL update: small networks, scans over env steps) runs
slower on a pool of two than of one: XLA hands the kernels that are ready together to the
other thread, and on a 2-core host the hand-offs cost more than the kernels. On this
project's 2-core host, unpinned, the CLI's PPO ran at 0.6-0.7x its one-thread speed in
most processes. A2C, IMPALA, DQN, Ape-X and SAC were 1.15-1.48x faster on one thread by
median; the default pool won only in some processes, by up to 12% (IMPALA)
(BENCHMARKS.md, 2026-12-06). With one thread every run is as fast as when pinned to one
core, and the compiler keeps its own threads.

Programs that run at the same time from several host threads (``--async-workers``,
``--actor-learner``, the ``@threads`` runtimes of ``compare``) need a thread each: on a
pool of one they take turns. Those keep XLA's default.

XLA reads the pool's size from the environment (``PORTABLE_NPROC``, else ``NPROC``) once,
when JAX creates its CPU client: on the first use of a device (importing gymnax is one).
:func:`limit` must therefore run before that; the CLI calls it for its runs
(``--cpu-threads``), and a Python user calls it first thing::

    from jaxrl_par.platform import cpu_threads
    cpu_threads.limit()          # before anything runs on a device
    cpu_threads.devices(2)       # optional: a CPU device per core, for train(..., devices=2)
"""

from __future__ import annotations

import os
import warnings

#: The environment variables XLA's CPU client sizes its pool from, the first one set wins.
VARIABLES = ("PORTABLE_NPROC", "NPROC")


def backend_started() -> bool:
    """Whether JAX has created its backends (then the pool's size is fixed)."""
    try:
        from jax._src import xla_bridge
        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # a jax without the probe: assume the worst
        return True


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
    a pool of one, :func:`limit`): on this project's 2-core host PPO ran 1.67-1.89x
    faster on two devices than on one with 64 to 4,096 CartPole envs and 256
    Breakout-MinAtar envs, and at 0.80x with 4 envs, whose kernels are too small to split
    (``benchmarks/ppo.py --as-users-run``, BENCHMARKS.md, 2026-12-06). GPUs and TPUs are
    not affected; the CPU devices then stay idle.

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


#: Algorithms that trained faster data parallel over a CPU device per core than on one
#: device once they had :data:`PER_CORE_MIN_ENVS` envs (``benchmarks/cpu_threads.py
#: --per-core`` on 2 cores: PPO 1.77x with 256 CartPole envs and 1.92x with 256
#: Breakout-MinAtar envs, IMPALA 2.05x with 64 Breakout-MinAtar envs; ``benchmarks/ppo.py
#: --as-users-run``: PPO 1.67x with 64 CartPole envs; A2C 1.36x, 1.61x and 1.80x with 64
#: and 256 CartPole and 64 Breakout-MinAtar envs). With their CartPole defaults of 4, 8
#: and 16 envs, for A3C's 4 workers of 4 envs, and for DQN and SAC, one device was as
#: fast or faster.
PER_CORE_ALGOS = ("ppo", "a2c", "impala")
PER_CORE_MIN_ENVS = 64


def per_core_helps(algo: str, num_envs: int, backend: str, cores: int) -> bool:
    """Whether a one-device run of ``algo`` (its module name) with ``num_envs`` envs would
    likely train faster on a CPU device per core: a CPU host with several cores, an
    algorithm of :data:`PER_CORE_ALGOS`, at least :data:`PER_CORE_MIN_ENVS` envs that
    divide over the cores."""
    return (backend == "cpu" and cores >= 2 and algo in PER_CORE_ALGOS
            and num_envs >= PER_CORE_MIN_ENVS and num_envs % cores == 0)


_per_core_hinted = False


def per_core_hint_once(algo: str, num_envs: int) -> str | None:
    """A one-line tip, the first time per process that :func:`per_core_helps` says so for
    this process's backend and cores, naming ``--devices`` and ``devices()``; else None.
    The runner shows it with its progress, for runs on one device."""
    global _per_core_hinted
    import jax

    cores = os.cpu_count() or 1
    if _per_core_hinted or not per_core_helps(algo, num_envs, jax.default_backend(), cores):
        return None
    _per_core_hinted = True
    return (f"jaxrl_par: tip: this CPU has {cores} cores; a CPU device per core would split "
            f"the {num_envs} envs over them (the same updates up to float rounding; PPO, A2C "
            f"and IMPALA ran 1.4-2x faster so from 64 envs on 2 cores): the CLI's --devices "
            f"{cores}, or jaxrl_par.platform.cpu_threads.devices({cores}) before jax starts and "
            f"train(..., devices={cores}) with Config(axis_name=jaxrl_par.axes.DATA)")


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


def apply(setting: str, concurrent: bool) -> int | None:
    """Sets the pool for a CLI run from ``--cpu-threads``' ``setting``; ``concurrent``: the
    run executes programs from several host threads at once. Returns the size asked for
    (None: XLA's default). ``auto`` is one thread, or XLA's default for a concurrent run or
    when the environment already chose; a number is set even over the environment."""
    threads = parse(setting)
    if threads == -1:
        if concurrent or chosen() is not None:
            return chosen()
        threads = 1
    if threads is None:
        return chosen()
    limit(threads, override=True, warn=False)  # a CLI run starts jax after this
    return chosen()


_hinted = False


def hint_once() -> str | None:
    """A one-line tip, the first time per process it applies: jax runs on CPU with XLA's
    default pool of several threads, which nobody chose (no ``NPROC`` or
    ``PORTABLE_NPROC``). None otherwise. The runner shows it with its progress."""
    global _hinted
    import jax

    cores = os.cpu_count() or 1
    if _hinted or chosen() is not None or cores < 2 or jax.default_backend() != "cpu":
        return None
    _hinted = True
    return (f"jaxrl_par: tip: XLA:CPU runs this on its default {cores} threads; one thread is "
            "usually faster for RL programs: call jaxrl_par.platform.cpu_threads.limit() before jax "
            "starts (the CLI's --cpu-threads auto does)")
