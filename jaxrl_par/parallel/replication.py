"""Checks that data-parallel replicas did not diverge (Brax's ``assert_is_replicated``).

In the ``[S, D, ...]`` layout of :mod:`jaxrl_par.parallel.data_parallel` the model
(parameters, optimizer state, normaliser statistics) is held once per data shard and
must stay bit-identical: every shard applies the same averaged gradient. A difference
means a missing ``pmean`` or a non-deterministic reduction, and is reported with the
leaf, the seed and the size of the difference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

# Fields of a training state that every data shard must hold identically.
REPLICATED_FIELDS = ("params", "opt_state", "target_params", "obs_stats", "reward_stats")


class ReplicationError(AssertionError):
    """Data-parallel replicas of a leaf that must be replicated differ."""


def _name(entry) -> str:
    for attr in ("name", "key", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def select_fields(fields: Sequence[str] = REPLICATED_FIELDS) -> Callable[[tuple], bool]:
    """A leaf selector: True for leaves under any of ``fields`` in their key path."""
    wanted = set(fields)
    return lambda path: any(_name(e) in wanted for e in path)


def _spread(x: jax.Array) -> jax.Array:
    """``[S]`` max |x - x[:, 0]| over data shards (0 where replicated; NaN==NaN)."""
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    x = x.astype(jnp.float32)
    ref = x[:, :1]
    same = (x == ref) | (jnp.isnan(x) & jnp.isnan(ref))
    one_nan = jnp.isnan(x) | jnp.isnan(ref)  # NaN against a number: infinitely apart
    diff = jnp.where(same, 0.0, jnp.where(one_nan, jnp.inf, jnp.abs(x - ref)))
    return jnp.max(diff.reshape(x.shape[0], -1), axis=1)


def replica_spread(state, select: Callable[[tuple], bool] | None = None) -> dict[str, np.ndarray]:
    """``path -> [S]`` largest difference between data shards, for the selected leaves.

    Runs on the devices (works when the state spans several processes) and returns
    host arrays on every process.
    """
    select = select or select_fields()
    flat = [(jax.tree_util.keystr(p), x) for p, x in
            jax.tree_util.tree_flatten_with_path(state)[0] if select(p)]
    if not flat:
        return {}
    spreads = jax.jit(lambda xs: [_spread(x) for x in xs])([x for _, x in flat])
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        spreads = multihost_utils.process_allgather(spreads, tiled=True)
    return {name: np.asarray(s) for (name, _), s in zip(flat, spreads, strict=True)}


def assert_is_replicated(
    state, select: Callable[[tuple], bool] | None = None, atol: float = 0.0, where: str = ""
) -> None:
    """Raises :class:`ReplicationError` if selected leaves differ across data shards.

    Args:
      state: a ``[S, D, ...]`` training state.
      select: ``select(key_path) -> bool`` picks the leaves that must be replicated;
        default: leaves under ``params``, ``opt_state``, ``target_params``, ``obs_stats``,
        ``reward_stats``.
      atol: allowed absolute difference (0: bit-identical, what synchronous SGD gives).
      where: text added to the message, e.g. ``"after update 120"``.
    """
    bad = {k: v for k, v in replica_spread(state, select).items() if np.max(v) > atol}
    if bad:
        lines = [f"  state{k}: max |difference| {float(np.max(v)):.3g} (seed index "
                 f"{int(np.argmax(v))})" for k, v in sorted(bad.items())[:8]]
        raise ReplicationError(
            f"data-parallel replicas diverged{' ' + where if where else ''}: "
            f"{len(bad)} leaf/leaves that must be identical on every data shard differ:\n"
            + "\n".join(lines)
            + "\nThe algorithm must average gradients (and any statistics it keeps) over "
            "its axis_name with jaxrl_par.axes.pmean."
        )
