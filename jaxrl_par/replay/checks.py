"""Argument checks shared by the buffers: static ones always, value ones when concrete.

Inside jit (tracers) value checks cannot raise; the buffers then apply the NaN-safe rule
documented in `prioritized.py`: a priority that is NaN, infinite or negative counts as 0
(never sampled), and an index outside `[0, size)` is ignored.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par.replay.storage import is_concrete


def check_batch_size(batch_size: int) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise ValueError(
            f"sample: batch_size must be a Python int (static), got {type(batch_size).__name__}; "
            "mark it static, e.g. jax.jit(f, static_argnums=...)."
        )
    if batch_size < 1:
        raise ValueError(f"sample: batch_size must be >= 1, got {batch_size}.")


def check_not_empty(size: jax.Array, where: str = "sample") -> None:
    """Raises when a concrete buffer holds nothing."""
    if is_concrete(size) and np.ndim(size) == 0 and int(size) == 0:
        raise ValueError(
            f"{where}: the buffer is empty; add transitions first "
            "(guard with buf.can_sample(state, batch_size))."
        )


def check_priorities(priorities: jax.Array, n: int, where: str) -> jax.Array:
    """Static shape check; value check when concrete. Returns float32 `[n]`."""
    shape = jnp.shape(priorities)
    if len(shape) != 1 or shape[0] != n:
        raise ValueError(
            f"{where}: priorities have shape {tuple(shape)}, expected [{n}] "
            "(one per transition/index)."
        )
    if not jnp.issubdtype(jnp.result_type(priorities), jnp.number):
        raise ValueError(f"{where}: priorities must be numeric, got {jnp.result_type(priorities)}.")
    if is_concrete(priorities):
        p = np.asarray(priorities, dtype=np.float64)
        bad = ~np.isfinite(p) | (p < 0)
        if bad.any():
            first = int(np.argmax(bad))
            raise ValueError(
                f"{where}: priorities must be finite and >= 0, got {p[first]} at position "
                f"{first} ({int(bad.sum())} bad); use e.g. jnp.abs(td_error) + 1e-6 and "
                "replace NaNs (jnp.nan_to_num) before passing them."
            )
    return jnp.asarray(priorities, jnp.float32)


def check_indices(indices: jax.Array, n: int | None, size: jax.Array, where: str) -> jax.Array:
    """Static rank/dtype check; range check against `size` when both are concrete."""
    shape = jnp.shape(indices)
    if len(shape) != 1 or (n is not None and shape[0] != n):
        want = f"[{n}]" if n is not None else "[k]"
        raise ValueError(
            f"{where}: indices have shape {tuple(shape)}, expected {want}, "
            "matching the priorities."
        )
    if not jnp.issubdtype(jnp.result_type(indices), jnp.integer):
        raise ValueError(
            f"{where}: indices must be integers, got {jnp.result_type(indices)}; "
            "pass sample.indices."
        )
    if is_concrete(indices, size) and np.asarray(size).ndim == 0:
        i, s = np.asarray(indices), int(size)
        bad = (i < 0) | (i >= s)
        if bad.any():
            raise ValueError(
                f"{where}: index {int(i[np.argmax(bad)])} is outside the {s} stored items "
                f"[0, {s}); pass indices from buf.sample."
            )
    return jnp.asarray(indices, jnp.int32)


def sanitize(priorities: jax.Array) -> jax.Array:
    """The in-jit rule: NaN, infinite or negative priorities count as 0."""
    ok = jnp.isfinite(priorities) & (priorities >= 0)
    return jnp.where(ok, priorities, 0.0).astype(jnp.float32)
