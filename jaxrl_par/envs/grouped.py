"""Gymnasium envs in a few subprocesses, each stepping a group of them in turn.

gymnasium's ``AsyncVectorEnv`` (and baselines' ``SubprocVecEnv``) gives every env a
process of its own: ``N`` envs cost ``N`` round trips between processes per step, and
on a machine with fewer cores than envs the processes take turns. Here ``G`` worker
processes (by default one per core) each hold ``N / G`` consecutive envs and step them
one after another, so a vector step costs ``G`` round trips and runs ``G`` groups at
once: the SubprocVecEnv paradigm with groups, as in Sample Factory's and EnvPool's
worker design.

The vector follows gymnasium 1.x's ``AutoresetMode.SAME_STEP``: the step that ends an
episode returns the next episode's first observation and, in ``info["final_obs"]`` (with
the mask ``info["_final_obs"]``), the observation it reached. Env ``i`` is first reset
with seed ``seed + i``, as ``AsyncVectorEnv.reset(seed=seed)`` does, so for the same
actions every env steps exactly as it does in gymnasium's vector envs.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import traceback
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np


def default_groups(num_envs: int) -> int:
    """One group per core, at most one per env."""
    return max(1, min(num_envs, os.cpu_count() or 1))


def group_bounds(num_envs: int, groups: int) -> list[tuple[int, int]]:
    """``[(first, end)]`` env indices of each group: consecutive, sizes differing by at
    most one (the first ``num_envs % groups`` groups hold one more)."""
    size, extra = divmod(num_envs, groups)
    bounds, first = [], 0
    for g in range(groups):
        end = first + size + (g < extra)
        bounds.append((first, end))
        first = end
    return bounds


def drop_trainer_signals() -> None:
    """In an env worker process, the signal handlers inherited from the trainer dropped:
    Ctrl-C reaches the trainer alone (which finishes its chunk, still stepping the
    envs), and the worker ends quietly when its trainer ends it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _worker(conn, name: str, seeds: Sequence[int]) -> None:
    """A group's process: makes ``gymnasium.make(name)`` once per seed, then answers
    ``("reset", None)`` and ``("step", actions)`` on ``conn`` with ``("ok", result)`` or
    ``("error", traceback)``, until ``("close", None)``."""
    drop_trainer_signals()
    envs = []
    try:
        import gymnasium

        envs = [gymnasium.make(name) for _ in seeds]
        while True:
            command, data = conn.recv()
            if command == "reset":
                obs = [env.reset(seed=int(s))[0] for env, s in zip(envs, seeds, strict=True)]
                conn.send(("ok", np.stack(obs)))
            elif command == "step":
                conn.send(("ok", _step_group(envs, data)))
            elif command == "close":
                break
    except (EOFError, KeyboardInterrupt):  # the trainer went away
        pass
    except Exception:  # reported to the trainer, which raises it
        with contextlib.suppress(OSError):  # the trainer went away
            conn.send(("error", traceback.format_exc()))
    finally:
        for env in envs:
            env.close()
        conn.close()


def _step_group(envs: list, actions: np.ndarray) -> tuple[np.ndarray, ...]:
    """Steps each env of a group with its action, resetting those whose episode ended;
    ``(obs, reward, terminated, truncated, final_obs)``, each ``[k, ...]``."""
    obs, reward, terminated, truncated, final_obs = [], [], [], [], []
    for env, action in zip(envs, actions, strict=True):
        o, r, term, trunc, _ = env.step(action)
        final_obs.append(o)
        if term or trunc:
            o, _ = env.reset()
        obs.append(o)
        reward.append(r)
        terminated.append(term)
        truncated.append(trunc)
    return (np.stack(obs), np.asarray(reward, np.float64), np.asarray(terminated),
            np.asarray(truncated), np.stack(final_obs))


class GroupedVecEnv:
    """``num_envs`` copies of ``gymnasium.make(name)`` in ``groups`` subprocesses.

    A gymnasium-style vector env: ``reset(seed)`` and ``step_async(actions)`` /
    ``step_wait()`` return what ``AsyncVectorEnv`` returns in ``SAME_STEP`` autoreset
    mode (``info`` holds ``final_obs`` and its mask ``_final_obs``). Actions go to the
    workers and observations come back through pipes.
    """

    def __init__(self, name: str, num_envs: int, groups: int | None = None):
        groups = default_groups(num_envs) if groups is None else groups
        if not 1 <= groups <= num_envs:
            raise ValueError(f"groups={groups}: give 1 to num_envs={num_envs}")
        self.num_envs = num_envs
        self.bounds = group_bounds(num_envs, groups)
        self._name = name
        # The platform's default start method, as gymnasium's AsyncVectorEnv takes it: a
        # fork on Linux, so a script without a __main__ guard works as it does there.
        self._ctx = multiprocessing.get_context()
        self._conns: list[Any] = []
        self._procs: list[Any] = []

    def _start(self, seed: int) -> None:
        self.close()
        for a, b in self.bounds:
            parent, child = self._ctx.Pipe()
            proc = self._ctx.Process(target=_worker, daemon=True,
                                     args=(child, self._name, [seed + i for i in range(a, b)]))
            with warnings.catch_warnings():
                # JAX warns that a fork of its threads may deadlock; the worker never
                # touches JAX, only gymnasium.
                warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")
                proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)

    def _gather(self) -> list:
        out = []
        for conn in self._conns:
            try:
                status, result = conn.recv()
            except (EOFError, OSError):
                raise RuntimeError(f"a worker process of {self._name!r} died") from None
            if status == "error":
                raise RuntimeError(f"a worker process of {self._name!r} failed:\n{result}")
            out.append(result)
        return out

    def reset(self, seed: int = 0) -> tuple[np.ndarray, dict]:
        """Starts the workers; env ``i`` is reset with seed ``seed + i``."""
        self._start(seed)
        for conn in self._conns:
            conn.send(("reset", None))
        return np.concatenate(self._gather()), {}

    def step_async(self, actions: np.ndarray) -> None:
        """Sends each group its envs' actions (``[N]`` or ``[N, D]``)."""
        for conn, (a, b) in zip(self._conns, self.bounds, strict=True):
            conn.send(("step", actions[a:b]))

    def step_wait(self) -> tuple:
        """``(obs, reward, terminated, truncated, info)`` of the step started."""
        parts = self._gather()
        obs, reward, terminated, truncated, final_obs = (
            np.concatenate(x) for x in zip(*parts, strict=True))
        final = np.empty(self.num_envs, dtype=object)
        final[:] = list(final_obs)
        return obs, reward, terminated, truncated, {"final_obs": final,
                                                    "_final_obs": terminated | truncated}

    def step(self, actions: np.ndarray) -> tuple:
        self.step_async(actions)
        return self.step_wait()

    def close(self) -> None:
        """Ends the workers (those still answering are asked; the rest are ended)."""
        for conn in self._conns:
            with contextlib.suppress(OSError):  # that worker has ended
                conn.send(("close", None))
        for conn, proc in zip(self._conns, self._procs, strict=True):
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
            conn.close()
        self._conns, self._procs = [], []
