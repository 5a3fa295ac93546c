"""A K-ary sum tree (with a min tree beside it), vectorised over a batch, without drift.

Levels: level 0 holds the leaf masses (p^alpha), padded with zeros to a multiple of the
branching factor K; node j of level l + 1 is the sum of nodes `j*K .. j*K + K - 1` of level
l; the last level has at most K nodes, padded to K, and their sum is the total mass. Beside
each internal node sits the minimum positive leaf mass below it (+inf if none): the leaves
are shared, so the min tree costs only the internal nodes.

Storage: the whole tree is ONE float32 array, so a jitted call passes one buffer (a call
costs about 1-2 us per argument buffer on CPU) and every write is an in-place scatter into
it. The leaves come first (`[n_0]`, padded to a multiple of 2K); then each internal level
as rows of 2K floats, `[K sums of a sibling group | their K mins]`, so one gather of a row
brings both the sums and the mins of a node's children and one scatter writes a parent's
sum and min. `sums` and `mins` give the per-level views (`sums[0]` the leaves, `sums[l]`
float32 `[n_l]`, `mins[l - 1]` beside `sums[l]`).

Memory: about `1 + 2/(K-1)` float32 per slot (K=8: 1.29, K=16: 1.13, K=32: 1.07), against
2 for a binary sum tree and 4 for binary sum + min trees.

No drift: an update writes the leaves, then recomputes every affected internal node from
its K children, level by level, vectorised over the batch: O(batch * K * log_K capacity).
Internal nodes are therefore always the float32 sum of their children, whatever the
history of updates, unlike trees that add deltas (flashbax issue #52).

Duplicates: when an index occurs several times in one update, its LAST occurrence wins.
Without a sort: the leaves to write are first set to -1, then a scatter-max writes each
occurrence's batch position there (max is order-free, hence deterministic), a gather reads
the winning position back, and only the winners write their values.

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


def level_sizes(capacity: int, branching: int) -> list[int]:
    """Padded length of each level, leaves first; each a multiple of `branching`."""
    sizes, n = [], capacity
    while True:
        nodes = math.ceil(n / branching)
        sizes.append(nodes * branching)
        if nodes == 1:
            return sizes
        n = nodes


def _layout(sizes: tuple, k: int) -> tuple[int, tuple, int]:
    """(leaf region length, start of each internal level in the flat array, total length)."""
    leaf_region = math.ceil(sizes[0] / (2 * k)) * 2 * k
    starts, pos = [], leaf_region
    for s in sizes[1:]:
        starts.append(pos)
        pos += 2 * s
    return leaf_region, tuple(starts), pos


@struct.dataclass
class SumMinTree:
    """A K-ary sum tree and min tree over `capacity` leaves, in one float32 array.

    Attributes:
        flat: float32 `[length]` (leading batch axes allowed under vmap): the leaves, then
            each internal level as rows `[K sums | K mins]` (see the module docstring).
        sizes: static padded length of each level, leaves first (`level_sizes`).
        branching: static K.
    """

    flat: jax.Array
    sizes: tuple = struct.field(pytree_node=False)
    branching: int = struct.field(pytree_node=False)

    def _level(self, level: int, half: int) -> jax.Array:
        k = self.branching
        _, starts, _ = _layout(self.sizes, k)
        n = self.sizes[level]
        start = starts[level - 1]
        batch = self.flat.shape[:-1]
        rows = self.flat[..., start : start + 2 * n].reshape(*batch, n // k, 2 * k)
        return rows[..., half * k : (half + 1) * k].reshape(*batch, n)

    @property
    def sums(self) -> tuple:
        """Per-level node sums: `sums[0]` the leaves `[n_0]`, `sums[l]` `[n_l]`."""
        leaves = self.flat[..., : self.sizes[0]]
        return (leaves,) + tuple(self._level(l, 0) for l in range(1, len(self.sizes)))

    @property
    def mins(self) -> tuple:
        """`mins[l]`, beside `sums[l + 1]`: min positive leaf mass below (+inf if none)."""
        return tuple(self._level(l, 1) for l in range(1, len(self.sizes)))


def init(capacity: int, branching: int = 8) -> SumMinTree:
    """An all-zero tree (every leaf empty: never sampled)."""
    if branching < 2:
        raise ValueError(f"branching must be >= 2, got {branching}.")
    sizes = tuple(level_sizes(capacity, branching))
    leaf_region, _, length = _layout(sizes, branching)
    k = branching
    internal = jnp.tile(
        jnp.concatenate([jnp.zeros((k,), jnp.float32), jnp.full((k,), jnp.inf, jnp.float32)]),
        (length - leaf_region) // (2 * k),
    )
    flat = jnp.concatenate([jnp.zeros((leaf_region,), jnp.float32), internal])
    return SumMinTree(flat=flat, sizes=sizes, branching=branching)


def leaves(tree: SumMinTree) -> jax.Array:
    """float32 `[padded capacity]` leaf masses."""
    return tree.flat[..., : tree.sizes[0]]


def _top(tree: SumMinTree) -> jax.Array:
    """float32 `[..., 2K]`: the top row, `[K sums | K mins]` (no internal level: leaves)."""
    k = tree.branching
    _, starts, length = _layout(tree.sizes, k)
    return tree.flat[..., starts[-1] : length] if starts else None


def total(tree: SumMinTree) -> jax.Array:
    """float32 `[]` total mass."""
    top = _top(tree)
    if top is None:
        return jnp.sum(leaves(tree), axis=-1)
    return jnp.sum(top[..., : tree.branching], axis=-1)


def minimum(tree: SumMinTree) -> jax.Array:
    """float32 `[]` smallest positive leaf mass, +inf if every leaf is zero."""
    top = _top(tree)
    if top is None:  # one level: the leaves are the top
        x = leaves(tree)
        return jnp.min(jnp.where(x > 0, x, jnp.inf), axis=-1)
    return jnp.min(top[..., tree.branching :], axis=-1)


def sort_last_occurrence(
    indices: jax.Array, bound: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Sorts a batch of indices and marks the last occurrence (in batch order) of each.

    (Kept for batches of 2^24 or more, where batch positions are not exact in float32.)

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


def _positive_min(x: jax.Array) -> jax.Array:
    return jnp.min(jnp.where(x > 0, x, jnp.inf), axis=-1)


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
        indices: int32 `[n]` leaves, in `[0, capacity)` where `valid` (others are ignored).
        values: float32 `[n]` new masses, finite and >= 0.
        unique: static; promise that `indices` are distinct (skips the duplicate rule).
        valid: optional bool `[n]`; entries marked False change nothing.

    Returns:
        The new tree. Where an index occurs several times, its LAST occurrence in the
        batch wins; the tree stays the exact sum of its leaves either way.
    """
    chex.assert_rank([indices, values], 1)
    chex.assert_equal_shape([indices, values])
    k, sizes = tree.branching, tree.sizes
    leaf_region, starts, length = _layout(sizes, k)
    n = indices.shape[0]
    indices = indices.astype(jnp.int32)
    values = values.astype(jnp.float32)
    flat = tree.flat
    drop = length  # a scatter index past the array: dropped
    inside = (indices >= 0) & (indices < sizes[0])
    if valid is not None:
        inside = inside & valid
    indices = jnp.where(inside, indices, drop)
    if unique:
        flat = flat.at[indices].set(values, mode="drop", unique_indices=True)
    elif n < 2**24:  # batch positions exact in float32
        positions = jnp.arange(n, dtype=jnp.float32)
        flat = flat.at[indices].set(-1.0, mode="drop")
        flat = flat.at[indices].max(positions, mode="drop")
        winner = flat.at[indices].get(mode="fill", fill_value=-2.0)
        flat = flat.at[jnp.where(winner == positions, indices, drop)].set(values, mode="drop")
    else:
        indices, order, is_last = sort_last_occurrence(indices, drop)
        flat = flat.at[jnp.where(is_last, indices, drop)].set(
            values[order], mode="drop", indices_are_sorted=True
        )
    # Entries that wrote nothing recompute the (harmless) path of leaf 0.
    node = jnp.where(indices < drop, indices, 0)
    for level in range(1, len(sizes)):
        node = node // k  # the parent, at this level; its children are row `node` below
        if level == 1:
            children = flat[:leaf_region].reshape(-1, k)[node]  # [n, K] leaf masses
            new_sum, new_min = children.sum(axis=-1), _positive_min(children)
        else:
            below = starts[level - 2]
            rows = flat[below : starts[level - 1]].reshape(-1, 2 * k)[node]  # [n, 2K]
            new_sum, new_min = rows[:, :k].sum(axis=-1), rows[:, k:].min(axis=-1)
        at = starts[level - 1] + (node // k) * (2 * k) + node % k
        # Duplicate parents write identical values, so the scatter is deterministic.
        flat = flat.at[jnp.concatenate([at, at + k])].set(
            jnp.concatenate([new_sum, new_min]), mode="promise_in_bounds"
        )
    return SumMinTree(flat=flat, sizes=sizes, branching=k)


def rebuild(tree: SumMinTree) -> SumMinTree:
    """Recomputes every internal node from the leaves (O(capacity)); for tests and repair."""
    k, sizes = tree.branching, tree.sizes
    leaf_region, _, _ = _layout(sizes, k)
    parts = [tree.flat[..., :leaf_region]]
    s = tree.flat[..., : sizes[0]]
    m = None
    batch = tree.flat.shape[:-1]
    for level in range(1, len(sizes)):
        below = s.reshape(*batch, -1, k)
        new_s = below.sum(axis=-1)
        new_m = _positive_min(below) if m is None else m.reshape(*batch, -1, k).min(axis=-1)
        pad = [(0, 0)] * len(batch) + [(0, sizes[level] - new_s.shape[-1])]
        s = jnp.pad(new_s, pad)
        m = jnp.pad(new_m, pad, constant_values=jnp.inf)
        rows = jnp.concatenate(
            [s.reshape(*batch, -1, k), m.reshape(*batch, -1, k)], axis=-1
        )
        parts.append(rows.reshape(*batch, -1))
    flat = jnp.concatenate(parts, axis=-1)
    return SumMinTree(flat=flat, sizes=sizes, branching=k)


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
    k, sizes = tree.branching, tree.sizes
    leaf_region, starts, length = _layout(sizes, k)
    flat = tree.flat
    residual = jnp.maximum(targets.astype(jnp.float32), 0.0)
    node = jnp.zeros(targets.shape, jnp.int32)
    lanes = jnp.arange(k, dtype=jnp.int32)
    for level in range(len(sizes) - 1, -1, -1):
        if level == 0:
            children = flat[:leaf_region].reshape(-1, k)[node]  # [n, K]
        else:
            end = starts[level] if level < len(starts) else length
            children = flat[starts[level - 1] : end].reshape(-1, 2 * k)[node, :k]
        # Inclusive prefix sums, sequential over the K lanes (unrolled: K is small and
        # static; XLA fuses it, where cumsum lowers to a slow reduce-window on CPU). Kept
        # sequential: a log-step (Hillis-Steele) scan rounds differently, and with it the
        # Ape-X CartPole test (tests/test_apex.py) no longer reached 475 at its seed.
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
