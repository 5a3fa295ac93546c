"""The runner: seeds x chunks of scanned updates, progress, logs, checkpoints.

It knows algorithms only through their protocol (``init``/``update``): ``jax.vmap`` over
seeds, ``lax.scan`` over the updates of one chunk, a host loop over chunks that drives a
progress bar, writes ``metrics.jsonl`` and a checkpoint, and checks losses for NaN.
The chunk function is compiled once; chunked training equals one long scan, and resuming
from the checkpoint equals never stopping. Training the same ``Algorithm`` object again
with the same number of seeds and chunk size (other seeds, a resumed run, a notebook cell
run twice) reuses the compiled programs of the last few runs instead of compiling again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par import axes, envs
from jaxrl_par.algos import hyper
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.platform import cpu_threads
from jaxrl_par.runner import checkpoint, interrupt, layouts, lockfile, programs, records
from jaxrl_par.runner import pbt as pbt_lib
from jaxrl_par.runner.precision import float32
from jaxrl_par.runner.programs import choose_chunk, make_chunk_fn, seed_keys
from jaxrl_par.runner.records import CHECKPOINT, METRICS, config_record

__all__ = ["CHECKPOINT", "METRICS", "TrainResult", "choose_chunk", "config_record",
           "make_chunk_fn", "seed_keys", "train"]

@dataclasses.dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
      state: final training state; every leaf has a leading seed axis ``[S, ...]``, or
        ``[S, D, ...]`` (one copy per data shard) when trained with ``devices``/``pop``.
      metrics: ``name -> [S, U]`` per-update metrics of every seed.
      env_steps: ``[U]`` environment steps of one seed after each update.
      seeds: the seeds, in the order of the leading axis.
      hparams: ``name -> [S]`` float32 values of each swept hyperparameter per lane
        (``train(..., hparams=...)``; empty when the algorithm sweeps nothing).
      compile_seconds: time to compile the init and chunk functions (near zero when
        they were reused from an earlier run of the same algorithm object).
      train_seconds: wall time of the training loop, compilation excluded.
      steps_per_second: environment steps per second, all seeds together.
      interrupted: True when Ctrl-C or SIGTERM stopped the run early (see
        :func:`train`); then ``metrics`` and ``env_steps`` end at the last finished chunk
        and ``state`` is the state after it.
      stop_signal: the number of the signal that stopped it (``signal.SIGINT`` or
        ``signal.SIGTERM``), or None.
      updates_run: updates trained by this call (fewer than ``U`` on a resumed run; 0
        when the resumed run had already finished, and then nothing was compiled and
        ``steps_per_second`` is 0).
      chunk_ends: ``[C]`` updates done (counted from the run's start) after each chunk
        this call trained.
      chunk_seconds: ``[C]`` wall seconds from the start of this call's training loop
        to the end of each of those chunks (compilation excluded; the last is about
        ``train_seconds``): a learning curve against wall-clock time.
      eval_seconds: time spent in the evaluations of ``train(..., eval_envs=N)``
        (not part of ``train_seconds``).
    """

    state: Any
    metrics: dict[str, np.ndarray]
    env_steps: np.ndarray
    seeds: list[int]
    compile_seconds: float
    train_seconds: float
    steps_per_second: float
    interrupted: bool = False
    stop_signal: int | None = None
    updates_run: int = 0
    hparams: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    chunk_ends: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(0, np.int64))
    chunk_seconds: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(0, np.float64))
    eval_seconds: float = 0.0

    @property
    def returns(self) -> np.ndarray:
        """``[S, U]`` mean return of episodes finished in each update, forward-filled
        over updates in which none finished (NaN before the first)."""
        r = np.array(self.metrics["episode_return"], dtype=np.float64)
        for s in range(r.shape[0]):
            last = np.nan
            for u in range(r.shape[1]):
                if np.isnan(r[s, u]):
                    r[s, u] = last
                else:
                    last = r[s, u]
        return r

    def final_returns(self, fraction: float = 0.05) -> np.ndarray:
        """``[S]`` mean episode return over the last ``fraction`` of updates, per seed."""
        return self.trailing_returns(fraction)[:, -1]

    def trailing_returns(self, fraction: float = 0.05) -> np.ndarray:
        """``[S, U]``: at every update, each seed's mean episode return over the
        trailing ``ceil(fraction * U)`` updates, leaving out updates where no episode
        finished (where none in the window did, the last return before it; NaN before
        the first). Its last column is :meth:`final_returns`."""
        r = np.asarray(self.metrics["episode_return"], dtype=np.float64)
        k = max(1, math.ceil(r.shape[1] * fraction))
        finished = ~np.isnan(r)
        zero = np.zeros((r.shape[0], 1))
        sums = np.concatenate([zero, np.cumsum(np.where(finished, r, 0.0), axis=1)], axis=1)
        counts = np.concatenate([zero, np.cumsum(finished, axis=1)], axis=1)
        hi = np.arange(1, r.shape[1] + 1)
        lo = np.maximum(hi - k, 0)
        total, count = sums[:, hi] - sums[:, lo], counts[:, hi] - counts[:, lo]
        return np.where(count > 0, total / np.maximum(count, 1), self.returns)


def _to_host_rows(metrics: dict[str, jax.Array], n_valid: int) -> dict[str, np.ndarray]:
    return {k: np.asarray(v)[:, :n_valid] for k, v in metrics.items()}


def _check_finite(metrics: dict[str, np.ndarray], first_update: int) -> None:
    for name, values in metrics.items():
        if "loss" in name and not np.all(np.isfinite(values)):
            seed, u = np.argwhere(~np.isfinite(values))[0]
            raise FloatingPointError(
                f"{name} became {values[seed, u]} at update {first_update + u} (seed index "
                f"{seed}); training stopped. Lower the learning rate, clip gradients harder "
                "(max_grad_norm) or normalise observations (normalize_obs=true)."
            )


def _one_run_per_log_dir(train_fn):
    """``train_fn`` run while its process holds the ``log_dir`` it writes
    (:class:`jaxrl_par.runner.lockfile.LogDirLock`): a second run on the same log dir fails at
    once instead of interleaving its logs and checkpoints with the first's."""
    @functools.wraps(train_fn)
    def locked(*args, **kwargs):
        log_dir = kwargs.get("log_dir")  # keyword-only in train
        with lockfile.LogDirLock(log_dir if jax.process_index() == 0 else None):
            return train_fn(*args, **kwargs)

    return locked


@float32
@_one_run_per_log_dir
def train(
    algo: Algorithm,
    seeds: int | Sequence[int] | jax.Array = 0,
    *,
    num_chunks: int = 20,
    log_dir: str | None = None,
    resume: bool = False,
    progress: bool = True,
    callback: Callable[[int, dict[str, np.ndarray]], None] | None = None,
    chunk_fn_factory: Callable[..., Callable] | None = None,
    devices: int | Sequence[jax.Device] | None = None,
    pop: int | None = None,
    debug_replication: bool = False,
    check_memory: bool = True,
    actor_learner: bool | Sequence[jax.Device] | None = None,
    async_workers: Any = None,
    hparams: dict[str, Any] | None = None,
    pbt: pbt_lib.PBT | None = None,
    eval_envs: int = 0,
    eval_every: int = 1,
) -> TrainResult:
    """Trains ``algo`` for ``algo.num_updates`` updates on every seed at once.

    Args:
      algo: an :class:`Algorithm` (``init``/``update`` pair).
      seeds: an int, a list of ints, or ``[S]`` PRNG keys; seeds are vmapped.
      num_chunks: host round-trips (progress, logs, checkpoint) over the run.
      log_dir: if given, writes ``config.json``, ``metrics.jsonl`` (one line per update)
        and ``checkpoint.npz`` (after every chunk). One run at a time: a log dir that
        another process is training in is an error (:mod:`jaxrl_par.runner.lockfile`).
      resume: continue from ``log_dir``'s checkpoint if there is one (needs ``log_dir``).
        Without it, a ``log_dir`` that already holds a run is an error: a fresh run
        never overwrites another's logs and checkpoint.
      progress: show a tqdm progress bar.
      callback: ``callback(updates_done, chunk_metrics)`` after each chunk (numpy rows;
        like all of ``train`` it runs with ``jax_enable_x64`` off, see
        :mod:`jaxrl_par.runner.precision`).
      chunk_fn_factory: replaces :func:`make_chunk_fn` (``jaxrl_par.parallel`` uses it to
        shard the chunk over a device mesh).
      devices: train on a ``('pop', 'data')`` mesh of this many devices (or these
        devices; all of every process after ``jax.distributed.initialize``). The
        algorithm must be made with ``axis_name=jaxrl_par.axes.DATA`` when the data axis
        has more than one device. See :mod:`jaxrl_par.parallel`.
      pop: size of the mesh's ``pop`` axis (default 1); must divide the devices, and the
        number of seeds must be a multiple of it. Each pop shard trains its seeds
        (vmapped) data-parallel over ``devices / pop`` devices.
      debug_replication: with a mesh, check after every chunk (not only at the end)
        that the data-parallel replicas did not diverge.
      check_memory: before compiling, check from its shapes that the state (all seeds,
        replay buffers included) fits in the memory free on its devices, and raise a
        ``ValueError`` naming its largest parts if not (:mod:`jaxrl_par.runner.memory`).
      actor_learner: run a pipelined algorithm's actors and learner at the same time,
        the actors on one device and the learner (replay included) on another: ``True``
        for the first two local devices, or ``(learner_device, actor_device)``. Needs an
        algorithm with a pipelined update (``apex.Config(pipeline=True)``); the result
        equals training it without this option. On CPU, two devices (two cores) need
        ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` set before jax is
        imported; with one device both halves share it. See
        :mod:`jaxrl_par.parallel.actor_learner`.
      async_workers: run an asynchronous algorithm's workers (A3C's, Gorila's) in host threads of
        their own that push gradients to the parameter server as they finish, instead
        of the algorithm's round-robin ``update``: ``True`` (workers spread over the
        local devices), a sequence of devices, or a
        :class:`~jaxrl_par.parallel.async_workers.AsyncWorkers`. Runs are then
        nondeterministic, as the paradigm's are; see
        :mod:`jaxrl_par.parallel.async_workers`.
      hparams: a sweep: ``name -> [S]`` values of the algorithm's swept hyperparameters
        (``algo.hyperparams``, e.g. ``ppo.Config(sweep=("learning_rate",))``), one per
        seed (lane), trained at once by the same compiled program.
        :func:`jaxrl_par.algos.hyper.grid` makes every seed at every point of a grid. A
        swept field left out keeps the config's value. A resumed run takes its values
        from the checkpoint (given ones must equal them).
      pbt: population based training over the sweep's lanes (:class:`jaxrl_par.runner.pbt.PBT`):
        every ``pbt.interval`` updates (then the chunk size) the worst lanes copy the
        best ones' states and perturb their values. ``hparams`` are then the initial
        values; ``TrainResult.hparams`` the final ones, and ``metrics["hparams/NAME"]``
        each lane's values at every update. One process only.
      eval_envs: if > 0, evaluate the policy greedily during training: after every
        ``eval_every``-th chunk (counted from the run's start) and after the last, one
        episode in each of ``eval_envs`` envs per lane
        (:func:`jaxrl_par.runner.evaluation.greedy_returns`, the same start states each time).
        The results are ``metrics["greedy_return"]`` (and in ``metrics.jsonl``) at the
        chunk's last update, NaN at the others. The time it takes (its compile
        included) is ``TrainResult.eval_seconds``, left out of ``train_seconds``.
      eval_every: chunks between evaluations.

    Ctrl-C (SIGINT) or SIGTERM (what SLURM, Kubernetes and ``kill`` send before they
    kill a job) in a single-process run finishes the running chunk, logs and checkpoints
    it, and returns a result with ``interrupted=True`` that holds everything finished so
    far; a second Ctrl-C raises ``KeyboardInterrupt`` at once, a second SIGTERM ends the
    process. Multi-host runs keep the signals' usual behaviour.

    Returns:
      A :class:`TrainResult`.
    """
    if isinstance(num_chunks, bool) or not isinstance(num_chunks, (int, np.integer)) \
            or num_chunks < 1:
        raise ValueError(f"train: num_chunks={num_chunks!r}; give the number of host "
                         "round-trips (progress, logs, checkpoints), an int >= 1")
    _check_eval(algo, eval_envs, eval_every)
    axis_name = algo.axis_name
    if axis_name is not None and devices is None and pop is None and chunk_fn_factory is None:
        for runtime, given in (("async_workers", async_workers),
                               ("actor_learner", actor_learner)):
            if given is not None and given is not False:
                raise ValueError(
                    f"train: {runtime} places the algorithm's parts on devices itself and "
                    f"does not run data parallel; make it with axis_name=None (it has "
                    f"axis_name={axis_name!r})")
        raise ValueError(
            f"train: the algorithm was made with axis_name={axis_name!r}, which averages "
            "over the devices of a mesh, but no devices were given: pass devices=N "
            "(jaxrl-par train --devices N), or make it with axis_name=None for one device")
    keys, seed_list = seed_keys(seeds)
    lanes = hyper.lane_values(algo.config, algo.hyperparams, hparams, len(seed_list))
    num_updates = algo.num_updates
    chunk_updates = choose_chunk(num_updates, num_chunks)
    if pbt is not None:
        pbt_lib.check(pbt, lanes, num_updates)
        if jax.process_count() > 1:
            raise ValueError("pbt runs within one process (its steps are host decisions); "
                             "train it on the devices of one host")
        chunk_updates = pbt.interval
    factory = chunk_fn_factory or make_chunk_fn
    sharded = None
    pipeline = None
    if actor_learner is not None and actor_learner is not False:
        from jaxrl_par.parallel.actor_learner import ActorLearner

        if devices is not None or pop is not None or chunk_fn_factory is not None:
            raise ValueError("actor_learner runs on two devices of its own; it does not "
                             "combine with devices, pop or chunk_fn_factory")
        if jax.process_count() > 1:
            raise ValueError("actor_learner runs within one process; with several "
                             "(jax.distributed) train a mesh with devices=... instead")
        pipeline = ActorLearner(algo, actor_learner)
        if progress and not pipeline.concurrent and jax.process_index() == 0:
            print("jaxrl_par: actor_learner has one device, so actors and learner take "
                  "turns on it; on CPU set XLA_FLAGS=--xla_force_host_platform_device_count=2 "
                  "before importing jax for two", file=sys.stderr)
    if async_workers is not None and async_workers is not False:
        from jaxrl_par.parallel.async_workers import AsyncWorkers

        if pipeline is not None or devices is not None or pop is not None \
                or chunk_fn_factory is not None:
            raise ValueError("async_workers places its workers on devices itself; it does "
                             "not combine with actor_learner, devices, pop or "
                             "chunk_fn_factory")
        if jax.process_count() > 1:
            raise ValueError("async_workers runs within one process")
        pipeline = (async_workers if isinstance(async_workers, AsyncWorkers)
                    else AsyncWorkers(algo, async_workers))
    if devices is not None or pop is not None:
        from jaxrl_par import parallel

        if chunk_fn_factory is not None:
            raise ValueError("give devices/pop or chunk_fn_factory, not both")
        mesh = parallel.make_mesh(devices, pop or 1)
        parallel.check_algorithm(algo, mesh, len(seed_list), trace=False)
        sharded = parallel.Sharded(algo, mesh)
        programs.trace_init(algo, keys, sharded)  # raises before compiling, e.g. num_envs % devices
        factory = sharded.chunk_fn_factory
    # The state's layout: [S, ...] on the plain runner, [S, D, ...] on a mesh of D data shards.
    data_shards = int(sharded.mesh.shape[axes.DATA]) if sharded else None
    is_main = jax.process_index() == 0  # only process 0 writes logs and checkpoints
    ckpt_path = os.path.join(log_dir, CHECKPOINT) if log_dir else None
    record = config_record(algo)
    records.check_log_dir(log_dir, resume)
    resuming = bool(log_dir and resume and os.path.exists(ckpt_path))
    relayout = None
    if resuming:  # before compiling: a mismatch is an error, not minutes of work
        saved_meta = checkpoint.read_meta(ckpt_path)
        records.check_resumable(ckpt_path, saved_meta, seed_list, record,
                                records.absent_field_values(algo))
        lanes = records.resumed_lanes(ckpt_path, saved_meta, lanes, given=hparams is not None)
        if "data_shards" in saved_meta and saved_meta["data_shards"] != data_shards:
            relayout = _relayout(ckpt_path, saved_meta["data_shards"], data_shards, record,
                                 keys, say=progress and is_main)

    show = progress and is_main
    if show and pipeline is None:  # one program at a time
        tip = cpu_threads.hint_once()
        if tip:  # on CPU, on a pool nobody chose
            print(tip, file=sys.stderr)
    if resuming and int(saved_meta.get("updates_done", 0)) >= num_updates:
        # Nothing left to train: the checkpoint is read into the state's shapes below,
        # and nothing is compiled.
        if show:
            print(f"jaxrl_par: the run in {log_dir} already finished its {num_updates} "
                  "updates; nothing left to train", file=sys.stderr)
        state, compiled, compile_seconds = programs.trace_init(algo, keys, sharded).out_info, \
            None, 0.0
    else:
        runtime = programs.Runtime(factory=factory, sharded=sharded, pipeline=pipeline)
        state, compiled, compile_seconds = programs.build(
            algo, keys, runtime, chunk_updates, lanes=None if resuming else lanes,
            check_memory=check_memory, say=show)
        interrupt.raise_pending()  # a Ctrl-C or SIGTERM during the compile, if Python lost it

    done_updates = 0
    history: dict[str, list[np.ndarray]] = {}
    if log_dir:
        if is_main:
            os.makedirs(log_dir, exist_ok=True)
        if resuming:
            state, meta = checkpoint.load(ckpt_path, state, reshape=relayout)
            if sharded:
                state = sharded.place(state)
            done_updates = int(meta["updates_done"])
            history = records.read_history(os.path.join(log_dir, METRICS), done_updates,
                                           is_main)
        elif is_main:
            with open(os.path.join(log_dir, METRICS), "w"):
                pass
    # What config.json and each checkpoint record beside the config: the swept values,
    # and the module that registers a user's own env (load_run imports it).
    lanes_record = {**records.lanes_record(lanes), **envs.source_record(record.get("env"))}
    current = dict(lanes)  # each lane's values now (pbt changes them; the state holds them)
    if pbt is not None and done_updates:
        current = {k: np.asarray(v).reshape(len(seed_list), -1)[:, 0]
                   for k, v in state.hparams.items()}
        if log_dir and is_main:  # steps logged past the checkpoint are taken again
            pbt_lib.truncate_log(os.path.join(log_dir, records.PBT_LOG), done_updates)
    if log_dir and is_main:
        with open(os.path.join(log_dir, "config.json"), "w") as f:
            json.dump({"config": record, "seeds": seed_list, "num_updates": num_updates,
                       "data_shards": data_shards, **lanes_record}, f, indent=1)

    bar = None
    if show:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_updates * algo.env_steps_per_update, unit="step", unit_scale=True,
                   initial=done_updates * algo.env_steps_per_update, dynamic_ncols=True)
    t_start = time.perf_counter()
    updates_run = 0
    chunk_ends: list[int] = []
    chunk_seconds: list[float] = []
    eval_seconds = 0.0
    postfix: dict[str, str] = {}  # the progress bar's returns
    # Ctrl-C or SIGTERM finishes the running chunk (see jaxrl_par.runner.interrupt); not across
    # hosts. The bar closes however the loop ends.
    with (interrupt.GracefulStop(enabled=jax.process_count() == 1) as stop,
          bar if bar is not None else contextlib.nullcontext()):
        while done_updates < num_updates and not stop.requested:
            state, metrics = compiled(state, jnp.int32(done_updates))
            n_valid = min(chunk_updates, num_updates - done_updates)
            rows = _to_host_rows(metrics, n_valid)
            _check_finite(rows, done_updates)
            if eval_envs:
                t_eval = time.perf_counter()
                rows["greedy_return"] = _evaluate_chunk(
                    algo, state, sharded, eval_envs, len(seed_list), n_valid,
                    due=_eval_due(done_updates + n_valid, chunk_updates, eval_every,
                                  num_updates), on_main=is_main)
                spent = time.perf_counter() - t_eval
                eval_seconds += spent
                t_start += spent  # the training time leaves the evaluations out
            if pbt is not None:  # the values each lane trained this chunk with
                rows.update({f"hparams/{k}": np.repeat(v[:, None], n_valid, axis=1)
                             for k, v in current.items()})
            for k in history.keys() - rows.keys():  # logged before this (resumed) call
                rows[k] = np.full((len(seed_list), n_valid), np.nan, np.float32)
            for k, v in rows.items():
                if k not in history and done_updates:  # begins in this (resumed) call
                    history[k] = [np.full((len(seed_list), done_updates), np.nan, v.dtype)]
                history.setdefault(k, []).append(v)
            if log_dir and is_main:
                records.append_rows(os.path.join(log_dir, METRICS), rows, done_updates,
                                    algo.env_steps_per_update)
            done_updates += n_valid
            updates_run += n_valid
            chunk_ends.append(done_updates)
            chunk_seconds.append(time.perf_counter() - t_start)
            if pbt is not None and done_updates < num_updates:
                state, current = _pbt_step(pbt, state, rows, current, seed_list, done_updates,
                                           algo.config, log_dir if is_main else None)
            if sharded and debug_replication:
                parallel.assert_is_replicated(state, where=f"after update {done_updates}")
            if log_dir:
                host_state = parallel.to_host(state) if sharded else state  # all processes
                if is_main:
                    checkpoint.save(ckpt_path, host_state, {"updates_done": done_updates,
                                                            "seeds": seed_list,
                                                            "data_shards": data_shards,
                                                            "config": record,
                                                            **lanes_record})
            if bar is not None:
                bar.update(n_valid * algo.env_steps_per_update)
                ret = rows["episode_return"]
                if np.any(~np.isnan(ret)):
                    postfix["ret"] = f"{np.nanmean(ret[:, -max(1, n_valid // 4):]):.1f}"
                if eval_envs and np.any(~np.isnan(rows["greedy_return"][:, -1])):
                    postfix["greedy"] = f"{np.nanmean(rows['greedy_return'][:, -1]):.1f}"
                if postfix:  # the latest of each, the greedy one kept between evaluations
                    bar.set_postfix(postfix)
            if callback is not None:
                callback(done_updates, rows)
    interrupted = done_updates < num_updates
    if interrupted:
        print(f"jaxrl_par: interrupted after {done_updates} of {num_updates} updates",
              file=sys.stderr)  # how to resume: interrupt.message, printed at the signal
    train_seconds = time.perf_counter() - t_start
    if sharded:
        parallel.assert_is_replicated(state, where="after training")
    total_steps = updates_run * algo.env_steps_per_update * len(seed_list)
    metrics = {k: np.concatenate(v, axis=1) for k, v in history.items()}
    return TrainResult(
        state=state,
        metrics=metrics,
        env_steps=(np.arange(done_updates) + 1) * algo.env_steps_per_update,
        seeds=seed_list,
        compile_seconds=compile_seconds,
        train_seconds=train_seconds,
        steps_per_second=total_steps / max(train_seconds, 1e-9),
        interrupted=interrupted,
        stop_signal=stop.signum if interrupted else None,
        updates_run=updates_run,
        hparams=current,
        chunk_ends=np.asarray(chunk_ends, np.int64),
        chunk_seconds=np.asarray(chunk_seconds, np.float64),
        eval_seconds=eval_seconds,
    )


def _check_eval(algo: Algorithm, eval_envs: int, eval_every: int) -> None:
    """``ValueError`` for evaluation settings that cannot run, before anything compiles."""
    for name, value, low in (("eval_envs", eval_envs, 0), ("eval_every", eval_every, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"train: {name}={value!r}; give an int >= {low}")
    if eval_envs and algo.act is None:
        raise ValueError("train: eval_envs needs an algorithm with act(state, obs, key) to "
                         "evaluate with; this one has none")


def _eval_due(done_after: int, chunk_updates: int, eval_every: int, num_updates: int) -> bool:
    """Whether the chunk that ends at update ``done_after`` is evaluated: every
    ``eval_every``-th chunk of the run (so a resumed run keeps the same points), and the
    last."""
    return done_after >= num_updates or (-(-done_after // chunk_updates)) % eval_every == 0


def _evaluate_chunk(algo: Algorithm, state, sharded, eval_envs: int, lanes: int,
                    n_valid: int, *, due: bool, on_main: bool) -> np.ndarray:
    """``[S, n_valid]`` float64: NaN, and in the last column the lanes' greedy returns
    when ``due`` (a mesh's state is gathered by every process, evaluated by the first)."""
    from jaxrl_par.runner.evaluation import greedy_returns

    out = np.full((lanes, n_valid), np.nan)
    if not due:
        return out
    if sharded:
        from jaxrl_par import parallel

        state = parallel.unreplicate(parallel.to_host(state))  # every process takes part
    if on_main:
        out[:, -1] = greedy_returns(algo, state, num_envs=eval_envs)
    return out


def _pbt_step(pbt, state, rows, current, seeds, done_updates, cfg, log_dir):
    """One exploit/explore step after ``done_updates`` updates (see :mod:`jaxrl_par.runner.pbt`);
    appends the decision to ``log_dir/pbt.jsonl``. Returns the state and lanes' values."""
    score = pbt_lib.scores(rows, pbt.metric)
    source, new = pbt_lib.exploit_explore(pbt, score, current,
                                          pbt_lib.rng_for(seeds, done_updates), cfg)
    state = pbt_lib.apply(state, source, new)
    if log_dir:
        with open(os.path.join(log_dir, records.PBT_LOG), "a") as f:
            f.write(json.dumps({"update": done_updates, "source": source.tolist(),
                                "score": [None if not np.isfinite(x) else float(x)
                                          for x in score],
                                "hparams": hyper.to_record(new)})
                    + "\n")
    return state, new


def _layout(data_shards: int | None) -> str:
    return ("one device (no mesh)" if data_shards is None
            else f"a mesh with {data_shards} data shard(s)")


def _relayout(path: str, saved: int | None, now: int | None, record: dict, keys: jax.Array,
              say: bool) -> Callable:
    """The ``checkpoint.load`` reshape that resumes a run saved on ``saved`` data shards on
    ``now`` (``None``: one device), through one device's layout (``jaxrl_par.runner.runs``). For
    PPO the result is exact (data parallelism gives the one-device run); per-shard replay
    buffers (DQN, Ape-X) cannot be split or merged, so a warning says that every new shard
    starts from shard 0's buffer.

    Raises:
      ValueError: the algorithm is not one of ``jaxrl_par.algos`` (its one-device layout
        is unknown), naming both layouts.
    """
    from jaxrl_par.runner import runs

    try:
        name, cfg = runs.config_from_record(record)
    except ValueError:
        raise ValueError(f"{path} was written on {_layout(saved)}, this run is on "
                         f"{_layout(now)}, and only jaxrl_par.algos' algorithms can change "
                         "layout: resume with the run's devices=...") from None
    what = f"resuming {path} (written on {_layout(saved)}) on {_layout(now)}"
    if say:
        print(f"jaxrl_par: {what}", file=sys.stderr)

    def warn(message: str) -> None:
        warnings.warn(f"{what}: {message}", stacklevel=5)  # at the caller of train

    return layouts.relayout(runs.one_device_shapes(name, cfg, keys), saved, warn)
