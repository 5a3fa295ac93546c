"""A K-ary sum tree (with a min tree beside it), vectorised over a batch, without drift.

Levels: level 0 holds the leaf masses (p^alpha), padded with zeros to a multiple of the
branching factor K; node j of level l + 1 is the sum of nodes `j*K .. j*K + K - 1` of level
l; the last level has at most K nodes, padded to K, and their sum is the total mass. Beside
each internal node sits the minimum positive leaf mass below it (+inf if none): the leaves
are shared, so the min tree costs only the internal nodes.

Storage: the whole tree is ONE float32 array, so a jitted call passes one buffer (each
argument buffer adds a fixed cost to a call) and every write is an in-place scatter into
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
history of updates, unlike trees that add deltas (flashbax issue #52). The sum is a
written-out left fold `((c0 + c1) + c2) + ...`, so a node has the same bits whether it was
recomputed on a path, densely (the small top levels, whose children number at most
`DENSE_CHILDREN`, are recomputed whole: one fused pass instead of a gather and a scatter
per level) or by `rebuild`.

Duplicates: when an index occurs several times in one update, its LAST occurrence wins.
Without a sort: each occurrence writes the tag `-1 - batch position` with a scatter-min
(below any mass; min is order-free, hence deterministic), a gather reads the winning tag
back, and only the occurrence that finds its own tag writes its value.

Search: a target mass descends from the top; at each level it picks the first child whose
cumulative mass exceeds the residual target. If rounding leaves the residual at or past
the children's total, the search clamps to the last child with positive mass, so a search
can only end on a leaf with positive mass (when the total is positive). The levels run in
a `fori_loop`: on CPU an unrolled descent gets fused into a few kernels that recompute all
the levels above, which is slower than a few small kernels per level.
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
        levels = range(1, len(self.sizes))
        return (leaves,) + tuple(self._level(level, 0) for level in levels)

    @property
    def mins(self) -> tuple:
        """`mins[l]`, beside `sums[l + 1]`: min positive leaf mass below (+inf if none)."""
        return tuple(self._level(level, 1) for level in range(1, len(self.sizes)))


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
    return _fold_min(jnp.where(x > 0, x, jnp.inf))


def _fold_min(x: jax.Array) -> jax.Array:
    """Min over the last axis (K, static), written out: elementwise, so XLA fuses it with
    its neighbours instead of emitting a separate reduce kernel over a copied slice."""
    least = x[..., 0]
    for j in range(1, x.shape[-1]):
        least = jnp.minimum(least, x[..., j])
    return least


def _fold_sum(x: jax.Array) -> jax.Array:
    """Sum over the last axis (K, static and small) as a left fold `((x0 + x1) + x2) + ...`.

    Written out rather than `jnp.sum`: XLA picks the association of a reduce by shape and
    fusion context, so a gathered `[n, K]` reduce and a dense `[m, K]` reduce can differ in
    the last bit; the fold is the same wherever it runs, so incremental updates and
    `rebuild` agree exactly.
    """
    total = x[..., 0]
    for j in range(1, x.shape[-1]):
        total = total + x[..., j]
    return total


# Levels whose children number at most this are recomputed whole (one fused pass over
# <= 2 * DENSE_CHILDREN floats) instead of per path (a gather and a scatter per level).
DENSE_CHILDREN = 4096


def _dense_from(sizes: tuple) -> int:
    """First internal level recomputed densely by `update` (len(sizes) if none)."""
    for level in range(1, len(sizes)):
        if sizes[level - 1] <= DENSE_CHILDREN:
            return level
    return len(sizes)


def _levels_from(flat: jax.Array, sizes: tuple, k: int, first: int) -> jax.Array:
    """The flat rows of internal levels `first ..` recomputed from level `first - 1`.

    Args:
        flat: float32 `[..., length]` tree storage (leading batch axes allowed).
        sizes: static level sizes; k: static branching; first: static level >= 1.

    Returns:
        float32 `[..., length - start of level first]`: each level as `[K sums | K mins]`
        rows, padded nodes 0 (sum) and +inf (min), ready to write at the level's start.
    """
    _, starts, _ = _layout(sizes, k)
    batch = flat.shape[:-1]
    if first == 1:
        s = flat[..., : sizes[0]]
        m = None
    else:
        rows = flat[..., starts[first - 2] : starts[first - 1]].reshape(*batch, -1, 2, k)
        s = rows[..., 0, :].reshape(*batch, -1)
        m = rows[..., 1, :].reshape(*batch, -1)
    parts = []
    for level in range(first, len(sizes)):
        below_s = s.reshape(*batch, -1, k)
        new_s = _fold_sum(below_s)
        new_m = _positive_min(below_s) if m is None else _fold_min(m.reshape(*batch, -1, k))
        pad = [(0, 0)] * len(batch) + [(0, sizes[level] - new_s.shape[-1])]
        s = jnp.pad(new_s, pad)
        m = jnp.pad(new_m, pad, constant_values=jnp.inf)
        rows = jnp.concatenate([s.reshape(*batch, -1, k), m.reshape(*batch, -1, k)], axis=-1)
        parts.append(rows.reshape(*batch, -1))
    return jnp.concatenate(parts, axis=-1)


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
        # Tag each occurrence with -1 - position (< 0 <= any mass); a scatter-min leaves
        # the tag of the last occurrence (min is order-free: deterministic); only the
        # occurrence that reads its own tag back writes its value.
        tags = -1.0 - jnp.arange(n, dtype=jnp.float32)
        flat = flat.at[indices].min(tags, mode="drop")
        seen = flat.at[indices].get(mode="fill", fill_value=0.0)
        flat = flat.at[jnp.where(seen == tags, indices, drop)].set(values, mode="drop")
    else:
        indices, order, is_last = sort_last_occurrence(indices, drop)
        flat = flat.at[jnp.where(is_last, indices, drop)].set(
            values[order], mode="drop", indices_are_sorted=True
        )
    # Entries that wrote nothing recompute the (harmless) path of leaf 0. Unsigned index
    # arithmetic: a signed floor division costs XLA a dozen ops per level and per element.
    leaf = jnp.where(indices < drop, indices, 0).astype(jnp.uint32)
    dense = _dense_from(sizes)
    for level in range(1, dense):
        node = leaf // (k**level)  # the parent at this level; its children are row `node` below
        if level == 1:
            children = flat[:leaf_region].reshape(-1, k)[node]  # [n, K] leaf masses
            new_sum, new_min = _fold_sum(children), _positive_min(children)
        else:
            rows = flat[starts[level - 2] : starts[level - 1]].reshape(-1, 2, k)[node]
            new_sum, new_min = _fold_sum(rows[:, 0]), _fold_min(rows[:, 1])  # [n]
        # One scatter writes the parent's sum and min: flat viewed as [rows, 2, K].
        row = starts[level - 1] // (2 * k) + node // k
        # Duplicate parents write identical values, so the scatter is deterministic.
        flat = (
            flat.reshape(-1, 2, k)
            .at[row, :, node % k]
            .set(jnp.stack([new_sum, new_min], axis=-1), mode="promise_in_bounds")
            .reshape(-1)
        )
    if dense < len(sizes):
        # A scatter, not a dynamic-update-slice: XLA writes a scatter in place after its
        # updates have read the level below, where it copies the whole array for a DUS.
        top = _levels_from(flat, sizes, k, dense)
        at = starts[dense - 1] + jnp.arange(top.shape[-1], dtype=jnp.int32)
        flat = flat.at[at].set(top, mode="promise_in_bounds", unique_indices=True,
                               indices_are_sorted=True)
    return SumMinTree(flat=flat, sizes=sizes, branching=k)


def rebuild(tree: SumMinTree) -> SumMinTree:
    """Recomputes every internal node from the leaves (O(capacity)); for tests and repair."""
    k, sizes = tree.branching, tree.sizes
    leaf_region, _, _ = _layout(sizes, k)
    if len(sizes) == 1:
        return tree
    flat = jnp.concatenate(
        [tree.flat[..., :leaf_region], _levels_from(tree.flat, sizes, k, 1)], axis=-1
    )
    return SumMinTree(flat=flat, sizes=sizes, branching=k)


def _descend(
    tree: SumMinTree, targets: jax.Array, after: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """`(leaf indices int32 [n], their masses float32 [n])` for `find`.

    One `fori_loop` step per level, top to leaves: the loop carry (node, residual) is the
    only thing a level hands the next, so XLA emits a few small kernels per level instead
    of inlining the whole descent into each level's gather (which it does when the levels
    are unrolled). The leaf's mass is read once after the loop rather than carried: a
    third carried array costs each level another kernel (XLA:CPU fuses each output of the
    level separately) and a copy, and packing the carry into one `[3, n]` array makes one
    kernel compute the child choice once per row.

    `after` (float32 `[]`, optional) enters the first node index as `_zero_after(after)`:
    it only makes the search, and so anything that uses its indices, come after `after`
    (see `find_with_mass`).
    """
    k, sizes = tree.branching, tree.sizes
    _, starts, _ = _layout(sizes, k)
    top_down = range(len(sizes) - 1, -1, -1)
    # The i-th level from the top has its rows at `bases[i]` in the flat array,
    # `strides[i]` apart.
    bases = jnp.asarray([starts[lv - 1] if lv else 0 for lv in top_down], jnp.int32)
    strides = jnp.asarray([2 * k if lv else k for lv in top_down], jnp.int32)
    flat = tree.flat
    # Each node's K children are one contiguous slice: gather n slices of K floats (one
    # start index each) rather than n * K single floats (K computed indices each).
    rows = jax.lax.GatherDimensionNumbers(
        offset_dims=(1,), collapsed_slice_dims=(), start_index_map=(0,)
    )
    promise = jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS

    def level(i, carry):
        """carry `[n]` each: node at the level above, residual mass below it."""
        node, residual = carry
        start = bases[i] + node * strides[i]  # in range: node < the level's node count
        children = jax.lax.gather(flat, start[:, None], rows, slice_sizes=(k,), mode=promise)
        c = [children[:, j] for j in range(k)]  # [n] each
        # Inclusive prefix sums, sequential over the K lanes: the same left fold as
        # `_fold_sum`, so the last prefix is the parent's stored sum bit for bit (a
        # log-step scan would round differently).
        cumulative = [c[0]]
        for j in range(1, k):
            cumulative.append(cumulative[-1] + c[j])
        # The first child whose prefix passes the residual. Prefix sums of masses >= 0
        # never decrease, and a prefix that passes the residual where the one before did
        # not has grown, so that child has positive mass; the prefixes at or below the
        # residual are a run from lane 0, so their count is the first child past it.
        first = sum((p <= residual).astype(jnp.int32) for p in cumulative)
        last_positive = jnp.zeros_like(node)
        for j in range(1, k):
            last_positive = jnp.where(c[j] > 0, j, last_positive)
        # Rounding can leave the residual at or past the children's total: clamp.
        child = jnp.where(first < k, first, last_positive)
        before = jnp.zeros_like(residual)
        for j in range(1, k):
            before = jnp.where(child == j, cumulative[j - 1], before)
        return node * k + child, jnp.maximum(residual - before, 0.0)

    residual = jnp.maximum(targets.astype(jnp.float32), 0.0)
    # `zeros_like(residual)`: under shard_map the initial carry must vary over the same
    # mesh axes as the carry the levels return (which follows the targets).
    node = jnp.zeros_like(residual, jnp.int32)
    if after is not None:
        node = node + _zero_after(jnp.asarray(after))
    leaf, _ = jax.lax.fori_loop(0, len(sizes), level, (node, residual))
    mass = jax.lax.gather(flat, leaf[:, None], rows, slice_sizes=(1,), mode=promise)[:, 0]
    # The indices come after this read of the tree too, so an update at them (sample then
    # update_priorities in one program) can write the tree in place.
    return leaf + _zero_after(mass), mass


def _zero_after(x: jax.Array) -> jax.Array:
    """int32 zeros shaped like `x` that XLA must compute from `x` (`x < 0 and x > 0` is
    false for every float, NaN included, and XLA does not fold it): an ordering edge.

    XLA:CPU orders the reads and in-place writes of a buffer by data dependence alone.
    """
    return ((x < 0) & (x > 0)).astype(jnp.int32)


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
    return _descend(tree, targets)[0]


def find_with_mass(
    tree: SumMinTree, targets: jax.Array, after: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """`find`, and the mass of each leaf found (float32 `[n]`), from the same descent.

    `after`: a float32 `[]` value computed from the tree (e.g. `minimum(tree)`) that must be
    read before any update that uses the indices found. XLA:CPU orders buffer reads by data
    dependence only: a read of the tree that the indices do not depend on, followed in the
    same program by an in-place update at those indices (sample then update_priorities
    inside one `lax.scan`), makes it copy the whole tree, twice, every iteration.
    """
    chex.assert_rank(targets, 1)
    return _descend(tree, targets, after)
