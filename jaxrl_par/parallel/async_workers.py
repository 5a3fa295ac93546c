"""Asynchronous workers and a parameter server, as host threads around compiled parts.

An asynchronous algorithm (A3C: :mod:`jaxrl_par.algos.a3c`) gives three pure parts
(:func:`jaxrl_par.algos.base.round_robin_update` describes them): a worker's acting and
gradient with its parameter copy, the server's step with one push, and the pull of a
fresh copy. Its own ``update`` runs them in a fixed round-robin order inside one
program. :class:`AsyncWorkers` instead gives each of the ``K`` workers a host thread
(and a device of its own where there are several, worker ``k`` on device ``k mod D``)
that loops: compute a gradient with its copy, wait for it, then, under the server's
lock, dispatch the server's step and its pull. So workers push in the order they finish,
a slow worker's gradient is applied to parameters that faster ones have moved since it
pulled, and each push's staleness (pushes applied between its pull and its application)
is computed by the server from the versions, as it happens: that is the paradigm of A3C
and of a Gorila parameter server, on any number of devices, nondeterministic as theirs.

``schedule="round_robin"`` runs the same compiled parts from one thread in the order
``0, 1, .., K-1, 0, ..``: the result then equals ``train`` without this runtime (the
algorithm's own ``update``), which the tests check, so the threaded runs differ from
the scanned ones only in their order.

An algorithm on host envs (``"gymnasium:<id>"``, :mod:`jaxrl_par.envs.host`) gives
``Algorithm.host`` (:class:`~jaxrl_par.algos.base.HostActing`) instead of ``worker``:
the runtime makes each worker's gymnasium envs once (``make_envs``, kept in
``host_envs``) and calls its ``step`` (and ``warmup`` for a warm-up) from the worker's
thread, which steps its envs in Python between compiled calls.

:meth:`AsyncWorkers.compile` compiles the parts once per state layout into
:class:`Programs` (the vmapped worker step per device, the server's :func:`serve`,
the warm-up programs); each chunk's pushes are a :class:`_Pushes`, the state its
threads share under the server's lock.

Used through ``train(algo, seeds, async_workers=True)`` (CLI: ``--async-workers``).
One "update" of the runner is ``K`` pushes, whichever workers made them; its metrics
are combined over them as the scanned update's are. Chunks, progress, logs, checkpoints
and Ctrl-C work as for any run (the threads stop at the end of each chunk, so the
state saved is consistent). On one device the threads share it: XLA's CPU client runs
programs dispatched from several threads at the same time, each on its own cores.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par import algos
from jaxrl_par.algos.base import Algorithm, AsyncWorker, combine_worker_metrics
from jaxrl_par.algos.config import algorithm_name
from jaxrl_par.envs import host
from jaxrl_par.platform import cpu_threads

SCHEDULES = ("threads", "round_robin")


def check_algorithm(algo: Algorithm) -> None:
    """A ``ValueError`` naming the fix unless ``algo`` has asynchronous workers
    (:class:`~jaxrl_par.algos.base.AsyncWorker`)."""
    if algo.async_worker is None:
        module = algorithm_name(algo.config)
        able = algos.listed(algos.with_config_field("num_workers"))
        raise ValueError(f"async_workers: {module} has no asynchronous workers; use {able}")
    if algo.async_worker.worker is None and algo.host is None:
        raise ValueError(f"async_workers: {algorithm_name(algo.config)} gives no worker")


def pick_devices(devices: bool | Sequence[jax.Device] | None) -> list[jax.Device]:
    """The devices of the workers (the server uses the first): the given ones, or
    (``True``) every local device."""
    if devices is True or devices is None:
        return list(jax.local_devices())
    devices = list(devices)
    if not devices:
        raise ValueError("async_workers: give at least one device")
    return devices


def _worker_slice(tree, k: int):
    """Worker ``k``'s part of a seed-batched tree with leaves ``[S, K, ...]``."""
    return jax.tree.map(lambda x: x[:, k], tree)


def _stack_workers(trees: list) -> Any:
    """The inverse of :func:`_worker_slice`: ``K`` trees ``[S, ...]`` as one ``[S, K, ...]``."""
    return jax.tree.map(lambda *xs: jnp.stack(xs, axis=1), *trees)


def serve(parts: AsyncWorker, server, push, copy, hparams):
    """The server's step with one push and the pushing worker's pull after it:
    ``(server, copy, metrics)``, of one seed lane (the runtime vmaps it over ``S``)."""
    server, metrics = parts.apply(server, push, hparams)
    return server, parts.pull(server, copy), metrics


def _placed(device: jax.Device, x) -> jax.ShapeDtypeStruct:
    """``x``'s shape and dtype on ``device``: what a program is compiled for."""
    return jax.ShapeDtypeStruct(x.shape, x.dtype,
                                sharding=jax.sharding.SingleDeviceSharding(device))


def _split_workers(num_workers: int, tree) -> list:
    """The ``K`` workers' slices ``[S, ...]`` of a tree with leaves ``[S, K, ...]``."""
    return [_worker_slice(tree, k) for k in range(num_workers)]


def _warm_step(warmup_update: Callable, state, _):
    """One warm-up update as a scan body: carry the state, output its metrics."""
    return warmup_update(state)


def _warm_scan(warmup_update: Callable, length: int, state):
    """``length`` warm-up updates of one seed lane: ``(state, metrics [length])``."""
    return jax.lax.scan(functools.partial(_warm_step, warmup_update), state, None,
                        length=length)


def warm_program(warmup_update: Callable, length: int) -> Callable:
    """``length`` warm-up updates (no pushes) as one scanned program over the seed
    lanes, the state donated: ``state [S, ...] -> (state, metrics [S, length])``."""
    return jax.jit(jax.vmap(functools.partial(_warm_scan, warmup_update, length)),
                   donate_argnums=0)


class Programs(NamedTuple):
    """The compiled parts one :meth:`AsyncWorkers.compile` runs its chunks with; all
    vmapped over the seed lanes ``S``.

    Attributes:
      split: ``(workers, copies) [S, K, ...] -> K (worker, copy) [S, ...]``, on the
        server's device.
      stack: its inverse.
      serve: :func:`serve`, the server donated, on the server's device (compiled ahead
        with JAX envs, at the first push on host envs).
      workers: the compiled worker step ``(worker, copy, hparams) -> (worker, push,
        metrics)`` for each worker device, the worker donated; empty on host envs.
      warm: the warm-up programs by length (:func:`warm_program`), added as lengths
        occur; unused on host envs.
      warmup_updates: the updates in which workers only act (0 without a warm-up part).
      chunk_updates: updates per chunk.
    """

    split: Callable
    stack: Callable
    serve: Callable
    workers: dict[jax.Device, Callable]
    warm: dict[int, Callable]
    warmup_updates: int
    chunk_updates: int


class AsyncWorkers:
    """The threaded runtime of an asynchronous algorithm (see the module docstring).

    Args:
      algo: an algorithm with an :class:`~jaxrl_par.algos.base.AsyncWorker` and a state
        :class:`~jaxrl_par.algos.base.AsyncState`.
      devices: the devices (the server on the first; worker ``k`` on ``k mod D``), or
        ``True`` for every local device.
      schedule: ``"threads"`` (asynchronous) or ``"round_robin"`` (one thread, fixed
        order: equals the algorithm's own ``update``).
      vector_env: how workers' host envs step (``"sync"``, ``"grouped"`` or ``"async"``, see
        :class:`~jaxrl_par.envs.host.HostVecEnv`).
    """

    def __init__(self, algo: Algorithm, devices: bool | Sequence[jax.Device] | None = True,
                 schedule: str = "threads", vector_env: str = "sync"):
        check_algorithm(algo)
        if schedule not in SCHEDULES:
            raise ValueError(f"async_workers: schedule={schedule!r}; choose from {SCHEDULES}")
        self.algo = algo
        self.num_workers = int(algo.async_worker.num_workers)
        self.devices = pick_devices(devices)
        self.learner_device = self.devices[0]  # the server's (the runner places the state)
        self.schedule = schedule
        host.check_vector_env(vector_env)
        self.vector_env = vector_env  # how host envs step (jaxrl_par.envs.host)
        self.worker_devices = [self.devices[k % len(self.devices)]
                               for k in range(self.num_workers)]
        #: The worker of each push the server applied in the last chunk, in order.
        self.last_order: list[int] = []
        #: Each worker's host envs (``[S]`` :class:`~jaxrl_par.envs.host.HostVecEnv`),
        #: for an algorithm on gymnasium envs; made at the first compile.
        self.host_envs: list = []
        shared_cpu = len({d for d in self.worker_devices if d.platform == "cpu"}) < sum(
            d.platform == "cpu" for d in self.worker_devices)
        if self.concurrent and shared_cpu and cpu_threads.chosen() == 1:
            warnings.warn(
                "async_workers: XLA:CPU's pool has one thread (NPROC=1, e.g. from "
                "jaxrl_par.platform.cpu_threads.limit()), so workers that share a CPU device take "
                "turns instead of running at once; start the process without it (the "
                "CLI's --cpu-threads auto leaves it for --async-workers)", stacklevel=2)

    @property
    def concurrent(self) -> bool:
        """Whether workers run in threads of their own."""
        return self.schedule == "threads" and self.num_workers > 1

    def compile(self, state: Any, chunk_updates: int) -> Callable:
        """``chunk(state, start) -> (state, metrics [S, chunk_updates])``: the runner's chunk
        contract, one update being ``K`` pushes (rows past ``algo.num_updates`` zero)."""
        parts, acting = self.algo.async_worker, self.algo.host
        hparams_axis = None if state.hparams is None else 0
        serve_fn = jax.jit(jax.vmap(functools.partial(serve, parts),
                                    in_axes=(0, 0, 0, hparams_axis)), donate_argnums=0)
        split, stack = self._compile_slicing(state)
        on_host = parts.worker is None
        if on_host:
            # Each worker steps host envs of its own from its thread (made once per
            # runtime, so episodes run on across chunks); the server's program compiles
            # at the first push, whose shapes only the host worker knows.
            if not self.host_envs:
                self.host_envs = [acting.make_envs(state.workers.key[:, k],
                                                   vector_env=self.vector_env)
                                  for k in range(self.num_workers)]
            serve_program, worker_programs = serve_fn, {}
        else:
            worker_programs, push_shape = self._compile_workers(state, hparams_axis)
            to, server_device = jax.device_put, self.learner_device
            serve_program = serve_fn.lower(
                to(state.server, server_device),
                jax.tree.map(functools.partial(_placed, server_device), push_shape),
                to(_worker_slice(state.copies, 0), server_device),
                to(state.hparams, server_device)).compile()
        warm_part = acting.warmup if on_host else self.algo.warmup_update
        warmup_updates = self.algo.warmup_updates if warm_part is not None else 0
        warm_programs = {}
        if warmup_updates and not on_host:  # compiled here: the runner counts it as such
            first = min(chunk_updates, warmup_updates)
            warm_programs[first] = warm_program(self.algo.warmup_update, first).lower(
                state).compile()
        programs = Programs(split, stack, serve_program, worker_programs, warm_programs,
                            warmup_updates, chunk_updates)
        return functools.partial(self._chunk, programs)

    def _compile_slicing(self, state: Any) -> tuple[Callable, Callable]:
        """The workers' and copies' slices out of the state and back (``split`` and
        ``stack`` of :class:`Programs`), compiled ahead on the server's device (as eager
        ops they would compile inside the first chunk, counted as training)."""
        on_server = functools.partial(_placed, self.learner_device)
        split_fn = jax.jit(functools.partial(_split_workers, self.num_workers))
        by_worker = (state.workers, state.copies)
        split = split_fn.lower(jax.tree.map(on_server, by_worker)).compile()
        stack = jax.jit(_stack_workers).lower(
            jax.tree.map(on_server, jax.eval_shape(split_fn, by_worker))).compile()
        return split, stack

    def _compile_workers(self, state: Any, hparams_axis: int | None
                         ) -> tuple[dict[jax.Device, Callable], Any]:
        """The worker step compiled ahead for each worker device (the runner times it),
        and the shapes of a push ``[S, ...]``."""
        to = jax.device_put
        worker_fn = jax.jit(jax.vmap(self.algo.async_worker.worker,
                                     in_axes=(0, 0, hparams_axis)), donate_argnums=0)
        example_worker = _worker_slice(state.workers, 0)
        example_copy = _worker_slice(state.copies, 0)
        programs = {}
        for device in dict.fromkeys(self.worker_devices):
            programs[device] = worker_fn.lower(
                to(example_worker, device), to(example_copy, device),
                to(state.hparams, device)).compile()
        push_shape = jax.eval_shape(worker_fn, example_worker, example_copy,
                                    state.hparams)[1]
        return programs, push_shape

    def _chunk(self, p: Programs, state: Any, start) -> tuple[Any, dict[str, np.ndarray]]:
        """The compiled chunk (see :meth:`compile`): the warm-up updates of the chunk,
        then the pushes of the rest, their metrics ``[S, n]`` padded with zeros to
        ``[S, chunk_updates]``."""
        n = min(p.chunk_updates, self.algo.num_updates - int(start))
        w = max(0, min(n, p.warmup_updates - int(start)))
        parts_rows = []
        if w:
            state, rows = self._warm(p, jax.device_put(state, self.learner_device), w)
            parts_rows.append(rows)
        if n > w:
            state, rows = _Pushes(self, p, state, n - w).run()
            parts_rows.append(rows)
        rows = {k: np.concatenate([r[k] for r in parts_rows], axis=1)
                for k in parts_rows[0]}
        return state, {k: _pad(v, p.chunk_updates - n) for k, v in rows.items()}

    def _warm(self, p: Programs, state: Any, length: int) -> tuple[Any, dict[str, np.ndarray]]:
        """``length`` warm-up updates: on host envs by :meth:`_warm_host`, else one
        program (:func:`warm_program`, compiled at the first use of a length)."""
        if self.algo.async_worker.worker is None:
            return self._warm_host(p, state, length)
        if length not in p.warm:
            p.warm[length] = warm_program(self.algo.warmup_update, length)
        state, metrics = p.warm[length](state)
        return state, {k: np.asarray(v) for k, v in metrics.items()}

    def _warm_host(self, p: Programs, state: Any, length: int
                   ) -> tuple[Any, dict[str, np.ndarray]]:
        """``length`` warm-up updates on host envs: each worker in turn acts and stores,
        with no push."""
        num_workers = self.num_workers
        workers, copies = map(list, zip(*p.split((state.workers, state.copies)), strict=True))
        log = []
        for i in range(length * num_workers):
            k = i % num_workers
            workers[k], metrics = self.algo.host.warmup(
                self.host_envs[k], workers[k], copies[k], state.hparams)
            log.append(metrics)
        return (state.replace(workers=p.stack(list(zip(workers, copies, strict=True)))[0]),
                _rows(jax.device_get(log), length, num_workers))


class _Pushes:
    """One chunk's ``n`` updates of ``K`` pushes each, made by the workers' threads (or
    in turn, with ``schedule="round_robin"``).

    Holds what the threads share: the server's state on its device, the lock under which
    the server applies one push at a time (in arrival order) and threads take their
    turns, the quota of pushes and how many were issued, each worker's own ``worker``,
    ``copy`` and ``hparams`` on its device, and the log of the pushes applied (metrics
    and worker, in order).
    """

    def __init__(self, runtime: AsyncWorkers, programs: Programs, state: Any, n: int):
        to, server_device = jax.device_put, runtime.learner_device
        self.runtime, self.programs, self.state, self.n = runtime, programs, state, n
        self.quota = n * runtime.num_workers
        self.server = to(state.server, server_device)
        self.server_hparams = to(state.hparams, server_device)
        sliced = programs.split(to((state.workers, state.copies), server_device))
        self.own = [{"worker": to(worker, d), "copy": to(copy, d),
                     "hparams": to(state.hparams, d)}
                    for (worker, copy), d in zip(sliced, runtime.worker_devices, strict=True)]
        self.log: list[dict] = []
        self.order: list[int] = []
        self.lock = threading.Lock()
        self.issued = 0
        self.errors: list[BaseException] = []

    def take_turn(self) -> bool:
        """Whether a thread may make one more push (and counts it): not past the quota,
        nor after another thread failed."""
        with self.lock:
            if self.issued >= self.quota or self.errors:
                return False
            self.issued += 1
            return True

    def push(self, k: int) -> None:
        """Worker ``k``'s gradient with its copy (compiled, or on its host envs), then,
        under the lock, the server's step with it and the worker's pull."""
        runtime = self.runtime
        mine = self.own[k]
        device, server_device = runtime.worker_devices[k], runtime.learner_device
        to = jax.device_put
        if runtime.algo.async_worker.worker is None:
            mine["worker"], pushed, worker_metrics = runtime.algo.host.step(
                runtime.host_envs[k], mine["worker"], mine["copy"], mine["hparams"])
        else:
            mine["worker"], pushed, worker_metrics = self.programs.workers[device](
                mine["worker"], mine["copy"], mine["hparams"])
        if runtime.schedule == "threads":  # a thread pushes a finished gradient
            pushed = jax.block_until_ready(pushed)
        remote = device != server_device
        if remote:
            pushed, old = to(pushed, server_device), to(mine["copy"], server_device)
        else:
            old = mine["copy"]
        with self.lock:  # the server applies pushes one at a time, in arrival order
            self.server, copy, server_metrics = self.programs.serve(
                self.server, pushed, old, self.server_hparams)
            self.log.append({**worker_metrics, **server_metrics})
            self.order.append(k)
        mine["copy"] = to(copy, device) if remote else copy

    def work(self, k: int) -> None:
        """Worker ``k``'s thread: push while turns are left; an error is kept for
        :meth:`run` to raise."""
        try:
            while self.take_turn():
                self.push(k)
        except BaseException as e:  # noqa: BLE001 (re-raised by the runner's thread)
            self.errors.append(e)

    def run(self) -> tuple[Any, dict[str, np.ndarray]]:
        """Makes the quota's pushes; returns the state, back on the server's device,
        and the updates' metrics ``[S, n]`` (:func:`_rows`). Records the order the
        server applied the pushes in (``AsyncWorkers.last_order``)."""
        runtime = self.runtime
        num_workers, to, server_device = runtime.num_workers, jax.device_put, \
            runtime.learner_device
        if runtime.schedule == "round_robin":
            for i in range(self.quota):
                self.push(i % num_workers)
        else:
            threads = [threading.Thread(target=self.work, args=(k,), daemon=True,
                                        name=f"jaxrl_par-worker-{k}")
                       for k in range(num_workers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if self.errors:
                raise self.errors[0]
        workers, copies = self.programs.stack(
            [(to(o["worker"], server_device), to(o["copy"], server_device))
             for o in self.own])
        state = self.state.replace(server=self.server, workers=workers, copies=copies)
        state = to(state, server_device)
        runtime.last_order = self.order
        return state, _rows(jax.device_get(self.log), self.n, num_workers)


def _pad(v: np.ndarray, extra: int) -> np.ndarray:
    """Rows ``[S, n]`` with ``extra`` zero columns after them."""
    return np.concatenate([v, np.zeros(v.shape[:1] + (extra,), v.dtype)], axis=1)




def _rows(log: list[dict[str, np.ndarray]], n: int, num_workers: int
          ) -> dict[str, np.ndarray]:
    """The pushes' metrics (``[S]`` each, in the order applied) as ``[S, n]`` rows of
    ``num_workers`` pushes each, combined as the scanned update combines them."""
    by_worker = {}  # [K, n, S]: push i is worker i mod K's of update i // K
    for name in log[0]:
        values = np.stack([np.asarray(entry[name]) for entry in log])  # [n*K, S]
        by_worker[name] = np.moveaxis(values.reshape((n, num_workers) + values.shape[1:]), 1, 0)
    rows = combine_worker_metrics(by_worker, xp=np)  # [n, S], on the host: nothing compiles
    return {name: np.asarray(values).T for name, values in rows.items()}  # [S, n]
