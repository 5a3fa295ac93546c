"""A ring of preallocated device arrays over a pytree of transitions.

The storage knows nothing of priorities: `uniform.py` and `prioritized.py` put a
sampling rule on top of it. All functions are pure, jit/vmap/shard_map-safe, and take
the state first and return it new (donate it under jit to write in place).
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

PyTree = Any


@struct.dataclass
class StorageState:
    """Ring storage.

    Attributes:
        data: the example transition's pytree, every leaf `[capacity, *leaf_shape]`.
        insert_pos: int32 `[]`, slot the next item is written to.
        size: int32 `[]`, number of valid items, `<= capacity`.
    """

    data: PyTree
    insert_pos: jax.Array
    size: jax.Array

    @property
    def capacity(self) -> int:
        return jax.tree.leaves(self.data)[0].shape[0]


def is_concrete(*trees: PyTree) -> bool:
    """True when no leaf of `trees` is a tracer, i.e. values can be checked eagerly."""
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(trees))


def init(example: PyTree, capacity: int) -> StorageState:
    """Preallocates `capacity` zeroed slots shaped like `example` (no batch axis)."""
    if not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"capacity must be a positive Python int, got {capacity!r}.")
    leaves = jax.tree.leaves(example)
    if not leaves:
        raise ValueError("example_transition has no array leaves; pass e.g. a dict of arrays.")
    data = jax.tree.map(
        lambda x: jnp.zeros((capacity, *jnp.shape(x)), jnp.asarray(x).dtype), example
    )
    return StorageState(data=data, insert_pos=jnp.int32(0), size=jnp.int32(0))


def check_batch(state: StorageState, transitions: PyTree) -> int:
    """Static checks of a batch against the storage: structure, dtype, shape, batch size.

    Returns:
        The batch size (a Python int).

    Raises:
        ValueError: naming the mismatch and the fix.
    """
    want_def = jax.tree.structure(state.data)
    got_def = jax.tree.structure(transitions)
    if want_def != got_def:
        raise ValueError(
            f"add: transition structure {got_def} does not match the buffer's {want_def}; "
            "pass the same pytree (keys, nesting) as the example given to init."
        )
    capacity = state.capacity
    batch = None
    paths = jax.tree_util.tree_flatten_with_path(state.data)[0]
    for (path, slot), x in zip(paths, jax.tree.leaves(transitions)):
        name = jax.tree_util.keystr(path) or "<leaf>"
        x_shape, x_dtype = jnp.shape(x), jnp.result_type(x)
        if x_dtype != slot.dtype:
            raise ValueError(
                f"add: leaf {name} has dtype {x_dtype}, the buffer stores {slot.dtype}; "
                f"cast it first, e.g. x.astype(jnp.{slot.dtype})."
            )
        if len(x_shape) != slot.ndim or tuple(x_shape[1:]) != slot.shape[1:]:
            raise ValueError(
                f"add: leaf {name} has shape {tuple(x_shape)}, expected [batch, "
                f"*{tuple(slot.shape[1:])}]; add a leading batch axis (x[None] for one item)."
            )
        if batch is None:
            batch = x_shape[0]
        elif x_shape[0] != batch:
            raise ValueError(
                f"add: leaf {name} has batch size {x_shape[0]}, other leaves {batch}; "
                "every leaf needs the same leading batch axis."
            )
    if batch > capacity:
        raise ValueError(
            f"add: batch of {batch} transitions is larger than the capacity {capacity}; "
            f"split the batch or make a buffer with capacity >= {batch}."
        )
    return batch


def add(state: StorageState, transitions: PyTree) -> tuple[StorageState, jax.Array]:
    """Writes a batch at the insertion position, wrapping around (oldest overwritten).

    Args:
        state: the storage.
        transitions: pytree like the example, every leaf `[n, *leaf_shape]`, `n <= capacity`.

    Returns:
        The new state and the slots written, int32 `[n]` (distinct, since n <= capacity).
    """
    n = check_batch(state, transitions)
    capacity = state.capacity
    indices = (state.insert_pos + jnp.arange(n, dtype=jnp.int32)) % capacity
    data = jax.tree.map(
        lambda buf, x: buf.at[indices].set(x, indices_are_sorted=False, unique_indices=True),
        state.data,
        transitions,
    )
    new = StorageState(
        data=data,
        insert_pos=((state.insert_pos + n) % capacity).astype(jnp.int32),
        size=jnp.minimum(state.size + n, capacity).astype(jnp.int32),
    )
    return new, indices


def get(state: StorageState, indices: jax.Array) -> PyTree:
    """Gathers the transitions at `indices` (int `[k]`): every leaf `[k, *leaf_shape]`."""
    chex.assert_rank(indices, 1)
    return jax.tree.map(lambda buf: buf[indices], state.data)


def can_sample(state: StorageState, batch_size: int) -> jax.Array:
    """bool `[]`: at least `batch_size` items are stored (traceable)."""
    return state.size >= batch_size


def nbytes(tree: PyTree) -> int:
    """Bytes of all array leaves of `tree` (shapes only; works on abstract values)."""
    return int(sum(np.prod(x.shape) * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)))
