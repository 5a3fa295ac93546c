"""A ring of preallocated device arrays over a pytree of transitions, packed by rows.

The storage knows nothing of priorities: `uniform.py` and `prioritized.py` put a
sampling rule on top of it. All functions are pure, jit/vmap/shard_map-safe, and take
the state first and return it new (donate it under jit to write in place).

Layout: every transition is one row. Leaves whose bytes fill whole 32-bit words (float32,
int32, a uint8 image of 4k bytes, four bool flags...) are bit-cast into a uint32 `words`
array `[capacity, W]`; the other leaves (a bool flag, three uint8, a float16...) go byte
for byte into a uint8 `tail` array `[capacity, T]`; no padding, so the state holds exactly
the transition bytes. Images live in words because XLA:CPU gathers a `[k, 10, 10, 4]`
uint8 leaf byte by byte, with the row index arithmetic of each byte, while `[k, 100]`
words are gathered a word at a time and bit-cast to bytes; the price is a small reduce in
`add` that packs four bytes into a word.

`add` writes one row block per array (rows with a wide leaf such as an image: one write
per leaf into its columns, see `WIDE_LEAF_WORDS`); with a fixed `add_batch_size` that
divides the capacity no batch crosses the end of the ring, and those writes are
`dynamic_update_slice`s instead of scatters (see `init`). `get` gathers each leaf straight
from its columns (neighbouring columns of the same rows: one cache line for small rows).
A jitted call passes two storage buffers instead of one per leaf, since every argument
buffer of a call has a fixed cost. `StorageState.data` unpacks the whole ring into the
original pytree for inspection.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

PyTree = Any


class LeafSlot(NamedTuple):
    """Where one leaf lives in a row: `count` words (or bytes) from `offset`."""

    shape: tuple
    dtype: str
    in_words: bool  # True: uint32 `words` array; False: uint8 `tail` array
    offset: int
    count: int


class Layout(NamedTuple):
    """Static description of a row (hashable: a static field of the state)."""

    treedef: Any
    slots: tuple  # LeafSlot per leaf, in `jax.tree.leaves` order
    words: int  # W, uint32 per row
    tail: int  # T, bytes per row


def make_layout(example: PyTree) -> Layout:
    """The row layout of transitions shaped like `example` (no batch axis)."""
    leaves, treedef = jax.tree.flatten(example)
    slots, words, tail = [], 0, 0
    for x in leaves:
        shape, dtype = tuple(jnp.shape(x)), jnp.dtype(jnp.result_type(x))
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes % 4 == 0:  # float32, int32, a uint8 image of 4k bytes...: whole words
            slots.append(LeafSlot(shape, dtype.name, True, words, nbytes // 4))
            words += nbytes // 4
        else:
            slots.append(LeafSlot(shape, dtype.name, False, tail, nbytes))
            tail += nbytes
    return Layout(treedef=treedef, slots=tuple(slots), words=words, tail=tail)


def _to_row_part(x: jax.Array, slot: LeafSlot) -> jax.Array:
    """`[n, *shape]` leaf -> uint32 `[n, count]` (words) or uint8 `[n, count]` (tail)."""
    n = x.shape[0]
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    itemsize = jnp.dtype(x.dtype).itemsize
    unit, target = (4, jnp.uint32) if slot.in_words else (1, jnp.uint8)
    if itemsize < unit:  # e.g. uint8 into words: group 4 bytes per word
        x = x.reshape(n, slot.count, unit // itemsize)
        return jax.lax.bitcast_convert_type(x, target)
    return jax.lax.bitcast_convert_type(x, target).reshape(n, slot.count)  # same or wider


def _from_row_part(part: jax.Array, slot: LeafSlot) -> jax.Array:
    """Inverse of `_to_row_part`: `[..., count]` -> `[..., *shape]` of the leaf's dtype."""
    batch = part.shape[:-1]
    dtype = jnp.dtype(slot.dtype)
    unit = 4 if slot.in_words else 1
    if dtype == jnp.bool_:
        if slot.in_words:
            part = jax.lax.bitcast_convert_type(part, jnp.uint8)
        return (part != 0).reshape(*batch, *slot.shape)
    if dtype.itemsize <= unit:
        return jax.lax.bitcast_convert_type(part, dtype).reshape(*batch, *slot.shape)
    part = part.reshape(*batch, -1, dtype.itemsize // unit)
    return jax.lax.bitcast_convert_type(part, dtype).reshape(*batch, *slot.shape)


#: A leaf of at least this many words (a MinAtar image: 100) makes ``add`` write each leaf
#: into its columns with a scatter of its own instead of one scatter of the concatenated
#: row block: concatenating wide leaves copies more than the extra scatters cost. Rows of
#: small leaves only (CartPole) stay one block, where one scatter beats several.
WIDE_LEAF_WORDS = 32


def pack(layout: Layout, transitions: PyTree) -> tuple[jax.Array | None, jax.Array | None]:
    """`[n, ...]` transitions -> (uint32 `[n, W]` or None, uint8 `[n, T]` or None)."""
    leaves = jax.tree.leaves(transitions)
    words = [_to_row_part(x, s) for x, s in zip(leaves, layout.slots, strict=True) if s.in_words]
    tail = [_to_row_part(x, s) for x, s in zip(leaves, layout.slots, strict=True) if not s.in_words]
    return (
        jnp.concatenate(words, axis=-1) if words else None,
        jnp.concatenate(tail, axis=-1) if tail else None,
    )


def unpack(layout: Layout, words: jax.Array | None, tail: jax.Array | None,
           rows: Any = Ellipsis) -> PyTree:
    """Rows `[..., W]` and `[..., T]` -> the transition pytree, leaves `[..., *shape]`.

    With `rows` (e.g. int `[k]` indices) only those rows: each leaf is gathered straight
    from its own columns, with no `[k, W]` intermediate to copy the leaves out of (for
    wide rows that copy costs more than the gather).
    """
    leaves = []
    for s in layout.slots:
        part = words if s.in_words else tail
        leaves.append(_from_row_part(part[rows, s.offset : s.offset + s.count], s))
    return jax.tree.unflatten(layout.treedef, leaves)


@struct.dataclass
class StorageState:
    """Ring storage.

    Attributes:
        words: uint32 `[capacity, W]`, the word-sized leaves of each transition (None if W=0).
        tail: uint8 `[capacity, T]`, the remaining bytes (a bool flag...) (None if T=0).
        insert_pos: int32 `[]`, slot the next item is written to.
        size: int32 `[]`, number of valid items, `<= capacity`.
        layout: static `Layout`: which leaf sits where in a row.
        add_batch_size: static; None, or the one batch size `add` takes (see `init`).
    """

    words: jax.Array | None
    tail: jax.Array | None
    insert_pos: jax.Array
    size: jax.Array
    layout: Layout = struct.field(pytree_node=False)
    add_batch_size: int | None = struct.field(pytree_node=False, default=None)

    @property
    def capacity(self) -> int:
        return (self.words if self.words is not None else self.tail).shape[-2]

    @property
    def data(self) -> PyTree:
        """The whole ring as the example's pytree, every leaf `[capacity, *leaf_shape]`
        (an O(capacity) unpack: for inspection and tests, not for the hot path)."""
        return unpack(self.layout, self.words, self.tail)

    @property
    def data_nbytes(self) -> int:
        """Bytes of transition data the ring holds (capacity times the bytes of one)."""
        return self.capacity * (4 * self.layout.words + self.layout.tail)


def is_concrete(*trees: PyTree) -> bool:
    """True when no leaf of `trees` is a tracer, i.e. values can be checked eagerly."""
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(trees))


def check_add_batch_size(capacity: int, add_batch_size: int | None, who: str = "replay") -> None:
    """Raises a ValueError naming the fix unless `add_batch_size` is None or a positive
    int that divides `capacity`."""
    if add_batch_size is None:
        return
    if isinstance(add_batch_size, bool) or not isinstance(add_batch_size, (int, np.integer)) \
            or add_batch_size < 1:
        raise ValueError(f"{who}: add_batch_size must be a positive int or None, got "
                         f"{add_batch_size!r}.")
    if capacity % add_batch_size:
        below = capacity - capacity % add_batch_size
        raise ValueError(
            f"{who}: capacity {capacity} is not a multiple of add_batch_size "
            f"{add_batch_size}, so a batch would cross the end of the ring; use capacity "
            f"{below or add_batch_size} or {below + add_batch_size}, or add_batch_size=None "
            "(any batch size)."
        )


def init(example: PyTree, capacity: int, add_batch_size: int | None = None) -> StorageState:
    """Preallocates `capacity` zeroed slots shaped like `example` (no batch axis).

    `add_batch_size`: None (the default) lets `add` take any batch size. An int, which
    must divide `capacity`, makes `add` take batches of exactly that size (a ValueError
    otherwise); then every batch starts at a multiple of it and none crosses the end of
    the ring, so `add` writes each array with a `dynamic_update_slice` instead of a
    scatter: a slice write needs no per-row index computation. flashbax fixes its
    `add_batch_size` likewise.
    """
    if not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"capacity must be a positive Python int, got {capacity!r}.")
    check_add_batch_size(capacity, add_batch_size)
    leaves = jax.tree.leaves(example)
    if not leaves:
        raise ValueError("example_transition has no array leaves; pass e.g. a dict of arrays.")
    layout = make_layout(example)
    return StorageState(
        words=jnp.zeros((capacity, layout.words), jnp.uint32) if layout.words else None,
        tail=jnp.zeros((capacity, layout.tail), jnp.uint8) if layout.tail else None,
        insert_pos=jnp.int32(0),
        size=jnp.int32(0),
        layout=layout,
        add_batch_size=None if add_batch_size is None else int(add_batch_size),
    )


def check_batch(state: StorageState, transitions: PyTree) -> int:
    """Static checks of a batch against the storage: structure, dtype, shape, batch size.

    Returns:
        The batch size (a Python int).

    Raises:
        ValueError: naming the mismatch and the fix.
    """
    layout = state.layout
    want_def = layout.treedef
    got_def = jax.tree.structure(transitions)
    if want_def != got_def:
        raise ValueError(
            f"add: transition structure {got_def} does not match the buffer's {want_def}; "
            "pass the same pytree (keys, nesting) as the example given to init."
        )
    capacity = state.capacity
    batch = None
    paths = jax.tree_util.tree_flatten_with_path(transitions)[0]
    for (path, x), slot in zip(paths, layout.slots, strict=True):
        name = jax.tree_util.keystr(path) or "<leaf>"
        x_shape, x_dtype = jnp.shape(x), jnp.result_type(x)
        if x_dtype != jnp.dtype(slot.dtype):
            raise ValueError(
                f"add: leaf {name} has dtype {x_dtype}, the buffer stores {slot.dtype}; "
                f"cast it first, e.g. x.astype(jnp.{slot.dtype})."
            )
        if len(x_shape) != len(slot.shape) + 1 or tuple(x_shape[1:]) != slot.shape:
            raise ValueError(
                f"add: leaf {name} has shape {tuple(x_shape)}, expected [batch, "
                f"*{slot.shape}]; add a leading batch axis (x[None] for one item)."
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
    if state.add_batch_size is not None and batch != state.add_batch_size:
        raise ValueError(
            f"add: batch of {batch} transitions, but the buffer was made with "
            f"add_batch_size={state.add_batch_size}; add batches of exactly that size, or "
            "make the buffer with add_batch_size=None (any batch size)."
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
    layout = state.layout
    indices = (state.insert_pos + jnp.arange(n, dtype=jnp.int32)) % capacity
    aligned = state.add_batch_size is not None  # rows insert_pos .. insert_pos + n - 1

    def write(buf, rows, columns=slice(None)):
        if buf is None:
            return None
        if aligned:
            start = (state.insert_pos, jnp.int32(columns.start or 0))
            return jax.lax.dynamic_update_slice(buf, rows, start)
        return buf.at[indices, columns].set(rows, unique_indices=True)

    if aligned or any(s.in_words and s.count >= WIDE_LEAF_WORDS for s in layout.slots):
        # Wide leaves: each straight into its own columns, with no concatenated row
        # block to build (see WIDE_LEAF_WORDS). Slice writes go leaf by leaf for every
        # row: each is a plain copy into a contiguous column range, and the row block
        # is never materialised.
        words, tail = state.words, state.tail
        for x, s in zip(jax.tree.leaves(transitions), layout.slots, strict=True):
            columns = slice(s.offset, s.offset + s.count)
            if s.in_words:
                words = write(words, _to_row_part(x, s), columns)
            else:
                tail = write(tail, _to_row_part(x, s), columns)
    else:
        words, tail = pack(layout, transitions)  # one row block per array
        words, tail = write(state.words, words), write(state.tail, tail)
    new = StorageState(
        words=words,
        tail=tail,
        layout=state.layout,
        add_batch_size=state.add_batch_size,
        insert_pos=((state.insert_pos + n) % capacity).astype(jnp.int32),
        size=jnp.minimum(state.size + n, capacity).astype(jnp.int32),
    )
    return new, indices


def get(state: StorageState, indices: jax.Array) -> PyTree:
    """Gathers the transitions at `indices` (int `[k]`): every leaf `[k, *leaf_shape]`."""
    chex.assert_rank(indices, 1)
    return unpack(state.layout, state.words, state.tail, indices)


def can_sample(state: StorageState, batch_size: int) -> jax.Array:
    """bool `[]`: at least `batch_size` items are stored (traceable)."""
    return state.size >= batch_size
