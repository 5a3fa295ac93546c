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
``host_worker`` instead of ``worker`` (and ``host_warmup`` for a warm-up): the runtime
makes each worker's gymnasium envs once (``host_envs``) and calls the host worker from
the worker's thread, which steps its envs in Python between compiled calls.

Used through ``train(algo, seeds, async_workers=True)`` (CLI: ``--async-workers``).
One "update" of the runner is ``K`` pushes, whichever workers made them; its metrics
are combined over them as the scanned update's are. Chunks, progress, logs, checkpoints
and Ctrl-C work as for any run (the threads stop at the end of each chunk, so the
state saved is consistent). On one device the threads share it: XLA's CPU client runs
programs dispatched from several threads at the same time, each on its own cores.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par import algos
from jaxrl_par.algos.base import Algorithm, combine_worker_metrics
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


class AsyncWorkers:
    """The threaded runtime of an asynchronous algorithm (see the module docstring).

    Args:
      algo: an algorithm with an :class:`~jaxrl_par.algos.base.AsyncWorker` and a state
        :class:`~jaxrl_par.algos.base.AsyncState`.
      devices: the devices (the server on the first; worker ``k`` on ``k mod D``), or
        ``True`` for every local device.
      schedule: ``"threads"`` (asynchronous) or ``"round_robin"`` (one thread, fixed
        order: equals the algorithm's own ``update``).
      vector_env: how workers' host envs step (``"sync"`` or ``"async"``, see
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
        parts, acting, num_workers = self.algo.async_worker, self.algo.host, self.num_workers
        hparams_axis = None if state.hparams is None else 0

        def serve(server, push, copy, hparams):
            server, metrics = parts.apply(server, push, hparams)
            return server, parts.pull(server, copy), metrics

        serve_fn = jax.jit(jax.vmap(serve, in_axes=(0, 0, 0, hparams_axis)),
                           donate_argnums=0)
        to = jax.device_put
        server_device = self.learner_device

        def on_server(x):
            return jax.ShapeDtypeStruct(
                x.shape, x.dtype, sharding=jax.sharding.SingleDeviceSharding(server_device))

        # The workers' and copies' slices out of the state and back, compiled ahead too
        # (as eager ops they would compile inside the first chunk, counted as training).
        split_fn = jax.jit(lambda tree: [_worker_slice(tree, k) for k in range(num_workers)])
        by_worker = (state.workers, state.copies)
        split = split_fn.lower(jax.tree.map(on_server, by_worker)).compile()
        stack = jax.jit(_stack_workers).lower(
            jax.tree.map(on_server, jax.eval_shape(split_fn, by_worker))).compile()
        example_copy = _worker_slice(state.copies, 0)
        on_host = parts.worker is None
        if on_host:
            # Each worker steps host envs of its own from its thread (made once per
            # runtime, so episodes run on across chunks); the server's program compiles
            # at the first push, whose shapes only the host worker knows.
            if not self.host_envs:
                self.host_envs = [acting.make_envs(state.workers.key[:, k],
                                                   vector_env=self.vector_env)
                                  for k in range(num_workers)]
            serve_program = serve_fn
        else:
            worker_fn = jax.jit(jax.vmap(parts.worker, in_axes=(0, 0, hparams_axis)),
                                donate_argnums=0)
            # Compile ahead (the runner times it): a worker program per device, the server's.
            example_worker = _worker_slice(state.workers, 0)
            workers_by_device = {}
            for device in dict.fromkeys(self.worker_devices):
                workers_by_device[device] = worker_fn.lower(
                    to(example_worker, device), to(example_copy, device),
                    to(state.hparams, device)).compile()
            push_shape = jax.eval_shape(worker_fn, example_worker, example_copy,
                                        state.hparams)[1]
            serve_program = serve_fn.lower(
                to(state.server, server_device),
                jax.tree.map(on_server, push_shape),
                to(example_copy, server_device), to(state.hparams, server_device)).compile()
        num_updates = self.algo.num_updates
        schedule = self.schedule

        warm_part = acting.warmup if on_host else self.algo.warmup_update
        warmup_updates = self.algo.warmup_updates if warm_part is not None else 0

        def warm_program(length: int):
            """``length`` warm-up updates (no pushes) as one scanned program."""

            def scan(s):
                return jax.lax.scan(lambda s, _: self.algo.warmup_update(s), s, None,
                                    length=length)

            return jax.jit(jax.vmap(scan), donate_argnums=0)

        warm_programs = {}
        if warmup_updates and not on_host:  # compiled here: the runner counts it as such
            first = min(chunk_updates, warmup_updates)
            warm_programs[first] = warm_program(first).lower(state).compile()

        def warm_host(state, length):
            """``length`` warm-up updates on host envs: each worker in turn acts and
            stores, with no push."""
            workers, copies = map(list, zip(*split((state.workers, state.copies)), strict=True))
            log = []
            for i in range(length * num_workers):
                k = i % num_workers
                workers[k], metrics = acting.warmup(
                    self.host_envs[k], workers[k], copies[k], state.hparams)
                log.append(metrics)
            return (state.replace(workers=stack(list(zip(workers, copies, strict=True)))[0]),
                    _rows(jax.device_get(log), length, num_workers))

        def warm(state, length):
            if on_host:
                return warm_host(state, length)
            if length not in warm_programs:
                warm_programs[length] = warm_program(length)
            state, metrics = warm_programs[length](state)
            return state, {k: np.asarray(v) for k, v in metrics.items()}

        def chunk(state, start):
            n = min(chunk_updates, num_updates - int(start))
            w = max(0, min(n, warmup_updates - int(start)))
            parts_rows = []
            if w:
                state, rows = warm(to(state, server_device), w)
                parts_rows.append(rows)
            if n > w:
                state, rows = pushes(state, n - w)
                parts_rows.append(rows)
            rows = {k: np.concatenate([r[k] for r in parts_rows], axis=1)
                    for k in parts_rows[0]}

            def pad(v):
                return np.concatenate(
                    [v, np.zeros(v.shape[:1] + (chunk_updates - n,), v.dtype)], axis=1)

            return state, {k: pad(v) for k, v in rows.items()}

        def pushes(state, n):
            """``n`` updates of ``K`` pushes each, by the threads (or in turn)."""
            quota = n * num_workers
            server = to(state.server, server_device)
            server_hparams = to(state.hparams, server_device)
            sliced = split(to((state.workers, state.copies), server_device))
            own = [{"worker": to(worker, d), "copy": to(copy, d), "hparams": to(state.hparams, d)}
                   for (worker, copy), d in zip(sliced, self.worker_devices, strict=True)]
            log: list[dict] = []
            order: list[int] = []
            lock = threading.Lock()
            issued = [0]
            errors: list[BaseException] = []

            def take_turn() -> bool:
                with lock:
                    if issued[0] >= quota or errors:
                        return False
                    issued[0] += 1
                    return True

            def push(k: int) -> None:
                nonlocal server
                mine = own[k]
                device = self.worker_devices[k]
                if on_host:
                    mine["worker"], pushed, worker_metrics = acting.step(
                        self.host_envs[k], mine["worker"], mine["copy"], mine["hparams"])
                else:
                    mine["worker"], pushed, worker_metrics = workers_by_device[device](
                        mine["worker"], mine["copy"], mine["hparams"])
                if schedule == "threads":  # a thread pushes a finished gradient
                    pushed = jax.block_until_ready(pushed)
                remote = device != server_device
                if remote:
                    pushed, old = to(pushed, server_device), to(mine["copy"], server_device)
                else:
                    old = mine["copy"]
                with lock:  # the server applies pushes one at a time, in arrival order
                    server, copy, server_metrics = serve_program(server, pushed, old,
                                                                 server_hparams)
                    log.append({**worker_metrics, **server_metrics})
                    order.append(k)
                mine["copy"] = to(copy, device) if remote else copy

            def run(k: int) -> None:
                try:
                    while take_turn():
                        push(k)
                except BaseException as e:  # noqa: BLE001 (re-raised by the runner's thread)
                    errors.append(e)

            if schedule == "round_robin":
                for i in range(quota):
                    push(i % num_workers)
            else:
                threads = [threading.Thread(target=run, args=(k,), daemon=True,
                                            name=f"jaxrl_par-worker-{k}")
                           for k in range(num_workers)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                if errors:
                    raise errors[0]
            workers, copies = stack([(to(o["worker"], server_device), to(o["copy"], server_device))
                                     for o in own])
            state = state.replace(server=server, workers=workers, copies=copies)
            state = to(state, server_device)
            self.last_order = order
            return state, _rows(jax.device_get(log), n, num_workers)

        return chunk


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
