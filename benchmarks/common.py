"""Timing helpers shared by the benchmarks: compile apart, interleaved repeats, medians."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxrl_par.platform import cpu_threads


def compile_timed(fn: Callable, *args, ours: bool = False) -> tuple[Callable, float]:
    """``(compiled, seconds)``: ``jax.jit(fn).lower(*args).compile()`` timed apart.
    ``ours`` is kept for callers that mark which library a program is from; both are
    built the same way."""
    del ours
    t = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled, time.perf_counter() - t


def train_vmapped(train: Callable, keys) -> tuple[object, float, float]:
    """``(output, compile_s, train_s)`` of ``jax.vmap(train)(keys)`` (a peer's whole
    training run, e.g. rejax's ``algo.train``, over seeds), compiled first, timed apart."""
    t = time.perf_counter()
    compiled = jax.jit(jax.vmap(train)).lower(keys).compile()
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    out = jax.block_until_ready(compiled(keys))
    return out, compile_s, time.perf_counter() - t


def rejax_row(algo, steps: int, seeds: int, timed: bool) -> dict:
    """One rejax algorithm trained on ``seeds`` vmapped seeds of ``steps`` env steps:
    env steps/s, compile and train seconds, and (untimed runs) the greedy returns of
    rejax's last evaluation, per seed and their mean."""
    import jax
    import numpy as np

    keys = jax.random.split(jax.random.key(0), seeds)
    out, compile_s, wall = train_vmapped(algo.train, keys)
    row = {"env_steps_per_s": steps * seeds / wall, "compile_s": compile_s, "train_s": wall}
    if not timed:
        _, (_, returns) = out  # evaluation: (lengths, returns) [seeds, evals, episodes]
        last = np.asarray(returns)[:, -1]
        row["greedy_returns"] = [float(x) for x in last.mean(axis=-1)]
        row["greedy_return"] = float(last.mean())
    return row


def time_call(compiled: Callable, *args) -> float:
    """Seconds for one call of a compiled function, outputs ready."""
    t = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    return time.perf_counter() - t


def interleaved(cases: dict[str, tuple[Callable, tuple]], repeats: int) -> dict[str, float]:
    """Median seconds per case; each repeat calls every case once, in turn (A B C A B C)."""
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _name, (fn, args) in cases.items():  # warm-up call, not timed
        jax.block_until_ready(fn(*args))
    for _ in range(repeats):
        for name, (fn, args) in cases.items():
            times[name].append(time_call(fn, *args))
    return {k: statistics.median(v) for k, v in times.items()}


def pool_env(threads: int | None, cpu_devices: int | None = None) -> dict[str, str]:
    """This process's environment for a child process, with XLA:CPU's thread pool set to
    ``threads`` (``NPROC``), or left to XLA's default (None: one thread per core), and
    with ``cpu_devices`` CPU devices (``XLA_FLAGS``; None: XLA's one)."""
    env = {k: v for k, v in os.environ.items() if k not in cpu_threads.VARIABLES}
    if threads:
        env["NPROC"] = str(threads)
    if cpu_devices:
        flag = cpu_threads.DEVICE_COUNT_FLAG
        flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(flag)]
        env["XLA_FLAGS"] = " ".join([*flags, f"{flag}={cpu_devices}"])
    return env


def most_devices(num_envs: int, available: int) -> int:
    """The most devices, up to ``available``, that ``num_envs`` envs divide over (a
    data-parallel run's device count: one per core on CPU when the envs allow)."""
    return max(d for d in range(1, available + 1) if num_envs % d == 0)

#: The XLA:CPU set-up each library's users get: ours one thread (``jaxrl_par.platform.cpu_threads``,
#: the CLI's ``--cpu-threads auto``), a peer XLA's default; as :func:`pool_env` arguments.
USERS_POOL = {"ours": (1,), "rejax": (None,)}


def as_users_run(command_of: Callable[[str], list[str]], rounds: int,
                 say: bool = False, setups: dict[str, tuple] = USERS_POOL) -> dict[str, list]:
    """Runs ``command_of(who)`` for every ``who`` of ``setups``, each in a fresh process
    with its environment ``pool_env(*setups[who])``, ``rounds`` times, the order reversed
    every other round; the last stdout line of each run, parsed as JSON, by ``who``."""
    runs: dict[str, list] = {who: [] for who in setups}
    for r in range(rounds):
        for who in list(setups) if r % 2 == 0 else list(setups)[::-1]:
            out = subprocess.run(command_of(who), env=pool_env(*setups[who]),
                                 capture_output=True, text=True, check=True)
            runs[who].append(json.loads(out.stdout.strip().splitlines()[-1]))
            if say:
                print(r, who, runs[who][-1], flush=True)
    return runs


def machine() -> dict:
    return {
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "cpu_count": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
    }


def write_json(path: str, payload: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=1)


class FiveValueStep:
    """Wraps a gymnax 1.x env so ``step`` returns ``(obs, state, reward, done, info)``."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        if name == "_env" or name.startswith("__"):  # copy/deepcopy probe before __init__
            raise AttributeError(name)
        return getattr(self._env, name)

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        return obs, state, reward, jnp.logical_or(terminated, truncated), info

    def __hash__(self):
        return hash(self._env)

    def __eq__(self, other):
        return isinstance(other, FiveValueStep) and other._env is self._env
