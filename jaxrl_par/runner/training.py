"""``train``: an algorithm's run over seeds, from its arguments to its result.

``train`` checks its arguments, picks the runtime (one device's ``vmap`` over seeds, a
device mesh, the actor-learner or the asynchronous-worker runtime), continues a run from
its log dir (:mod:`jaxrl_par.runner.continuation`), builds the compiled programs
(:mod:`jaxrl_par.runner.programs`) and runs the chunk loop (:mod:`jaxrl_par.runner.loop`)
with its listeners (:mod:`jaxrl_par.runner.listeners`: evaluation, metrics log, PBT,
checkpoints, progress bar, the user's callback). It knows algorithms only through their
protocol (:class:`~jaxrl_par.algos.base.Algorithm`). Chunked training equals one long
scan, and resuming from the checkpoint equals never stopping; training the same
``Algorithm`` object again reuses its compiled programs.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxrl_par import envs, parallel, presets
from jaxrl_par.algos import hyper
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.algos.config import algorithm_name
from jaxrl_par.envs import host
from jaxrl_par.parallel.actor_learner import ActorLearner
from jaxrl_par.parallel.async_workers import AsyncWorkers
from jaxrl_par.parallel.host_loop import HostLoop
from jaxrl_par.platform import cpu_threads
from jaxrl_par.runner import (
    checkpoints,
    continuation,
    interrupt,
    lockfile,
    loop,
    programs,
    records,
)
from jaxrl_par.runner import listeners as listeners_lib
from jaxrl_par.runner import pbt as pbt_lib
from jaxrl_par.runner.precision import float32
from jaxrl_par.runner.programs import choose_chunk, make_chunk_fn, seed_keys
from jaxrl_par.runner.records import METRICS, config_record

__all__ = ["METRICS", "TrainResult", "choose_chunk", "config_record",
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


_ASYNC_ALONE = ("async_workers places its workers on devices itself; it does not combine "
                "with actor_learner, devices, pop or chunk_fn_factory")


def _given(runtime_arg: Any) -> bool:
    """Whether an ``actor_learner``/``async_workers`` argument asks for its runtime."""
    return runtime_arg is not None and runtime_arg is not False


def _check_arguments(algo: Algorithm, num_chunks: int, eval_envs: int, eval_every: int, *,
                     devices, pop, chunk_fn_factory, actor_learner, async_workers) -> None:
    """``ValueError`` for arguments of :func:`train` that cannot run, before anything is
    traced or compiled."""
    if isinstance(num_chunks, bool) or not isinstance(num_chunks, (int, np.integer)) \
            or num_chunks < 1:
        raise ValueError(f"train: num_chunks={num_chunks!r}; give the number of host "
                         "round-trips (progress, logs, checkpoints), an int >= 1")
    for name, value, low in (("eval_envs", eval_envs, 0), ("eval_every", eval_every, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"train: {name}={value!r}; give an int >= {low}")
    if eval_envs and algo.act is None:
        raise ValueError("train: eval_envs needs an algorithm with act(state, obs, key) to "
                         "evaluate with; this one has none")
    axis_name = algo.axis_name
    if axis_name is not None and devices is None and pop is None and chunk_fn_factory is None:
        for runtime, given in (("async_workers", async_workers),
                               ("actor_learner", actor_learner)):
            if _given(given):
                raise ValueError(
                    f"train: {runtime} places the algorithm's parts on devices itself and "
                    f"does not run data parallel; make it with axis_name=None (it has "
                    f"axis_name={axis_name!r})")
        raise ValueError(
            f"train: the algorithm was made with axis_name={axis_name!r}, which averages "
            "over the devices of a mesh, but no devices were given: pass devices=N "
            "(jaxrl-par train --devices N), or make it with axis_name=None for one device")


def _host_runtime(algo: Algorithm, vector_env, others: bool, overlap: bool = False
                  ) -> programs.Runtime | None:
    """The host-env runtime of an algorithm on host envs that ``train`` was given no
    other runtime for: :class:`HostLoop` for one split at the env step (PPO, DQN, SAC),
    one round-robin worker for a one-worker asynchronous algorithm (A2C); else None.
    ``overlap``: ``train``'s ``overlap_learning``, for the host loop only."""
    if isinstance(vector_env, HostLoop):
        if overlap and not vector_env.overlap:
            raise ValueError("overlap_learning=True with a HostLoop made without it: make "
                             "it HostLoop(algo, vector_env, overlap=True)")
        return programs.Runtime(pipeline=vector_env)
    if vector_env is not None and algo.host_steps is None and algo.host is None:
        raise ValueError(f"vector_env={vector_env!r} is for host envs (gymnasium:<id>, "
                         f"envpool:<id>); {algo.config.env} steps on the device: drop it")
    if overlap and algo.host_steps is None:
        name = algorithm_name(algo.config)
        where = (f"{name} on {algo.config.env} does not run in the host loop"
                 if host.is_host(algo.config.env)
                 else f"{algo.config.env} steps on the device, inside the compiled update")
        raise ValueError(f"overlap_learning=True overlaps learning with the steps of host "
                         f"envs (gymnasium:<id>) for dqn, sac, ddpg and td3; {where}")
    if algo.host_steps is not None:
        if others:
            raise ValueError("an algorithm on host envs runs on one device of its own "
                             "(the host loop); it does not combine with devices, pop, "
                             "chunk_fn_factory, actor_learner or async_workers")
        return programs.Runtime(pipeline=HostLoop(algo, vector_env or "grouped", overlap))
    worker = algo.async_worker
    if algo.host is not None and worker is not None and worker.num_workers == 1 \
            and not others:
        return programs.Runtime(pipeline=AsyncWorkers(
            algo, schedule="round_robin", vector_env=vector_env or "grouped"))
    return None


def _runtime(algo: Algorithm, keys: jax.Array, *, chunk_fn_factory, devices, pop,
             actor_learner, async_workers, progress: bool, vector_env=None,
             overlap_learning: bool = False) -> programs.Runtime:
    """The runtime :func:`train`'s arguments ask for: the actor-learner or the
    asynchronous-worker runtime, a device mesh, or one device's ``vmap`` over seeds (with
    ``chunk_fn_factory`` when given). Raises ``ValueError`` for runtimes that do not
    combine, before anything compiles (a mesh's init is traced, which raises what the
    algorithm cannot do on it)."""
    others = any(x is not None for x in (chunk_fn_factory, devices, pop)) or any(
        _given(x) for x in (actor_learner, async_workers))
    on_host = _host_runtime(algo, vector_env, others, overlap_learning)
    if on_host is not None:
        return on_host
    if _given(actor_learner):
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
        if _given(async_workers):
            raise ValueError(_ASYNC_ALONE)
        return programs.Runtime(pipeline=pipeline)
    if _given(async_workers):
        if devices is not None or pop is not None or chunk_fn_factory is not None:
            raise ValueError(_ASYNC_ALONE)
        if jax.process_count() > 1:
            raise ValueError("async_workers runs within one process")
        return programs.Runtime(pipeline=async_workers if isinstance(async_workers,
                                                                      AsyncWorkers)
                                else AsyncWorkers(algo, async_workers,
                                                  vector_env=vector_env or "sync"))
    if devices is not None or pop is not None:
        if chunk_fn_factory is not None:
            raise ValueError("give devices/pop or chunk_fn_factory, not both")
        mesh = parallel.make_mesh(devices, pop or 1)
        parallel.check_algorithm(algo, mesh, keys.shape[0], trace=False)
        sharded = parallel.Sharded(algo, mesh)
        programs.trace_init(algo, keys, sharded)  # raises before compiling, e.g. num_envs % devices
        return programs.Runtime(factory=sharded.chunk_fn_factory, sharded=sharded)
    return programs.Runtime(factory=chunk_fn_factory or make_chunk_fn)


def _one_device(state: Any) -> Any:
    """A mesh's ``[S, D, ...]`` state gathered to the host (every process takes part) as
    one device's ``[S, ...]``."""
    return parallel.unreplicate(parallel.to_host(state))


def _build_or_restore(algo: Algorithm, keys: jax.Array, runtime: programs.Runtime,
                      saved: continuation.Saved | None, chunk_updates: int, lanes: dict, *,
                      log_dir: str | None, check_memory: bool, is_main: bool, show: bool):
    """The compiled programs and the state a run starts from, with the updates already
    done and their metrics rows: the initial state of a fresh run, or ``saved``'s
    checkpoint read into the state's shapes (nothing compiled when that run had already
    finished). Returns ``(built, state, done, history)``."""
    num_updates = algo.num_updates
    if saved and saved.updates_done >= num_updates:
        # Nothing left to train: the checkpoint is read into the state's shapes below,
        # and nothing is compiled.
        if show:
            print(f"jaxrl_par: the run in {log_dir} already finished its {num_updates} "
                  "updates; nothing left to train", file=sys.stderr)
        built = programs.shapes(algo, keys, runtime)
    else:
        built = programs.build(algo, keys, runtime, chunk_updates,
                               lanes=None if saved else lanes, check_memory=check_memory,
                               host_copies=1 if log_dir and is_main else 0, say=show)
        interrupt.raise_pending()  # a Ctrl-C or SIGTERM during the compile, if Python lost it
    state, done, history = built.state, 0, {}
    if saved:
        state, done, history = continuation.restore(saved, state, runtime.place, log_dir,
                                                  rewrite=is_main)
        if done < num_updates and built.chunk is None:  # the finished one was damaged
            built = programs.build(algo, keys, runtime, chunk_updates, lanes=None,
                                   check_memory=False, say=show)._replace(state=None)
    elif log_dir and is_main:
        records.start_metrics(log_dir)
    return built, state, done, history


class _Chain(NamedTuple):
    """The listeners of one :func:`train` call, in the order they hear each chunk, and
    the ones whose results :func:`train` reads back."""
    all: list[listeners_lib.Listener]
    history: listeners_lib.History
    evaluation: listeners_lib.GreedyEvaluation | None
    sweep: listeners_lib.SweepValues | None


def _listener_chain(algo: Algorithm, runtime: programs.Runtime, seed_list: list[int],
                    history: dict, current: dict, *, chunk_updates: int, done: int,
                    log_dir: str | None, checkpoint_dir: str | None, record: dict,
                    eval_envs: int, eval_every: int, pbt, listeners, debug_replication: bool,
                    keep_checkpoints: int, checkpoint_seconds: float | None, callback,
                    show: bool) -> _Chain:
    """The chunk loop's listeners: greedy evaluation, the sweep's values, the history
    of metrics rows, ``metrics.jsonl`` (``log_dir``: this process writes logs), the
    user's listeners, the PBT step, the replica check, checkpoints (every process of a
    run with ``checkpoint_dir`` takes part), the progress bar (``show``) and the
    callback. ``history`` holds the rows of a resumed run's finished updates."""
    history_log = listeners_lib.History(len(seed_list), history)
    evaluation, sweep = None, None
    chain: list[listeners_lib.Listener] = []
    if eval_envs:
        evaluation = listeners_lib.GreedyEvaluation(
            algo, eval_envs, eval_every, chunk_updates,
            gather=_one_device if runtime.sharded else None,
            on_main=jax.process_index() == 0)
        chain.append(evaluation)
    if pbt is not None:
        sweep = listeners_lib.SweepValues(current)
        chain.append(sweep)
    chain.append(history_log)
    if log_dir:
        chain.append(listeners_lib.MetricsLog(os.path.join(log_dir, METRICS)))
    chain.extend(listeners)
    if pbt is not None:
        chain.append(listeners_lib.PBTStep(
            pbt, sweep, seed_list, algo.config,
            os.path.join(log_dir, records.PBT_LOG) if log_dir else None))
    if runtime.sharded and debug_replication:
        chain.append(listeners_lib.ReplicaCheck(parallel.assert_is_replicated))
    if checkpoint_dir:
        chain.append(listeners_lib.CheckpointSaver(
            checkpoints.Checkpoints(os.path.join(checkpoint_dir, checkpoints.DIRECTORY),
                                    keep=keep_checkpoints),
            record, every_seconds=checkpoint_seconds if jax.process_count() == 1 else None))
    if show:
        chain.append(listeners_lib.ProgressBar(algo.num_updates, algo.env_steps_per_update,
                                               done))
    if callback is not None:
        chain.append(listeners_lib.Callback(callback))
    return _Chain(chain, history_log, evaluation, sweep)


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
    vector_env: str | HostLoop | None = None,
    overlap_learning: bool = False,
    keep_checkpoints: int = checkpoints.DEFAULT_KEEP,
    checkpoint_seconds: float | None = checkpoints.DEFAULT_SECONDS,
    listeners: Sequence[listeners_lib.Listener] = (),
    max_chunk_seconds: float | None = loop.MAX_CHUNK_SECONDS,
    time_limit: float | None = None,
    preset: str | presets.Preset | None = None,
) -> TrainResult:
    """Trains ``algo`` for ``algo.num_updates`` updates on every seed at once.

    With ``preset`` (``"auto"``: the env's, or an env id, or a :class:`presets.Preset`),
    ``algo`` is built again with the preset under its config (:func:`presets.apply`: a
    preset field replaces a field still at its Config default) and ``config.json`` names
    the preset; the default None trains ``algo`` exactly as built.

    Args:
      algo: an :class:`Algorithm` (``init``/``update`` pair).
      seeds: an int, a list of ints, or ``[S]`` PRNG keys; seeds are vmapped.
      num_chunks: host round-trips (progress, logs, checkpoint) over the run.
      log_dir: if given, writes ``config.json``, ``metrics.jsonl`` (one line per update)
        and orbax checkpoints of the whole state in ``checkpoints/<updates done>/``
        (:mod:`jaxrl_par.runner.checkpoints`; see ``checkpoint_seconds``). One run
        at a time: a log dir that another process is training in is an error
        (:mod:`jaxrl_par.runner.lockfile`).
      resume: continue from ``log_dir``'s newest readable checkpoint (needs ``log_dir``;
        one without a checkpoint is an error, not a fresh start). Without it, a
        ``log_dir`` that already holds a run is an error: a fresh run never overwrites
        another's logs and checkpoints.
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
        replay buffers included, and the host copy a checkpoint takes of it) fits in the
        memory free on its devices, and raise a ``ValueError`` naming its largest parts
        if not; then, before each compiled program first runs, that what it allocates
        fits too (:mod:`jaxrl_par.runner.memory`).
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
      vector_env: how an algorithm on host envs (``"gymnasium:<id>"``) steps them:
        ``"grouped"`` (the default: a subprocess per core, each stepping a group of the
        envs, :mod:`jaxrl_par.envs.grouped`), ``"async"`` (gymnasium's
        ``AsyncVectorEnv``, each env in a subprocess) or ``"sync"`` (``SyncVectorEnv``,
        in this process), or a
        :class:`~jaxrl_par.parallel.host_loop.HostLoop` (whose ``timing`` then tells how
        the wall clock split between envs and device). PPO, DQN, SAC (and every
        algorithm with ``host_steps``) and A2C run on host envs without further
        arguments; A3C and Gorila take ``async_workers``, IMPALA ``actor_learner``.
      overlap_learning: on host envs, the replay learners (DQN, SAC, TD3, DDPG with
        Gaussian noise) learn from update ``u`` while the envs step update ``u + 1``,
        which acts with the parameters of one update before (``HostLoop(...,
        overlap=True)``, where the lag and the keys are spelled out); recorded in
        ``config.json``. Others are a ``ValueError``.
      keep_checkpoints: how many of the newest checkpoints a ``log_dir`` keeps.
      checkpoint_seconds: the least time between two checkpoints (one is written in
        the background after a chunk once this long has passed and the last write is
        done; the last chunk's state is always saved when the run ends or stops);
        None saves every chunk, as runs on several processes always do.
      listeners: more listeners of the chunk loop (:mod:`jaxrl_par.runner.listeners`),
        e.g. the loggers of :mod:`jaxrl_par.runner.loggers`; they hear every chunk
        after its rows are complete and logged, and are closed when the loop ends.
      max_chunk_seconds: a chunk that takes longer (by a fifth) is followed by shorter
        ones (compiled then), so a stop (Ctrl-C, SIGTERM's grace period) never waits much
        longer than this for the running chunk. None keeps ``num_chunks``' size; so do
        runs on several processes, PBT, evaluations every few chunks (whose chunks must
        stay as planned) and the actor-learner and asynchronous-worker runtimes.
      time_limit: stop after the last chunk that ends within this many seconds of
        training (judged by the chunk before it; the first always runs), logged and
        checkpointed, with
        ``interrupted=True`` and no ``stop_signal``; ``resume`` continues.

    Ctrl-C (SIGINT) or SIGTERM (what SLURM, Kubernetes and ``kill`` send before they
    kill a job) in a single-process run finishes the running chunk, logs and checkpoints
    it, and returns a result with ``interrupted=True`` that holds everything finished so
    far; a second Ctrl-C raises ``KeyboardInterrupt`` at once, a second SIGTERM ends the
    process. Multi-host runs keep the signals' usual behaviour.

    Returns:
      A :class:`TrainResult`.
    """
    algo, preset = presets.remake(algo, preset)
    _check_arguments(algo, num_chunks, eval_envs, eval_every, devices=devices, pop=pop,
                     chunk_fn_factory=chunk_fn_factory, actor_learner=actor_learner,
                     async_workers=async_workers)
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
    runtime = _runtime(algo, keys, chunk_fn_factory=chunk_fn_factory, devices=devices,
                       pop=pop, actor_learner=actor_learner, async_workers=async_workers,
                       progress=progress, vector_env=vector_env,
                       overlap_learning=overlap_learning)
    is_main = jax.process_index() == 0  # only process 0 writes logs and checkpoints
    show = progress and is_main
    record = config_record(algo)
    records.check_log_dir(log_dir, resume)
    saved = None
    if log_dir and resume:  # before compiling: a mismatch is an error, not minutes of work
        saved = continuation.find(log_dir, algo, record, seed_list, keys, lanes,
                                lanes_given=hparams is not None,
                                data_shards=runtime.data_shards, say=show)
        lanes = saved.lanes if saved else lanes

    if show and runtime.pipeline is None:  # one program at a time
        tip = cpu_threads.hint_once(lambda: envs.observation_numbers(
            algo.config.env, algo.config.num_envs * len(seed_list)))
        if tip:  # on CPU, on a pool nobody chose
            print(tip, file=sys.stderr)
    built, state, done, history = _build_or_restore(
        algo, keys, runtime, saved, chunk_updates, lanes, log_dir=log_dir,
        check_memory=check_memory, is_main=is_main, show=show)
    current = dict(lanes)  # each lane's values now (pbt changes them; the state holds them)
    if pbt is not None and done:
        current = {k: np.asarray(v).reshape(len(seed_list), -1)[:, 0]
                   for k, v in state.hparams.items()}
        if log_dir and is_main:  # steps logged past the checkpoint are taken again
            pbt_lib.truncate_log(os.path.join(log_dir, records.PBT_LOG), done)
    # What config.json and each checkpoint record beside the config: the swept values,
    # and the module that registers a user's own env (load_run imports it).
    extra = {**records.lanes_record(lanes), **envs.source_record(record.get("env")),
             **(preset.record() if preset else {}),
             **({"overlap_learning": True} if isinstance(runtime.pipeline, HostLoop)
                and runtime.pipeline.overlap else {})}
    if log_dir and is_main:
        records.write_config(log_dir, {"config": record, "seeds": seed_list,
                                       "num_updates": num_updates,
                                       "data_shards": runtime.data_shards, **extra})

    chain = _listener_chain(
        algo, runtime, seed_list, history, current, chunk_updates=chunk_updates, done=done,
        log_dir=log_dir if is_main else None, checkpoint_dir=log_dir,
        record={"seeds": seed_list, "data_shards": runtime.data_shards, "config": record,
                **extra},
        eval_envs=eval_envs, eval_every=eval_every, pbt=pbt, listeners=listeners,
        debug_replication=debug_replication, keep_checkpoints=keep_checkpoints,
        checkpoint_seconds=checkpoint_seconds, callback=callback, show=show)
    history_log, evaluation, sweep = chain.history, chain.evaluation, chain.sweep

    fixed = (jax.process_count() > 1 or pbt is not None or runtime.pipeline is not None
             or (eval_envs and eval_every > 1) or built.chunk is None)
    rechunk = None if fixed else functools.partial(
        programs.compile_chunk, algo, runtime,
        jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                     state))
    ran = loop.run(built.chunk, state, start=done, num_updates=num_updates,
                   chunk_updates=chunk_updates,
                   env_steps_per_update=algo.env_steps_per_update, listeners=chain.all,
                   stop_on_signal=jax.process_count() == 1,
                   bounds=loop.Bounds(max_chunk_seconds, time_limit, rechunk))
    if runtime.sharded:
        parallel.assert_is_replicated(ran.state, where="after training")
    updates_run = ran.done - done
    total_steps = updates_run * algo.env_steps_per_update * len(seed_list)
    return TrainResult(
        state=ran.state,
        metrics=history_log.columns(),
        env_steps=(np.arange(ran.done) + 1) * algo.env_steps_per_update,
        seeds=seed_list,
        compile_seconds=built.compile_seconds,
        train_seconds=ran.seconds,
        steps_per_second=total_steps / max(ran.seconds, 1e-9),
        interrupted=ran.done < num_updates,
        stop_signal=ran.stop_signal,
        updates_run=updates_run,
        hparams=sweep.values if sweep else current,
        chunk_ends=np.asarray(ran.chunk_ends, np.int64),
        chunk_seconds=np.asarray(ran.chunk_seconds, np.float64),
        eval_seconds=evaluation.seconds if evaluation else 0.0,
    )
