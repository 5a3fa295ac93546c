"""Prioritized experience replay (Schaul et al., 2016, https://arxiv.org/abs/1511.05952).

Slot i is drawn with probability `P(i) = p_i^alpha / sum_j p_j^alpha`, by stratified
sampling (one draw per equal slice of the total mass), with importance weights
`w_i = (N P(i))^-beta / max_j (N P(j))^-beta = (p_i^alpha / min_j p_j^alpha)^-beta`,
the max taken over every stored item with positive priority (kept by a min tree).
New items get the largest priority seen so far unless priorities are given (Ape-X).

Rules (documented, deterministic):
  * Zero priority: a slot whose p^alpha is 0 is never sampled.
  * Duplicates: an index given twice to one `update_priorities` call takes the value of
    its LAST occurrence in the batch.
  * Bad values: with concrete inputs, NaN/infinite/negative priorities, out-of-range
    indices and sampling an empty buffer raise ValueError. Inside jit they cannot raise:
    NaN/infinite/negative priorities count as 0 (never sampled, max priority unchanged),
    indices outside `[0, size)` are ignored, and sampling a buffer with zero total mass
    returns slot 0 with probability 0 and weight 0 (so a weighted loss is 0).

Sharding: every function is pure and works per shard under `jax.vmap` / `jax.shard_map`.
For one global stratified sample over D shards, each shard computes
`u = stratified_uniforms(key, B)` with the same key, `targets = u * global_total -
shard_offset` (global_total = psum of `total_priority`, shard_offset = its exclusive
prefix), keeps the targets in `[0, total_priority(state))`, and calls
`sample_at(state, targets, beta, total=global_total, min_priority=pmin(min_priority))`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl_par.replay import checks, sum_tree
from jaxrl_par.replay import storage as storage_lib
from jaxrl_par.replay.types import Buffer, PyTree, Sample


@struct.dataclass
class PrioritizedState:
    """State of a prioritized buffer.

    Attributes:
        storage: the ring of transitions (`[capacity, ...]` leaves, insert_pos, size).
        tree: K-ary sum and min trees over the masses p^alpha (float32).
        max_priority: float32 `[]`, largest (raw, not ^alpha) priority seen; starts at 1.
    """

    storage: storage_lib.StorageState
    tree: sum_tree.SumMinTree
    max_priority: jax.Array

    @property
    def size(self) -> jax.Array:
        return self.storage.size


def stratified_uniforms(key: jax.Array, batch_size: int) -> jax.Array:
    """float32 `[batch_size]`: `(i + U_i) / batch_size`, one uniform per equal slice of [0, 1)."""
    u = jax.random.uniform(key, (batch_size,), jnp.float32)
    return (jnp.arange(batch_size, dtype=jnp.float32) + u) / batch_size


def _mass(priorities: jax.Array, alpha: float) -> jax.Array:
    """p^alpha, exactly 0 where p is 0 (also for alpha = 0)."""
    return jnp.where(priorities > 0, jnp.power(priorities, alpha), 0.0).astype(jnp.float32)


def _init(example: PyTree, capacity: int, branching: int,
          add_batch_size: int | None = None) -> PrioritizedState:
    return PrioritizedState(
        storage=storage_lib.init(example, capacity, add_batch_size),
        tree=sum_tree.init(capacity, branching),
        max_priority=jnp.float32(1.0),
    )


def _add(
    state: PrioritizedState, transitions: PyTree, priorities: jax.Array | None, alpha: float
) -> PrioritizedState:
    new_storage, indices = storage_lib.add(state.storage, transitions)
    if priorities is None:
        priorities = jnp.full(indices.shape, state.max_priority)
        max_priority = state.max_priority
    else:
        priorities = checks.sanitize(priorities)
        max_priority = jnp.maximum(state.max_priority, jnp.max(priorities))
    tree = sum_tree.update(state.tree, indices, _mass(priorities, alpha), unique=True)
    return PrioritizedState(storage=new_storage, tree=tree, max_priority=max_priority)


def _update_priorities(
    state: PrioritizedState, indices: jax.Array, priorities: jax.Array, alpha: float
) -> PrioritizedState:
    priorities = checks.sanitize(priorities)
    valid = (indices >= 0) & (indices < state.storage.size)
    tree = sum_tree.update(state.tree, indices, _mass(priorities, alpha), valid=valid)
    seen = jnp.max(jnp.where(valid, priorities, 0.0))
    return state.replace(tree=tree, max_priority=jnp.maximum(state.max_priority, seen))


def _sample_at(
    state: PrioritizedState,
    targets: jax.Array,
    beta: float | jax.Array,
    total: jax.Array | None = None,
    min_priority: jax.Array | None = None,
) -> Sample:
    total = sum_tree.total(state.tree) if total is None else total
    least = sum_tree.minimum(state.tree) if min_priority is None else min_priority
    # `least` goes through the search so that its read of the tree precedes any update at
    # the indices found (see `sum_tree.find_with_mass`).
    indices, mass = sum_tree.find_with_mass(state.tree, targets, after=least)
    positive = mass > 0
    probabilities = jnp.where(positive & (total > 0), mass / jnp.where(total > 0, total, 1.0), 0.0)
    ratio = jnp.where(positive, mass / least, 1.0)  # >= 1 since least is the min mass
    weights = jnp.where(positive, jnp.power(ratio, -jnp.asarray(beta, jnp.float32)), 0.0)
    return Sample(
        indices=indices,
        transitions=storage_lib.get(state.storage, indices),
        probabilities=probabilities.astype(jnp.float32),
        weights=weights.astype(jnp.float32),
    )


def _sample(
    state: PrioritizedState, key: jax.Array, batch_size: int, beta: float | jax.Array
) -> Sample:
    total = sum_tree.total(state.tree)
    targets = stratified_uniforms(key, batch_size) * total
    return _sample_at(state, targets, beta, total=total)


def prioritized(capacity: int, alpha: float = 0.6, branching: int = 8,
                add_batch_size: int | None = None) -> Buffer:
    """Makes a prioritized replay buffer.

    Args:
        capacity: number of slots (a Python int).
        alpha: priority exponent; 0 gives uniform sampling over positive priorities.
        branching: static fan-out K of the sum tree; the tree costs ~`2/(K-1)` float32 per
            slot beside the leaf masses, and an operation touches `K log_K capacity` nodes.
            8 balances sampling (small K) against updates (few levels) on CPU.
        add_batch_size: None (any batch size), or the one batch size `add` will take,
            which must divide `capacity`: batches then never cross the end of the ring
            and are written faster (see `storage.init`).

    Returns:
        A `Buffer` of pure functions over `PrioritizedState`:

        >>> import jax, jax.numpy as jnp
        >>> buf = prioritized(capacity=8, alpha=0.6)
        >>> state = buf.init({"obs": jnp.zeros(3), "reward": jnp.float32(0)})
        >>> state = buf.add(state, {"obs": jnp.ones((2, 3)), "reward": jnp.zeros(2)})
        >>> s = buf.sample(state, jax.random.key(0), 4, beta=0.4)
        >>> s.indices.shape, s.transitions["obs"].shape
        ((4,), (4, 3))
    """
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"prioritized: capacity must be a positive int, got {capacity!r}.")
    if not (alpha >= 0 and float(alpha) < float("inf")):
        raise ValueError(f"prioritized: alpha must be finite and >= 0, got {alpha!r}.")
    alpha = float(alpha)
    storage_lib.check_add_batch_size(capacity, add_batch_size, "prioritized")

    add_core = jax.jit(functools.partial(_add, alpha=alpha))
    update_core = jax.jit(functools.partial(_update_priorities, alpha=alpha))
    sample_core = jax.jit(_sample, static_argnums=2)
    sample_at_core = jax.jit(_sample_at)

    def init(example_transition: PyTree) -> PrioritizedState:
        """Empty buffer shaped like one transition (no batch axis)."""
        return _init(example_transition, capacity, branching, add_batch_size)

    def add(
        state: PrioritizedState, transitions: PyTree, priorities: jax.Array | None = None
    ) -> PrioritizedState:
        """Adds `[n, ...]` transitions; `priorities` float `[n]` or None (max seen)."""
        n = storage_lib.check_batch(state.storage, transitions)
        if priorities is not None:
            priorities = checks.check_priorities(priorities, n, "add")
        return add_core(state, transitions, priorities)

    def update_priorities(
        state: PrioritizedState, indices: jax.Array, priorities: jax.Array
    ) -> PrioritizedState:
        """Sets raw priorities (int `[k]` indices, float `[k]`); last duplicate wins."""
        k = jnp.shape(indices)[0] if jnp.ndim(indices) == 1 else None
        indices = checks.check_indices(indices, k, state.storage.size, "update_priorities")
        priorities = checks.check_priorities(priorities, k, "update_priorities")
        return update_core(state, indices, priorities)

    def sample(
        state: PrioritizedState, key: jax.Array, batch_size: int, beta: float = 0.4
    ) -> Sample:
        """Draws `batch_size` (static) slots, stratified, with IS weights for `beta`."""
        checks.check_batch_size(batch_size)
        checks.check_not_empty(state.storage.size)
        if (storage_lib.is_concrete(state.tree.sums[-1]) and state.tree.sums[-1].ndim == 1
                and not float(np.sum(np.asarray(state.tree.sums[-1]))) > 0):
            raise ValueError(
                "sample: every stored priority is zero, nothing can be drawn; "
                "give some items a positive priority with update_priorities."
            )
        return sample_core(state, key, batch_size, beta)

    def sample_at(
        state: PrioritizedState,
        targets: jax.Array,
        beta: float = 0.4,
        total: jax.Array | None = None,
        min_priority: jax.Array | None = None,
    ) -> Sample:
        """Sample at given masses `targets` float `[k]` in `[0, total_priority)`.

        `total` and `min_priority` default to this buffer's; pass the global ones (psum /
        pmin over shards) to get global probabilities and weights.
        """
        return sample_at_core(state, targets, beta, total, min_priority)

    def can_sample(state: PrioritizedState, batch_size: int) -> jax.Array:
        """bool `[]`: at least `batch_size` items stored and some positive priority."""
        return storage_lib.can_sample(state.storage, batch_size) & (
            sum_tree.total(state.tree) > 0
        )

    def total_priority(state: PrioritizedState) -> jax.Array:
        """float32 `[]`: sum of p^alpha over stored items."""
        return sum_tree.total(state.tree)

    def min_priority(state: PrioritizedState) -> jax.Array:
        """float32 `[]`: smallest positive p^alpha stored (+inf if none)."""
        return sum_tree.minimum(state.tree)

    def find(state: PrioritizedState, targets: jax.Array) -> jax.Array:
        """int32 `[k]` slots holding the cumulative masses `targets` (positive mass only)."""
        return sum_tree.find(state.tree, targets)

    return Buffer(
        init=init,
        add=add,
        sample=sample,
        update_priorities=update_priorities,
        can_sample=can_sample,
        total_priority=total_priority,
        min_priority=min_priority,
        find=find,
        sample_at=sample_at,
        capacity=capacity,
    )
