"""Records shared by the uniform and prioritized buffers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax

PyTree = Any


class Sample(NamedTuple):
    """A sampled batch.

    Attributes:
        indices: int32 `[batch]` slots (pass them back to `update_priorities`).
        transitions: the stored pytree, every leaf `[batch, *leaf_shape]`.
        probabilities: float32 `[batch]` probability P(i) of drawing each slot.
        weights: float32 `[batch]` importance weights `(N P(i))^-beta / max_j (N P(j))^-beta`.
    """

    indices: jax.Array
    transitions: PyTree
    probabilities: jax.Array
    weights: jax.Array


@dataclasses.dataclass(frozen=True)
class Buffer:
    """A replay buffer as pure functions (optax style); state is always the first argument.

    Being pure, `add` and `update_priorities` called outside jit leave the old state intact,
    so each call copies the whole buffer: O(capacity) work for a batch of any size. Call
    them inside your own jitted step (as the algorithms do), or jit them with the state
    donated, which writes in place (O(batch) work)::

        add = jax.jit(buf.add, donate_argnums=0)
        state = add(state, transitions)  # the `state` passed in is consumed

    Attributes:
        init: `(example_transition) -> state`.
        add: `(state, transitions, priorities=None) -> state`.
        sample: `(state, key, batch_size, beta=0.4) -> Sample`; `batch_size` a Python int.
        update_priorities: `(state, indices, priorities) -> state`.
        can_sample: `(state, batch_size) -> bool []`.
        total_priority: `(state) -> float32 []`, sum of p^alpha (size for uniform).
        min_priority: `(state) -> float32 []`, least positive p^alpha (1 for uniform).
        find: `(state, targets) -> int32 [k]`, slots holding cumulative masses `targets`.
        sample_at: `(state, targets, beta, total=None, min_priority=None, size=None)
            -> Sample`, a sample for given target masses (global stratification).
        capacity: number of slots.
    """

    init: Callable[..., Any]
    add: Callable[..., Any]
    sample: Callable[..., Sample]
    update_priorities: Callable[..., Any]
    can_sample: Callable[..., jax.Array]
    total_priority: Callable[..., jax.Array]
    min_priority: Callable[..., jax.Array]
    find: Callable[..., jax.Array]
    sample_at: Callable[..., Sample]
    capacity: int
