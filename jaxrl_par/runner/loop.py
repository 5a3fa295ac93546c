"""The chunk loop: a compiled chunk after another until the run's updates are done.

After each chunk the loop brings its metrics to the host (only the chunk's own updates),
stops on a NaN or infinite loss, and hands a :class:`~jaxrl_par.runner.listeners.Chunk`
to the listeners in order (:mod:`jaxrl_par.runner.listeners`). Ctrl-C or SIGTERM in a
single-process run finishes the running chunk and its listeners, then stops
(:class:`jaxrl_par.runner.interrupt.GracefulStop`).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par.runner import interrupt
from jaxrl_par.runner.listeners import Chunk, Listener


class Ran(NamedTuple):
    """What :func:`run` returns.

    Attributes:
      state: the state after the last chunk that finished (as the listeners left it).
      done: updates done, counted from the run's start.
      chunk_ends: ``[C]`` updates done after each chunk this loop ran.
      chunk_seconds: ``[C]`` seconds from the loop's start to the end of each of those
        chunks (its listeners included, those with ``training_time=False`` left out).
      seconds: the loop's wall time, listeners with ``training_time=False`` left out.
      stop_signal: the signal that stopped the loop before the run's end, or None.
    """

    state: Any
    done: int
    chunk_ends: list[int]
    chunk_seconds: list[float]
    seconds: float
    stop_signal: int | None


def to_host_rows(metrics: dict[str, jax.Array], n_valid: int) -> dict[str, np.ndarray]:
    """``name -> [S, n_valid]`` numpy: the first ``n_valid`` updates of each metric (the
    rest of a chunk that runs past the run's end was skipped)."""
    return {k: np.asarray(v)[:, :n_valid] for k, v in metrics.items()}


def check_finite(metrics: dict[str, np.ndarray], first_update: int) -> None:
    """Raises ``FloatingPointError`` naming the first update and seed at which a metric
    named ``*loss*`` is NaN or infinite."""
    for name, values in metrics.items():
        if "loss" in name and not np.all(np.isfinite(values)):
            seed, u = np.argwhere(~np.isfinite(values))[0]
            raise FloatingPointError(
                f"{name} became {values[seed, u]} at update {first_update + u} (seed index "
                f"{seed}); training stopped. Lower the learning rate, clip gradients harder "
                "(max_grad_norm) or normalise observations (normalize_obs=true)."
            )


MAX_CHUNK_SECONDS = 10.0  # train's default bound on a chunk's wall time


class Bounds(NamedTuple):
    """Wall-clock bounds of the loop.

    Attributes:
      chunk_seconds: a chunk that takes longer than this (by a fifth) is followed by
        chunks of fewer updates, compiled by ``rechunk(updates)``, sized to take about
        this long: a stop (SIGTERM's grace period, 30 s under SLURM and Kubernetes)
        never waits much longer than this for the running chunk. None: no bound.
      time_limit: stop (with the last chunk's listeners run, so logged and
        checkpointed) before a chunk that would end past this many seconds from the
        loop's start, judged by the last chunk's time; the first chunk always runs (a
        resumed run goes on). None: no limit.
      rechunk: ``rechunk(updates) -> chunk`` of that many updates, or None where the
        chunk size must stay (several processes, whose clocks differ; PBT's interval).
    """

    chunk_seconds: float | None = None
    time_limit: float | None = None
    rechunk: Callable[[int], Callable] | None = None


def smaller_chunk(chunk_updates: int, took: float, bound: float) -> int | None:
    """The updates of a chunk that takes about ``bound`` seconds when ``chunk_updates``
    took ``took``; None when the chunk is within the bound (a fifth over is let pass) or
    is one update already."""
    if took <= 1.2 * bound or chunk_updates <= 1:
        return None
    return max(1, int(chunk_updates * bound / took))


def run(chunk: Callable | None, state: Any, *, start: int, num_updates: int,
        chunk_updates: int, env_steps_per_update: int, listeners: Sequence[Listener] = (),
        stop_on_signal: bool = True, bounds: Bounds | None = None) -> Ran:
    """Runs ``chunk(state, start) -> (state, metrics {name: [S, chunk_updates]})`` from
    update ``start`` until ``num_updates`` are done, calling the listeners after each.

    With ``stop_on_signal``, the first Ctrl-C or SIGTERM ends the loop after the running
    chunk and its listeners (a multi-host run leaves it off: one process stopping alone
    would leave the others waiting in a collective). ``bounds`` keeps chunks short and
    the loop within a time limit (:class:`Bounds`). Every listener is closed when the
    loop ends, however it ends.
    """
    bounds = bounds or Bounds()
    done = start
    chunk_ends: list[int] = []
    chunk_seconds: list[float] = []
    aside = 0.0  # time of the listeners that are not training, and of recompiles
    last = 0.0  # the last chunk's seconds
    t_start = time.perf_counter()
    with interrupt.GracefulStop(enabled=stop_on_signal) as stop, contextlib.ExitStack() as ends:
        for listener in listeners:
            ends.callback(listener.close)
        while done < num_updates and not stop.requested:
            if (bounds.time_limit is not None and chunk_ends
                    and time.perf_counter() - t_start + last > bounds.time_limit):
                print(f"jaxrl_par: the time limit ({bounds.time_limit:g} s) would pass "
                      "during the next chunk: stopping", file=sys.stderr)
                break
            t_chunk = time.perf_counter()
            state, metrics = chunk(state, jnp.int32(done))
            n_valid = min(chunk_updates, num_updates - done)
            rows = to_host_rows(metrics, n_valid)
            last = time.perf_counter() - t_chunk
            check_finite(rows, done)
            event = Chunk(start=done, end=done + n_valid, num_updates=num_updates,
                          env_steps_per_update=env_steps_per_update, rows=rows, state=state,
                          seconds=time.perf_counter() - t_start - aside)
            for listener in listeners:
                t0 = time.perf_counter()
                changed = listener.on_chunk(event)
                if not listener.training_time:
                    aside += time.perf_counter() - t0
                if changed is not None:
                    event = changed
            state, done = event.state, event.end
            chunk_ends.append(done)
            chunk_seconds.append(time.perf_counter() - t_start - aside)
            fewer = (smaller_chunk(chunk_updates, last, bounds.chunk_seconds)
                     if bounds.chunk_seconds and bounds.rechunk and done < num_updates
                     else None)
            if fewer is not None:
                t0 = time.perf_counter()
                chunk, chunk_updates = bounds.rechunk(fewer), fewer
                aside += time.perf_counter() - t0
                last = last * fewer / n_valid
    if done < num_updates:
        print(f"jaxrl_par: interrupted after {done} of {num_updates} updates",
              file=sys.stderr)  # how to resume: interrupt.message, printed at the signal
    return Ran(state=state, done=done, chunk_ends=chunk_ends, chunk_seconds=chunk_seconds,
               seconds=time.perf_counter() - t_start - aside,
               stop_signal=stop.signum if done < num_updates else None)
