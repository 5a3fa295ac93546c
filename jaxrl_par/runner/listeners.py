"""Listeners of the chunk loop: each hears every chunk, in order, and does one job.

After every chunk the loop (:func:`jaxrl_par.runner.loop.run`) calls
``listener.on_chunk(chunk)`` on each listener in turn with a :class:`Chunk`. A listener
that adds metrics or changes the state returns the chunk changed
(``chunk._replace(rows=..., state=...)``) and the listeners after it hear that one; a
listener that only reads it returns None. ``close()`` is called once when the loop ends,
however it ends (a finished run, Ctrl-C, an exception). A logger (TensorBoard, W&B) or
another checkpoint format is one more :class:`Listener` in the list ``train``
builds; the loop does not change.

``train`` orders them: :class:`GreedyEvaluation` and :class:`SweepValues` add columns,
:class:`History` completes and keeps the rows, :class:`MetricsLog` writes them,
:class:`PBTStep` changes the state, :class:`ReplicaCheck` and :class:`CheckpointSaver`
read the state after that, :class:`ProgressBar` and :class:`Callback` come last.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxrl_par.algos import hyper
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.runner import checkpoints, records
from jaxrl_par.runner import pbt as pbt_lib
from jaxrl_par.runner.evaluation import greedy_returns


class Chunk(NamedTuple):
    """One chunk of updates, as the listeners hear it.

    Attributes:
      start: updates done before the chunk, counted from the run's start.
      end: updates done after it (``end - start`` updates, ``n`` below).
      num_updates: the run's updates.
      env_steps_per_update: environment steps of one seed in one update.
      rows: ``name -> [S, n]`` numpy metrics of the chunk's updates, every lane (seed).
      state: the training state after the chunk, leaves ``[S, ...]`` (``[S, D, ...]``
        on a mesh), on its devices.
      seconds: training seconds of the loop at the chunk's end (evaluations left out).
    """

    start: int
    end: int
    num_updates: int
    env_steps_per_update: int
    rows: dict[str, np.ndarray]
    state: Any
    seconds: float = 0.0

    @property
    def last(self) -> bool:
        """Whether the chunk ends the run."""
        return self.end >= self.num_updates


class Listener:
    """Hears every chunk of the loop; subclasses override what they need.

    Attributes:
      training_time: False for a listener whose time the loop leaves out of the
        training time and the chunks' times (an evaluation).
    """

    training_time: bool = True

    def on_chunk(self, chunk: Chunk) -> Chunk | None:
        """Does the listener's job after ``chunk``; returns the chunk changed for the
        listeners after it, or None to leave it as it is."""
        del chunk
        return None

    def close(self) -> None:
        """Called once when the loop ends, however it ends."""


def eval_due(done_after: int, chunk_updates: int, eval_every: int, num_updates: int) -> bool:
    """Whether the chunk that ends at update ``done_after`` is evaluated: every
    ``eval_every``-th chunk of the run (so a resumed run keeps the same points), and the
    last."""
    return done_after >= num_updates or (-(-done_after // chunk_updates)) % eval_every == 0


class GreedyEvaluation(Listener):
    """Adds ``greedy_return`` ``[S, n]``: NaN, and in the last column each lane's mean
    greedy return over ``num_envs`` episodes
    (:func:`jaxrl_par.runner.evaluation.greedy_returns`) after every ``every``-th chunk
    and the last.

    Args:
      algo: the algorithm (its ``act``).
      num_envs: episodes per lane, one per env.
      every: chunks between evaluations.
      chunk_updates: updates per chunk (to count chunks from the run's start).
      gather: ``gather(state) -> state``, the state as one device holds it, called by
        every process (a mesh's state); None for a state that already is.
      on_main: whether this process evaluates (the first does).

    Attributes:
      seconds: the time its evaluations took, left out of the training time.
    """

    training_time = False

    def __init__(self, algo: Algorithm, num_envs: int, every: int, chunk_updates: int,
                 gather: Callable[[Any], Any] | None = None, on_main: bool = True):
        self.algo, self.num_envs, self.every = algo, num_envs, every
        self.chunk_updates, self.gather, self.on_main = chunk_updates, gather, on_main
        self.seconds = 0.0

    def on_chunk(self, chunk: Chunk) -> Chunk:
        t0 = time.perf_counter()
        lanes, n = next(iter(chunk.rows.values())).shape
        out = np.full((lanes, n), np.nan)
        if eval_due(chunk.end, self.chunk_updates, self.every, chunk.num_updates):
            state = chunk.state if self.gather is None else self.gather(chunk.state)
            if self.on_main:
                out[:, -1] = greedy_returns(self.algo, state, num_envs=self.num_envs)
        self.seconds += time.perf_counter() - t0
        return chunk._replace(rows={**chunk.rows, "greedy_return": out})


class SweepValues(Listener):
    """Adds ``hparams/<name>`` ``[S, n]``: each lane's swept values the chunk trained
    with (``values``, ``name -> [S]``, which :class:`PBTStep` replaces after its steps)."""

    def __init__(self, values: dict[str, np.ndarray]):
        self.values = dict(values)

    def on_chunk(self, chunk: Chunk) -> Chunk:
        n = chunk.end - chunk.start
        columns = {f"hparams/{k}": np.repeat(v[:, None], n, axis=1)
                   for k, v in self.values.items()}
        return chunk._replace(rows={**chunk.rows, **columns})


class History(Listener):
    """Keeps every chunk's rows: ``columns()`` is ``name -> [S, U]`` over the run so far.

    A metric logged before this call (a resumed run) that a chunk lacks gets NaN columns
    in the chunk's rows, so every row of ``metrics.jsonl`` has it; a metric that begins in
    this call is NaN over the updates before it.

    Args:
      lanes: ``S``.
      history: ``name -> [[S, U0]]``, the rows of the updates before this call
        (:func:`jaxrl_par.runner.records.read_history`).
    """

    def __init__(self, lanes: int, history: dict[str, list[np.ndarray]] | None = None):
        self.lanes = lanes
        self.history = {k: list(v) for k, v in (history or {}).items()}

    def on_chunk(self, chunk: Chunk) -> Chunk:
        n = chunk.end - chunk.start
        rows = dict(chunk.rows)
        for k in self.history.keys() - rows.keys():  # logged before this (resumed) call
            rows[k] = np.full((self.lanes, n), np.nan, np.float32)
        for k, v in rows.items():
            if k not in self.history and chunk.start:  # begins in this (resumed) call
                self.history[k] = [np.full((self.lanes, chunk.start), np.nan, v.dtype)]
            self.history.setdefault(k, []).append(v)
        return chunk._replace(rows=rows)

    def columns(self) -> dict[str, np.ndarray]:
        """``name -> [S, U]``: every metric over every update so far."""
        return {k: np.concatenate(v, axis=1) for k, v in self.history.items()}


class MetricsLog(Listener):
    """Appends the chunk's rows to ``metrics.jsonl`` at ``path``, one line per update
    (:func:`jaxrl_par.runner.records.append_rows`), each with the run's training seconds
    at its end (measured at chunk ends, spread evenly over a chunk's updates; a resumed
    run continues from the seconds of the last row the file holds)."""

    def __init__(self, path: str):
        self.path = path
        self.offset = records.last_seconds(path)
        self.previous = 0.0

    def on_chunk(self, chunk: Chunk) -> None:
        n = chunk.end - chunk.start
        seconds = self.offset + self.previous + (chunk.seconds - self.previous) * (
            np.arange(1, n + 1) / n)
        self.previous = chunk.seconds
        records.append_rows(self.path, chunk.rows, chunk.start, chunk.env_steps_per_update,
                            seconds=seconds)


class PBTStep(Listener):
    """After every chunk but the last, one exploit/explore step of population based
    training (:mod:`jaxrl_par.runner.pbt`) over the lanes: the state with the worst lanes
    replaced, and the new values in ``values`` (a :class:`SweepValues`). Each decision is
    appended to ``log`` (``pbt.jsonl``) when given.

    Args:
      pbt: how the population exploits and explores.
      values: the listener that holds each lane's current values.
      seeds: the run's seeds (they seed the decisions, with the update count).
      config: the algorithm's config (a new value it rejects keeps the parent's).
      log: the ``pbt.jsonl`` path, or None (a process other than the first).
    """

    def __init__(self, pbt: pbt_lib.PBT, values: SweepValues, seeds: list[int],
                 config: Any, log: str | None = None):
        self.pbt, self.values, self.seeds, self.config, self.log = pbt, values, seeds, \
            config, log

    def on_chunk(self, chunk: Chunk) -> Chunk | None:
        if chunk.last:
            return None
        score = pbt_lib.scores(chunk.rows, self.pbt.metric)
        source, new = pbt_lib.exploit_explore(self.pbt, score, self.values.values,
                                              pbt_lib.rng_for(self.seeds, chunk.end),
                                              self.config)
        state = pbt_lib.apply(chunk.state, source, new)
        if self.log:
            with open(self.log, "a") as f:
                f.write(json.dumps({"update": chunk.end, "source": source.tolist(),
                                    "score": [None if not np.isfinite(x) else float(x)
                                              for x in score],
                                    "hparams": hyper.to_record(new)})
                        + "\n")
        self.values.values = new
        return chunk._replace(state=state)


class ReplicaCheck(Listener):
    """Calls ``check(state, where=...)`` after every chunk, e.g.
    :func:`jaxrl_par.parallel.assert_is_replicated` (the data-parallel replicas did not
    diverge)."""

    def __init__(self, check: Callable[..., None]):
        self.check = check

    def on_chunk(self, chunk: Chunk) -> None:
        self.check(chunk.state, where=f"after update {chunk.end}")


class CheckpointSaver(Listener):
    """Saves the state as the checkpoint of its updates done
    (:class:`jaxrl_par.runner.checkpoints.Checkpoints`, orbax: in the background, the
    last few kept; every process writes its own shards), with ``meta`` beside it.

    With ``every_seconds`` (one process), a chunk is saved when that long has passed
    since the last save began and no save is still in flight, so training neither waits
    for the disk nor shares it with a write after every short chunk; the last chunk the
    loop ran is saved when the loop ends, however it ends (a finished run, Ctrl-C,
    SIGTERM, an exception after the chunk), and the writes in flight are waited for. A
    process killed outright loses at most the chunks since the last save.

    Args:
      store: where the checkpoints go.
      meta: what each checkpoint records beside the updates done (seeds, layout, config).
      every_seconds: the least time between two saves, or None to save every chunk
        (several processes, which must all save the same chunks, always do).
    """

    def __init__(self, store: checkpoints.Checkpoints, meta: dict,
                 every_seconds: float | None = None):
        self.store, self.meta, self.every = store, meta, every_seconds
        self.unsaved: Chunk | None = None
        self.last_save = time.perf_counter()

    def on_chunk(self, chunk: Chunk) -> None:
        if self.every is not None and not chunk.last and (
                self.store.busy() or time.perf_counter() - self.last_save < self.every):
            self.unsaved = chunk
            return
        self._save(chunk)

    def _save(self, chunk: Chunk) -> None:
        self.unsaved = None
        self.last_save = time.perf_counter()
        self.store.save(chunk.end, chunk.state, self.meta)

    def close(self) -> None:
        try:
            chunk = self.unsaved
            if chunk is not None and not any(
                    getattr(x, "is_deleted", lambda: False)()
                    for x in jax.tree.leaves(chunk.state)):  # not donated to a chunk since
                self.store.wait()
                self._save(chunk)
        finally:
            self.unsaved = None
            self.store.close()


class ProgressBar(Listener):
    """A tqdm bar of environment steps (one seed's), with the latest mean episode return
    and greedy return; it closes with the loop.

    Args:
      num_updates: the run's updates.
      env_steps_per_update: environment steps of one seed in one update.
      initial: updates done before this call (a resumed run).
    """

    def __init__(self, num_updates: int, env_steps_per_update: int, initial: int = 0):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=num_updates * env_steps_per_update, unit="step",
                        unit_scale=True, initial=initial * env_steps_per_update,
                        dynamic_ncols=True)
        self.postfix: dict[str, str] = {}

    def on_chunk(self, chunk: Chunk) -> None:
        n = chunk.end - chunk.start
        self.bar.update(n * chunk.env_steps_per_update)
        # The chunk's last quarter; where no episode ended in it, the last figure stays.
        ret = chunk.rows["episode_return"][:, -max(1, n // 4):]
        if np.any(~np.isnan(ret)):
            self.postfix["ret"] = f"{np.nanmean(ret):.1f}"
        greedy = chunk.rows.get("greedy_return")
        if greedy is not None and np.any(~np.isnan(greedy[:, -1])):
            self.postfix["greedy"] = f"{np.nanmean(greedy[:, -1]):.1f}"
        if self.postfix:  # the latest of each, the greedy one kept between evaluations
            self.bar.set_postfix(self.postfix)

    def close(self) -> None:
        self.bar.close()


class Callback(Listener):
    """Calls ``fn(updates_done, rows)`` after every chunk (``train``'s ``callback``)."""

    def __init__(self, fn: Callable[[int, dict[str, np.ndarray]], None]):
        self.fn = fn

    def on_chunk(self, chunk: Chunk) -> None:
        self.fn(chunk.end, chunk.rows)
