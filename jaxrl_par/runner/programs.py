"""The builder: an algorithm's compiled init and chunk programs for a runtime.

A chunk is ``lax.scan`` over updates of the algorithm's ``update``, vmapped over seeds
(:func:`make_chunk_fn`), sharded over a device mesh by
:class:`~jaxrl_par.parallel.Sharded`, or compiled by a runtime of its own (the
actor-learner and asynchronous-worker runtimes of :mod:`jaxrl_par.parallel`), as a
:class:`Runtime` says. :func:`build` gives the initial states and the compiled chunk.

Compiled programs of recent runs are kept in an LRU cache keyed by the algorithm's
functions themselves (so an id is never reused for another one), the chunk size, the
abstract shapes and shardings of the arguments, and the jax settings read at compile
time: training the same ``Algorithm`` object again (other seeds, a resumed run, a notebook
cell run twice) compiles nothing. A new ``Algorithm`` object is traced and compiled
again; jax's persistent compilation cache (see :mod:`jaxrl_par.cli`) makes that cheap.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par import axes
from jaxrl_par.algos import hyper
from jaxrl_par.algos.base import Algorithm, scan_updates
from jaxrl_par.parallel import lru
from jaxrl_par.runner import memory

_MAX_COMPILED = 8
_compiled = lru.LRU(_MAX_COMPILED)
# The vmapped init traced (not lowered), keyed as `_compiled`: the memory check reads the
# state's shapes from it and the compile lowers it, so init is traced once per run.
_traced = lru.LRU(_MAX_COMPILED)

# jax settings read when a program is compiled rather than traced: a program compiled under
# one (e.g. `jax_disable_most_optimizations`) is not reused under another.
_COMPILE_SETTINGS = ("jax_disable_most_optimizations", "jax_optimization_level",
                     "jax_memory_fitting_level", "jax_exec_time_optimization_effort",
                     "jax_memory_fitting_effort")


def seed_keys(seeds: int | Sequence[int] | jax.Array) -> tuple[jax.Array, list[int]]:
    """``[S]`` PRNG keys from a seed, a list of seeds, or a ``[S]`` key array."""
    if isinstance(seeds, jax.Array) and jnp.issubdtype(seeds.dtype, jax.dtypes.prng_key):
        keys = seeds.reshape(-1)
        return keys, list(range(keys.shape[0]))
    if isinstance(seeds, (int, np.integer)):
        seeds = [int(seeds)]
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("no seeds given: pass a seed (0), a list of seeds ([0, 1, 2]) "
                         "or [S] PRNG keys")
    return jnp.stack([jax.random.key(s) for s in seeds]), seeds


def choose_chunk(num_updates: int, num_chunks: int) -> int:
    """Updates per chunk: a divisor of ``num_updates`` close to ``num_updates/num_chunks``
    if there is one (no masked updates), else the ceiling.

    The largest divisor from half the target up to it (so up to twice the chunks asked
    for); failing that, the smallest up to 1.5x the target (at least two thirds of them).
    A chunk that divides the run needs no ``lax.cond`` to skip updates past its end: 976
    updates in 20 chunks asked for take 16 chunks of 61 rather than chunks of 49.
    """
    target = max(1, math.ceil(num_updates / max(1, num_chunks)))
    for d in range(target, max(1, target // 2) - 1, -1):
        if num_updates % d == 0:
            return d
    for d in range(target + 1, min(num_updates, (3 * target) // 2) + 1):
        if num_updates % d == 0:
            return d
    return target


def make_chunk_fn(algo: Algorithm, chunk_updates: int, example_state=None) -> Callable:
    """``chunk(states [S, ...], start) -> (states, metrics [S, chunk_updates])``.

    Runs updates ``start .. start + chunk_updates - 1`` of every seed; updates at or past
    ``algo.num_updates`` are skipped and their metrics are zeros, which the host drops
    (see :func:`jaxrl_par.algos.base.scan_updates`). ``example_state`` is unused here; it
    keeps the signature of the ``chunk_fn_factory`` hook.
    """
    del example_state
    run = scan_updates(algo, chunk_updates)
    return jax.jit(jax.vmap(run, in_axes=(0, None)), donate_argnums=0)


class Runtime(NamedTuple):
    """How a run's chunks execute.

    Attributes:
      factory: ``factory(algo, chunk_updates, example_state) -> chunk``, a jitted chunk
        over ``[S, ...]`` states (:func:`make_chunk_fn`, or ``train``'s
        ``chunk_fn_factory``); with ``sharded``, the mesh's own.
      sharded: a :class:`~jaxrl_par.parallel.Sharded` (states ``[S, D, ...]`` on its
        mesh of ``D`` data shards), or None.
      pipeline: a runtime that places the state on its ``learner_device`` and compiles
        its own chunk with ``compile(state, chunk_updates)``
        (:class:`~jaxrl_par.parallel.actor_learner.ActorLearner`,
        :class:`~jaxrl_par.parallel.async_workers.AsyncWorkers`), or None.
    """

    factory: Callable = make_chunk_fn
    sharded: Any = None
    pipeline: Any = None

    @property
    def data_shards(self) -> int | None:
        """``D`` of a mesh's ``[S, D, ...]`` state; None for one device's ``[S, ...]``."""
        return int(self.sharded.mesh.shape[axes.DATA]) if self.sharded else None

    @property
    def devices(self) -> list[jax.Device]:
        """The devices that hold the state: the mesh's, else the first device."""
        return list(self.sharded.mesh.devices.flat) if self.sharded else [jax.devices()[0]]

    def place(self, state: Any) -> Any:
        """``state`` (read from a checkpoint) placed as the runtime holds it."""
        return self.sharded.place(state) if self.sharded else state


class Built(NamedTuple):
    """What :func:`build` gives.

    Attributes:
      state: the initial states, leaves ``[S, ...]`` (``[S, D, ...]`` on a mesh), placed
        as the runtime holds them; or only their shapes (``jax.ShapeDtypeStruct``) where
        nothing was built.
      chunk: ``chunk(state, start) -> (state, metrics {name: [S, chunk_updates]})``, or
        None where nothing was built.
      compile_seconds: the time spent tracing, compiling and running init.
    """

    state: Any
    chunk: Callable | None
    compile_seconds: float


def _compile_settings() -> tuple:
    return tuple(jax.config.values.get(name) for name in _COMPILE_SETTINGS)


def _compile_once(key: tuple, lower: Callable[..., Any], *args):
    """The compiled program for ``key`` under the current compile settings, from the
    cache or ``lower(*args).compile()``."""
    key = (*key, _compile_settings())
    return _compiled.get(key, lambda: lower(*args).compile())


def _abstract(tree) -> tuple:
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple((x.shape, x.dtype, x.sharding) for x in leaves)


def trace_init(algo: Algorithm, keys: jax.Array, sharded=None) -> Any:
    """``jax.jit(jax.vmap(algo.init))`` traced for ``keys`` (with ``sharded``, its mesh
    twin :meth:`~jaxrl_par.parallel.Sharded.trace_init`), from the cache: ``.out_info``
    is the state's shapes, ``.lower()`` its program. Tracing raises what the algorithm
    cannot do with these keys or this mesh before anything compiles."""
    if sharded:
        return _traced.get(("sharded_init", algo.init, sharded.mesh, _abstract(keys)),
                           lambda: sharded.trace_init(keys))
    return _traced.get(("init", algo.init, _abstract(keys)),
                       lambda: jax.jit(jax.vmap(algo.init)).trace(keys))


def shapes(algo: Algorithm, keys: jax.Array, runtime: Runtime) -> Built:
    """:class:`Built` with the initial state's shapes only: nothing compiled or run (a
    resumed run that has nothing left to train reads its state into them)."""
    return Built(trace_init(algo, keys, runtime.sharded).out_info, None, 0.0)


CHUNK = "a chunk of updates"  # what the memory check calls the chunk program


def _build(algo: Algorithm, keys: jax.Array, runtime: Runtime, chunk_updates: int,
           check: Callable[[Any, str], None]) -> tuple[Any, Callable]:
    """The initial states and the compiled chunk, from the program caches where they hold
    them (a ``runtime.pipeline`` compiles its own chunk). ``check(compiled, what)`` runs
    before each compiled program first runs (the memory check of :func:`build`)."""
    sharded, pipeline = runtime.sharded, runtime.pipeline
    seeds = keys.shape[0]
    if sharded:
        data = jax.random.key_data(keys)
        init = trace_init(algo, keys, sharded).lower().compile()
        check(init, f"initialising {seeds} seed(s)")
        state = init(data)
        args = (state, jnp.int32(0))
        compiled = runtime.factory(algo, chunk_updates, None).lower(*args).compile()
        check(compiled, CHUNK)
        return jax.block_until_ready(state), compiled
    init = _compile_once(("init", algo.init, _abstract(keys)),
                         lambda k: trace_init(algo, k).lower(), keys)
    check(init, f"initialising {seeds} seed(s)")
    state = init(keys)
    if pipeline:
        state = jax.device_put(state, pipeline.learner_device)
        compiled = pipeline.compile(state, chunk_updates)
    else:
        factory = runtime.factory
        # Shapes, not a slice of the state: slicing a concrete state would copy it.
        example = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), state)
        compiled = _compile_once(
            ("chunk", factory, algo.init, algo.update, algo.num_updates, chunk_updates,
             algo.warmup_updates, algo.warmup_update, _abstract(state)),
            lambda *args: factory(algo, chunk_updates, example).lower(*args),
            state, jnp.int32(0))
        check(compiled, CHUNK)
    return jax.block_until_ready(state), compiled


def compile_chunk(algo: Algorithm, runtime: Runtime, template: Any, chunk_updates: int
                  ) -> Callable:
    """The compiled chunk of ``chunk_updates`` updates for states of ``template``'s
    shapes and shardings (``jax.ShapeDtypeStruct`` leaves), from the program cache where
    it holds it: a run whose chunks took too long goes on with shorter ones
    (:class:`jaxrl_par.runner.loop.Bounds`). Not for a ``runtime.pipeline``, which
    compiles its own chunks from the state itself."""
    start = jnp.int32(0)
    if runtime.sharded:
        return runtime.factory(algo, chunk_updates, None).lower(template, start).compile()
    factory = runtime.factory
    example = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), template)
    return _compile_once(
        ("chunk", factory, algo.init, algo.update, algo.num_updates, chunk_updates,
         algo.warmup_updates, algo.warmup_update, _abstract(template)),
        lambda *args: factory(algo, chunk_updates, example).lower(*args), template, start)


def build(algo: Algorithm, keys: jax.Array, runtime: Runtime, chunk_updates: int, *,
          lanes: Mapping[str, np.ndarray] | None = None, check_memory: bool = True,
          host_copies: int = 0, say: bool = False) -> Built:
    """The initial states of ``keys`` (one per seed) and the compiled chunk of
    ``chunk_updates`` updates, for ``runtime``; ``lanes`` (``name -> [S]``), a sweep's
    values, are written into the states (:func:`jaxrl_par.algos.hyper.write`).

    With ``check_memory``, first checks from the state's shapes alone (nothing allocated
    or compiled) that it fits in the memory free on the runtime's devices
    (:func:`jaxrl_par.runner.memory.check_fits`), then, before the init and the chunk
    first run, that what each allocates beyond its donated input (its outputs and
    temporaries, from the compiler's figures) fits in what is free then
    (:func:`jaxrl_par.runner.memory.check_program`). ``host_copies``: copies of the
    state the run keeps in host memory besides (1 where checkpoints are written). With
    ``say``, prints what it compiles and, when done or failed, how long it took (to
    stderr).
    """
    seeds = keys.shape[0]
    state_size = ""

    state_bytes = 0

    def check(compiled, what: str) -> None:
        if check_memory:  # a chunk's checkpoint copies the state to the host
            copies = host_copies * state_bytes if what == CHUNK else 0
            memory.check_program(compiled, runtime.devices, what, host_bytes=copies)

    if check_memory:
        abstract = trace_init(algo, keys, runtime.sharded).out_info
        memory.check_fits(abstract, runtime.devices, f"the state of {seeds} seed(s)",
                          host_copies=host_copies)
        state_bytes = memory.tree_bytes(abstract)
        state_size = f" (state {memory.format_bytes(state_bytes)})"
    if say:  # the first run of a program compiles for seconds before the bar moves
        print(f"jaxrl_par: compiling {seeds} seed(s) x {algo.num_updates} updates in "
              f"chunks of {chunk_updates}{state_size}...", end="", file=sys.stderr,
              flush=True)
    t0 = time.perf_counter()
    try:
        state, chunk = _build(algo, keys, runtime, chunk_updates, check)
        if lanes:
            state = hyper.write(state, lanes)
    finally:  # the line ends, and the time shows, also when compiling fails
        seconds = time.perf_counter() - t0
        if say:
            print(f" {seconds:.1f} s", file=sys.stderr, flush=True)
    return Built(state, chunk, seconds)
