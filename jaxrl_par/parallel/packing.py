"""Pack a pytree into one flat array per dtype, for cheap transfers between devices.

Moving a pytree with ``jax.device_put`` costs a dispatch from Python per leaf, so a tree
of many small leaves can cost more to send than a small update takes to run.
:func:`packer` gives the two pure functions that turn such a tree into a few flat arrays
(one per dtype, leaves in tree order, raveled) and back, to be called inside the compiled
programs on either side of a transfer. Typed PRNG keys cannot be concatenated with plain
arrays and are passed through as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def is_key(x) -> bool:
    """True for a typed PRNG key array, or its ``jax.ShapeDtypeStruct`` (a leaf of an
    abstract template): packed, and checkpointed, as its key data."""
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


Packed = tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]]  # (flat per dtype, keys)


def packer(template: Any) -> tuple[Callable[[Any], Packed], Callable[[Packed], Any]]:
    """``(pack, unpack)`` for trees with ``template``'s structure, shapes and dtypes.

    ``template``: a pytree of arrays or ``jax.ShapeDtypeStruct`` (unbatched: ``vmap`` the
    two functions for a batch axis). ``pack(tree) -> (flats, keys)``: ``flats`` holds one
    1-D array per dtype (in the order the dtypes first appear in the tree), the raveled
    leaves of that dtype concatenated in tree order; ``keys`` the typed key leaves.
    ``unpack(pack(tree))`` equals ``tree`` exactly.
    """
    leaves, treedef = jax.tree.flatten(template)
    shapes = [tuple(x.shape) for x in leaves]
    key_slots = [i for i, x in enumerate(leaves) if is_key(x)]
    groups: dict[Any, list[int]] = {}
    for i, x in enumerate(leaves):
        if not is_key(x):
            groups.setdefault(jnp.dtype(x.dtype), []).append(i)

    def pack(tree: Any) -> Packed:
        got, got_def = jax.tree.flatten(tree)
        if got_def != treedef:
            raise ValueError(f"pack: tree structure {got_def} is not the template's {treedef}")
        flats = tuple(jnp.concatenate([jnp.ravel(got[i]) for i in slots])
                      for slots in groups.values())
        return flats, tuple(got[i] for i in key_slots)

    def unpack(packed: Packed) -> Any:
        flats, keys = packed
        out: list[Any] = [None] * len(leaves)
        for flat, slots in zip(flats, groups.values(), strict=True):
            offset = 0
            for i in slots:
                size = math.prod(shapes[i])
                out[i] = flat[offset:offset + size].reshape(shapes[i])
                offset += size
        for i, key in zip(key_slots, keys, strict=True):
            out[i] = key
        return treedef.unflatten(out)

    return pack, unpack
