"""Uniform experience replay: the same `Buffer` API as `prioritized`, without priorities.

`sample` draws slots uniformly with replacement from the stored items and returns
probabilities `1/size` and weights 1. `update_priorities` checks its arguments and
returns the state unchanged, so algorithms can switch buffers without changing code.
For global sampling over shards `total_priority` is the size (mass 1 per item).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_par.replay import checks
from jaxrl_par.replay import storage as storage_lib
from jaxrl_par.replay.types import Buffer, PyTree, Sample

UniformState = storage_lib.StorageState


def _sample_at(state: UniformState, targets: jax.Array, beta=None, total=None, min_priority=None):
    """Slots at masses `targets` (float `[k]`, mass 1 per item: slot `floor(target)`) or,
    for integer `targets`, those slots; clipped to the stored items."""
    size = jnp.maximum(state.size, 1)
    if not jnp.issubdtype(targets.dtype, jnp.integer):
        targets = jnp.floor(targets)
    indices = jnp.clip(targets.astype(jnp.int32), 0, size - 1)
    total = state.size.astype(jnp.float32) if total is None else total
    nonempty = state.size > 0
    k = targets.shape[0]
    return Sample(
        indices=indices,
        transitions=storage_lib.get(state, indices),
        probabilities=jnp.where(nonempty, jnp.full((k,), 1.0) / jnp.maximum(total, 1.0), 0.0),
        weights=jnp.where(nonempty, jnp.ones((k,), jnp.float32), 0.0),
    )


def _sample(state: UniformState, key: jax.Array, batch_size: int) -> Sample:
    return _sample_at(state, jax.random.randint(key, (batch_size,), 0, state.size))


def uniform(capacity: int, add_batch_size: int | None = None) -> Buffer:
    """Makes a uniform replay buffer of `capacity` slots (see `prioritized` for the API
    and `add_batch_size`).

    Under jit, sampling an empty buffer returns slot 0 with probability 0 and weight 0.
    """
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"uniform: capacity must be a positive int, got {capacity!r}.")
    storage_lib.check_add_batch_size(capacity, add_batch_size, "uniform")

    add_core = jax.jit(lambda state, x: storage_lib.add(state, x)[0])
    sample_core = jax.jit(_sample, static_argnums=2)

    def init(example_transition: PyTree) -> UniformState:
        return storage_lib.init(example_transition, capacity, add_batch_size)

    def add(state: UniformState, transitions: PyTree, priorities=None) -> UniformState:
        n = storage_lib.check_batch(state, transitions)
        if priorities is not None:
            checks.check_priorities(priorities, n, "add")
        return add_core(state, transitions)

    def sample(state: UniformState, key: jax.Array, batch_size: int, beta: float = 0.4) -> Sample:
        del beta  # uniform: every weight is 1
        checks.check_batch_size(batch_size)
        checks.check_not_empty(state.size)
        return sample_core(state, key, batch_size)

    def update_priorities(state: UniformState, indices, priorities) -> UniformState:
        k = jnp.shape(indices)[0] if jnp.ndim(indices) == 1 else None
        checks.check_indices(indices, k, state.size, "update_priorities")
        checks.check_priorities(priorities, k, "update_priorities")
        return state

    return Buffer(
        init=init,
        add=add,
        sample=sample,
        update_priorities=update_priorities,
        can_sample=storage_lib.can_sample,
        total_priority=lambda state: state.size.astype(jnp.float32),
        min_priority=lambda state: jnp.float32(1.0),
        find=lambda state, targets: _sample_at(state, targets).indices,
        sample_at=_sample_at,
        capacity=capacity,
    )
