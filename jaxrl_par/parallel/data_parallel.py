"""Data-parallel and population-parallel training of any synchronous algorithm.

The algorithm's ``init``/``update`` are written for one device and reduce over
``config.axis_name`` (``axes.DATA``); here they run under ``jax.shard_map`` on the
``('pop', 'data')`` mesh. Every leaf of the global training state has the layout
``[S, D, ...]``: ``S`` seeds (sharded over ``pop``, vmapped inside a shard) and one copy
per data shard ``D`` (sharded over ``data``). Parameters and optimizer state are
replicated copies (checked by :func:`jaxrl_par.parallel.assert_is_replicated`); the
environment state (and a replay buffer) is each shard's own slice.

Why ``check_vma=False``: with the default ``check_vma=True``, ``jax.grad`` of a loss
in a *replicated* parameter inside ``shard_map`` already sums the cotangent over the
axis, so the pmap habit ``pmean(grad(loss))`` (what the algorithms do) returns D times
the gradient. With ``check_vma=False`` shard_map behaves like pmap: the gradient is the
local one and the algorithm's ``pmean`` averages it (tested in ``tests/test_parallel.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl_par import algos, axes
from jaxrl_par.algos.base import Algorithm, scan_updates
from jaxrl_par.algos.config import algorithm_name
from jaxrl_par.parallel.mesh import shape_of

STATE_SPEC = P(axes.POP, axes.DATA)  # every state leaf: [S, D, ...]


def check_algorithm(algo: Algorithm, mesh: Mesh, num_seeds: int, trace: bool = True) -> None:
    """Raises a ValueError naming the numbers if ``algo`` cannot run on ``mesh``.

    Checks, before anything is compiled: seeds divide over ``pop``; the algorithm
    reduces over ``axes.DATA`` when the data axis has more than one device; and its
    ``init`` traces with the data axis bound (so e.g. ``num_envs`` that does not divide
    the data devices fails here, with the message of :func:`jaxrl_par.axes.local_size`).
    ``trace=False`` leaves that last check to the caller's own trace of
    :meth:`Sharded.trace_init` (the runner's: it keeps that trace for the compile).
    """
    shape = shape_of(mesh)
    if num_seeds % shape.pop:
        raise ValueError(
            f"{num_seeds} seed(s) do not divide over pop={shape.pop} population shards; "
            f"use a multiple of {shape.pop} seeds (with a sweep: of lanes, seeds times "
            "points)"
        )
    if shape.data > 1 and not algo.data_parallel:
        raise ValueError(
            f"the mesh has a data axis of {shape.data} devices but "
            f"{algorithm_name(algo.config)}.Config has no axis_name: this algorithm does "
            "not run data parallel; give it one device, or devices only for a population "
            "(pop=devices), or use "
            f"{algos.listed(algos.with_config_field('axis_name'))}"
        )
    if shape.data > 1 and algo.axis_name != axes.DATA:
        raise ValueError(
            f"the mesh has a data axis of {shape.data} devices but the algorithm was made "
            f"with axis_name={algo.axis_name!r}: make it with Config(axis_name="
            f"jaxrl_par.axes.DATA) so that gradients are averaged over devices"
        )
    if trace:
        jax.eval_shape(make_init(algo, mesh), jnp.zeros((num_seeds, 2), jnp.uint32))


def _squeeze_data(tree):
    return jax.tree.map(lambda x: x[:, 0], tree)


def _expand_data(tree):
    return jax.tree.map(lambda x: jnp.expand_dims(x, 1), tree)


def make_init(algo: Algorithm, mesh: Mesh, key_impl: str | None = None) -> Callable:
    """``init(key_data [S, k] uint32) -> state [S, D, ...]``, jitted and sharded.

    Every data shard of a seed gets the same key, so network parameters are drawn once
    (global init) and environments from their global index (``axes.shard_keys``).
    Keys travel as raw ``key_data`` so the function also takes host arrays on every
    process of a multi-host run.
    """

    def body(key_data):  # [S_local, k]
        keys = jax.random.wrap_key_data(key_data, impl=key_impl)
        return _expand_data(jax.vmap(algo.init)(keys))

    sharded = jax.shard_map(body, mesh=mesh, in_specs=P(axes.POP), out_specs=STATE_SPEC,
                            check_vma=False)
    return jax.jit(sharded, in_shardings=NamedSharding(mesh, P(axes.POP)),
                   out_shardings=NamedSharding(mesh, STATE_SPEC))


def make_chunk_fn(algo: Algorithm, mesh: Mesh, chunk_updates: int, example_state) -> Callable:
    """``chunk(state [S, D, ...], start) -> (state, metrics [S, chunk_updates])``.

    The sharded twin of :func:`jaxrl_par.runner.programs.make_chunk_fn`, on the same
    :func:`jaxrl_par.algos.base.scan_updates`: runs updates ``start .. start +
    chunk_updates - 1`` (those at or past ``algo.num_updates`` are skipped, their metrics
    zero). Metrics are read from data shard 0 (the algorithm
    averages them over ``data``) and returned replicated, so every process can read them.

    Args:
      algo: the algorithm, made with ``axis_name=axes.DATA``.
      mesh: the ``('pop', 'data')`` mesh.
      chunk_updates: updates per call (static).
      example_state: unused; kept for the ``chunk_fn_factory`` signature.
    """
    scan_one = scan_updates(algo, chunk_updates)  # one seed's shard state

    def shard_body(state, start):  # state [S_local, 1, ...]
        state, metrics = jax.vmap(scan_one, in_axes=(0, None))(_squeeze_data(state), start)
        return _expand_data(state), _expand_data(metrics)

    sharded = jax.shard_map(shard_body, mesh=mesh, in_specs=(STATE_SPEC, P()),
                            out_specs=(STATE_SPEC, STATE_SPEC), check_vma=False)

    def chunk(state, start):
        state, metrics = sharded(state, start)
        return state, jax.tree.map(lambda m: m[:, 0], metrics)

    state_sharding = NamedSharding(mesh, STATE_SPEC)
    replicated = NamedSharding(mesh, P())
    return jax.jit(chunk, in_shardings=(state_sharding, replicated),
                   out_shardings=(state_sharding, replicated), donate_argnums=0)


def place(state, mesh: Mesh):
    """Puts a host (or single-device) ``[S, D, ...]`` state onto the mesh, e.g. after
    loading a checkpoint. On several processes every process must pass the same value."""
    sharding = NamedSharding(mesh, STATE_SPEC)

    def put(x):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            data = jax.device_put(np.asarray(jax.random.key_data(x)), sharding)
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        return jax.device_put(np.asarray(x), sharding)

    return jax.tree.map(put, state)


def to_host(state):
    """The whole ``[S, D, ...]`` state as host numpy arrays (PRNG keys kept as keys).

    A collective on several processes: every process must call it.
    """
    if jax.process_count() == 1:
        return jax.device_get(state)
    from jax.experimental import multihost_utils

    def gather(x):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            data = multihost_utils.process_allgather(jax.random.key_data(x), tiled=True)
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        return multihost_utils.process_allgather(x, tiled=True)

    return jax.tree.map(gather, state)


def unreplicate(state):
    """``[S, D, ...] -> [S, ...]``: data shard 0's copy (its parameters equal every
    shard's; its environment state is only shard 0's slice)."""
    return jax.tree.map(lambda x: x[:, 0], state)


@dataclasses.dataclass(frozen=True)
class Sharded:
    """An algorithm bound to a mesh: what the runner needs to train it sharded.

    Attributes:
      algo: the algorithm (``axis_name=axes.DATA`` when ``data > 1``).
      mesh: the ``('pop', 'data')`` mesh.
    """

    algo: Algorithm
    mesh: Mesh

    def init(self, keys: jax.Array) -> Any:
        """``[S]`` PRNG keys -> state ``[S, D, ...]`` on the mesh."""
        data = jax.random.key_data(keys)
        return make_init(self.algo, self.mesh, jax.random.key_impl(keys))(data)

    def trace_init(self, keys: jax.Array) -> Any:
        """:meth:`init` traced for ``keys``, not run: ``.out_info`` is the state's shapes
        and shardings; ``.lower()`` its program, which takes ``jax.random.key_data(keys)``."""
        return make_init(self.algo, self.mesh, jax.random.key_impl(keys)).trace(
            jax.random.key_data(keys))

    def chunk_fn_factory(self, algo: Algorithm, chunk_updates: int, example_state) -> Callable:
        """Drop-in for ``train(..., chunk_fn_factory=...)``."""
        return make_chunk_fn(algo, self.mesh, chunk_updates, example_state)

    def place(self, state):
        return place(state, self.mesh)
