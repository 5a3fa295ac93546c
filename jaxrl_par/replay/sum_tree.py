"""A K-ary sum tree (with a min tree beside it), vectorised over a batch, without drift.

Layout: `sums[0]` holds the leaf masses (p^alpha), padded with zeros to a multiple of the
branching factor K; `sums[l + 1][j] = sum(sums[l][j*K:(j+1)*K])`; the last level has at
most K nodes, padded to K, and their sum is the total mass. `mins[l]` mirrors
`sums[l + 1]` with the minimum positive leaf mass below each node (+inf if none): the
leaves are shared, so the min tree costs only the internal nodes.

Memory: about `1 + 2/(K-1)` float32 per slot (K=8: 1.29, K=32: 1.07), against 2 for a
binary sum tree and 4 for binary sum + min trees.

No drift: an update writes the leaves, then recomputes every affected internal node from
its K children, level by level, vectorised over the batch: O(batch * K * log_K capacity).
Internal nodes are therefore always the float32 sum of their children, whatever the
history of updates, unlike trees that add deltas (flashbax issue #52).

Search: a target mass descends from the top; at each level it picks the first child whose
cumulative mass exceeds the residual target. If rounding leaves the residual at or past
the children's total, the search clamps to the last child with positive mass, so a search
can only end on a leaf with positive mass (when the total is positive).
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class SumMinTree:
    """A K-ary sum tree and min tree over `capacity` leaves.

    Attributes:
        sums: tuple; `sums[0]` float32 `[n_0 * ...]` leaf masses; `sums[l]` float32
            `[ceil(n_l / K) * K]` node sums, the last one `[K]`.
        mins: tuple; `mins[l]` float32, same shape as `sums[l + 1]`: min positive leaf mass
            under the node, +inf where there is none.
        branching: static K.
    """

    sums: tuple
    mins: tuple
    branching: int = struct.field(pytree_node=False)


def level_sizes(capacity: int, branching: int) -> list[int]:
    """Padded length of each level, leaves first; each a multiple of `branching`."""
    sizes, n = [], capacity
    while True:
        nodes = math.ceil(n / branching)
        sizes.append(nodes * branching)
        if nodes == 1:
            return sizes
        n = nodes


def init(capacity: int, branching: int = 8) -> SumMinTree:
    """An all-zero tree (every leaf empty: never sampled)."""
    if branching < 2:
        raise ValueError(f"branching must be >= 2, got {branching}.")
    sizes = level_sizes(capacity, branching)
    sums = tuple(jnp.zeros((s,), jnp.float32) for s in sizes)
    mins = tuple(jnp.full((s,), jnp.inf, jnp.float32) for s in sizes[1:])
    return SumMinTree(sums=sums, mins=mins, branching=branching)


def leaves(tree: SumMinTree) -> jax.Array:
    """float32 `[padded capacity]` leaf masses."""
    return tree.sums[0]


def total(tree: SumMinTree) -> jax.Array:
    """float32 `[]` total mass."""
    return jnp.sum(tree.sums[-1])


def minimum(tree: SumMinTree) -> jax.Array:
    """float32 `[]` smallest positive leaf mass, +inf if every leaf is zero."""
    if not tree.mins:  # one level: the leaves are the top
        return jnp.min(jnp.where(tree.sums[0] > 0, tree.sums[0], jnp.inf))
    return jnp.min(tree.mins[-1])


def sort_last_occurrence(
    indices: jax.Array, bound: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Sorts a batch of indices and marks the last occurrence (in batch order) of each.

    Args:
        indices: int32 `[n]` in `[0, bound]`.
        bound: static upper bound of the indices.

    Returns:
        `(sorted_indices, positions, is_last)`, each `[n]`: the indices in ascending order,
        their positions in the input batch, and True where an index does not occur again
        later in the batch. Equal indices stay in batch order, so the last of each run wins.
    """
    n = indices.shape[0]
    positions = jnp.arange(n, dtype=jnp.int32)
    if (bound + 1) * n < 2**31:  # one packed int32 key: a single-operand sort, fast on CPU
        packed = jax.lax.sort(indices * n + positions)
        sorted_idx, positions = packed // n, packed % n
    else:
        positions = jnp.argsort(indices, stable=True).astype(jnp.int32)
        sorted_idx = indices[positions]
    is_last = jnp.concatenate([sorted_idx[1:] != sorted_idx[:-1], jnp.array([True])])
    return sorted_idx, positions, is_last


def update(
    tree: SumMinTree,
    indices: jax.Array,
    values: jax.Array,
    unique: bool = False,
    valid: jax.Array | None = None,
) -> SumMinTree:
    """Sets leaf masses and recomputes the internal nodes on their paths.

    Args:
        tree: the tree.
        indices: int32 `[n]` leaves, in `[0, capacity)` where `valid`.
        values: float32 `[n]` new masses, finite and >= 0.
        unique: static; promise that `indices` are distinct (skips the duplicate rule).
        valid: optional bool `[n]`; entries marked False change nothing.

    Returns:
        The new tree. Where an index occurs several times, its LAST occurrence in the
        batch wins; the tree stays the exact sum of its leaves either way.
    """
    chex.assert_rank([indices, values], 1)
    chex.assert_equal_shape([indices, values])
    k = tree.branching
    indices = indices.astype(jnp.int32)
    values = values.astype(jnp.float32)
    leaf = tree.sums[0]
    out_of_range = leaf.shape[0]  # scatter index that is dropped
    if valid is not None:
        indices = jnp.where(valid, indices, out_of_range)
    if unique:
        keep = indices < out_of_range
    else:
        indices, positions, keep = sort_last_occurrence(indices, out_of_range)
        values = values[positions]
        keep = keep & (indices < out_of_range)
    leaf = leaf.at[jnp.where(keep, indices, out_of_range)].set(
        values, mode="drop", indices_are_sorted=not unique
    )
    # Entries that wrote nothing recompute the (harmless) path of leaf 0.
    node = jnp.where(indices < out_of_range, indices, 0)
    sums, mins = [leaf], []
    for level in range(1, len(tree.sums)):
        node = node // k
        below = sums[-1].reshape(-1, k)[node]  # [n, K]
        if level == 1:
            positive = jnp.where(below > 0, below, jnp.inf)
            below_min = positive.min(axis=-1)
        else:
            below_min = mins[-1].reshape(-1, k)[node].min(axis=-1)
        # Duplicate parents write identical values, so the scatter is deterministic.
        sums.append(tree.sums[level].at[node].set(below.sum(axis=-1)))
        mins.append(tree.mins[level - 1].at[node].set(below_min))
    return SumMinTree(sums=tuple(sums), mins=tuple(mins), branching=k)


def rebuild(tree: SumMinTree) -> SumMinTree:
    """Recomputes every internal node from the leaves (O(capacity)); for tests and repair."""
    k = tree.branching
    sums, mins = [tree.sums[0]], []
    for level in range(1, len(tree.sums)):
        n = tree.sums[level].shape[0]
        below = sums[-1].reshape(-1, k)
        s = below.sum(axis=-1)
        if level == 1:
            m = jnp.where(below > 0, below, jnp.inf).min(axis=-1)
        else:
            m = mins[-1].reshape(-1, k).min(axis=-1)
        pad = n - s.shape[0]
        sums.append(jnp.pad(s, (0, pad)))
        mins.append(jnp.pad(m, (0, pad), constant_values=jnp.inf))
    return SumMinTree(sums=tuple(sums), mins=tuple(mins), branching=k)


def find(tree: SumMinTree, targets: jax.Array) -> jax.Array:
    """Leaves whose cumulative-mass interval holds each target.

    Args:
        tree: the tree.
        targets: float32 `[n]` masses, meant in `[0, total)`; values outside are clamped
            (below 0 -> first positive leaf, at or past the total -> last positive leaf).

    Returns:
        int32 `[n]` leaf indices, each with positive mass whenever the total is positive
        (index 0 when the total is zero).
    """
    chex.assert_rank(targets, 1)
    k = tree.branching
    residual = jnp.maximum(targets.astype(jnp.float32), 0.0)
    node = jnp.zeros(targets.shape, jnp.int32)
    lanes = jnp.arange(k, dtype=jnp.int32)
    for level in range(len(tree.sums) - 1, -1, -1):
        children = tree.sums[level].reshape(-1, k)[node]  # [n, K]
        # Inclusive prefix sums, sequential over the K lanes (unrolled: K is small and
        # static; XLA fuses it, where cumsum lowers to a slow reduce-window on CPU).
        partial = [children[:, 0]]
        for j in range(1, k):
            partial.append(partial[-1] + children[:, j])
        cumulative = jnp.stack(partial, axis=-1)
        # The first child with positive mass whose prefix passes the residual; testing the
        # mass too keeps zero-mass children out even if rounding made prefixes non-monotone.
        hit = (cumulative > residual[:, None]) & (children > 0)
        first = jnp.min(jnp.where(hit, lanes, k), axis=-1)
        last_positive = jnp.max(jnp.where(children > 0, lanes, 0), axis=-1)
        child = jnp.where(first < k, first, last_positive)
        before = jnp.max(jnp.where(lanes < child[:, None], cumulative, 0.0), axis=-1)
        residual = jnp.maximum(residual - before, 0.0)
        node = node * k + child
    return node
