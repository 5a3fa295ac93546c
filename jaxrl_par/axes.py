"""Axis names and axis-aware helpers, so that one function serves one or many devices.

Library code takes ``axis_name: str | None``; with ``None`` every helper is the
single-device identity, with a name it reduces over that mapped axis (``shard_map`` or
``vmap(axis_name=...)``). Randomness for a global batch is drawn so that a shard gets
exactly the slice it would get on one device: training on N devices then matches
training on one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

POP = "pop"  # independent seeds / hyperparameter settings
DATA = "data"  # synchronous data parallelism: gradients averaged over this axis


def axis_size(axis_name: str | None) -> int:
    """Number of shards along ``axis_name`` (1 without one)."""
    return 1 if axis_name is None else jax.lax.axis_size(axis_name)


def axis_index(axis_name: str | None) -> jax.Array:
    """This shard's index along ``axis_name`` (0 without one)."""
    return jnp.int32(0) if axis_name is None else jax.lax.axis_index(axis_name)


def pmean(x, axis_name: str | None):
    """Mean over ``axis_name`` of every leaf of ``x``; identity without one. The leaves
    of each dtype travel in one collective (:func:`fused`)."""
    return x if axis_name is None else fused(jax.lax.pmean, x, axis_name)


def psum(x, axis_name: str | None):
    """Sum over ``axis_name`` of every leaf of ``x``; identity without one. The leaves
    of each dtype travel in one collective (:func:`fused`)."""
    return x if axis_name is None else fused(jax.lax.psum, x, axis_name)


def fused(reduce, tree, axis_name: str):
    """``reduce(tree, axis_name)`` (``jax.lax.psum``, ``pmean``, ...) with the leaves of
    each dtype raveled into one vector, reduced once and split back: a network's
    gradient, or a dict of metrics, crosses the devices in one collective per dtype
    instead of one per leaf. The values are the same, element by element."""
    leaves, treedef = jax.tree.flatten(tree)
    leaves = [jnp.asarray(x) for x in leaves]
    groups: dict = {}
    for i, x in enumerate(leaves):
        groups.setdefault(x.dtype, []).append(i)
    out = list(leaves)
    for members in groups.values():
        if len(members) == 1:
            out[members[0]] = reduce(leaves[members[0]], axis_name)
            continue
        flat = reduce(jnp.concatenate([leaves[i].ravel() for i in members]), axis_name)
        start = 0
        for i in members:
            out[i] = flat[start:start + leaves[i].size].reshape(leaves[i].shape)
            start += leaves[i].size
    return jax.tree.unflatten(treedef, out)


def local_size(global_size: int, axis_name: str | None, what: str = "num_envs") -> int:
    """The per-shard share of a global batch size, which must divide evenly."""
    n = axis_size(axis_name)
    if global_size % n:
        raise ValueError(
            f"{what}={global_size} does not divide over {n} devices on axis {axis_name!r}; "
            f"use a multiple of {n}"
        )
    return global_size // n


def shard_keys(key: jax.Array, global_size: int, axis_name: str | None,
               steps: int | None = None) -> jax.Array:
    """This shard's slice of ``jax.random.split(key, global_size)``.

    Returns ``[global_size // axis_size]`` keys: shard ``i`` gets keys ``[i*n, (i+1)*n)``,
    the same keys those items get on one device. With ``steps``, draws keys for that many
    time steps at once: ``split(key, steps * global_size)`` viewed as ``[steps,
    global_size]``, sliced the same way to ``[steps, n]``.
    """
    keys = shard_draw(lambda k, shape: jax.random.split(k, shape[0] * shape[1]).reshape(shape),
                      key, global_size, axis_name, steps=1 if steps is None else steps)
    return keys[0] if steps is None else keys


def shard_draw(draw, key: jax.Array, global_size: int, axis_name: str | None,
               steps: int) -> jax.Array:
    """This shard's slice of ``draw(key, (steps, global_size))`` along axis 1.

    For random arrays drawn for a whole global batch at once (e.g. a rollout's action
    noise, ``[steps, global_size, ...]``): shard ``i`` gets columns ``[i*n, (i+1)*n)``,
    exactly what those items get on one device. jax's Threefry bits are a function of
    each element's index, so XLA can compute only the slice.
    """
    n = local_size(global_size, axis_name)
    values = draw(key, (steps, global_size))
    if axis_name is not None:
        values = jax.lax.dynamic_slice_in_dim(values, axis_index(axis_name) * n, n, axis=1)
    return values
