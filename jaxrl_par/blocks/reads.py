"""Which leaves of a pytree a function computes with, read from its jaxpr, and the tree
without the others: what the policy export keeps of a state and what the host loop's
lagged acting copies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.extend.core
import numpy as np


def leaves_read(fn: Callable, tree: Any, *args) -> tuple[bool, ...]:
    """For each leaf of ``tree`` (``jax.tree.leaves`` order), whether ``fn(tree, *args)``
    computes with it: whether an equation or an output of its jaxpr reads it. Traced on
    the leaves' shapes alone (nothing runs); a leaf passed whole into an inner ``jit``
    counts as read."""
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), tree)
    jaxpr = jax.make_jaxpr(fn)(shapes, *args).jaxpr
    read = {v for eqn in jaxpr.eqns for v in eqn.invars
            if not isinstance(v, jax.extend.core.Literal)}
    read |= {v for v in jaxpr.outvars if not isinstance(v, jax.extend.core.Literal)}
    return tuple(v in read for v in jaxpr.invars[:len(jax.tree.leaves(tree))])


def pruned(tree: Any, read: tuple[bool, ...] | list[bool]) -> Any:
    """``tree`` with ``None`` for each leaf ``read`` marks False (:func:`leaves_read`): a
    function that does not compute with those leaves takes the pruned tree as well, and
    the pruned tree holds (and moves between devices) only the rest."""
    leaves, treedef = jax.tree.flatten(tree)
    return jax.tree.unflatten(treedef, [x if r else None
                                        for x, r in zip(leaves, read, strict=True)])
