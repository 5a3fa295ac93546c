"""Running statistics (parallel Welford) of observations or returns, reducible over a
device axis."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_par import axes


@struct.dataclass
class RunningStats:
    mean: jax.Array  # [*shape] float32
    var: jax.Array  # [*shape] float32
    count: jax.Array  # [] float32: number of samples seen (1e-4 prior)


def init_stats(shape) -> RunningStats:
    return RunningStats(jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32),
                        jnp.float32(1e-4))


def update_stats(stats: RunningStats, x: jax.Array, axis_name: str | None = None) -> RunningStats:
    """Folds a batch ``x [..., *shape]`` into ``stats`` (Chan et al. parallel update).

    With ``axis_name`` the batch is the union of all shards' batches, so every shard
    ends with the same statistics as one device seeing the whole batch.
    """
    x = x.astype(jnp.float32)  # uint8 observations: no integer overflow in the square
    batch_axes = tuple(range(x.ndim - stats.mean.ndim))
    n_local = jnp.float32(jnp.prod(jnp.array([x.shape[a] for a in batch_axes])))
    mean_local = jnp.mean(x, axis=batch_axes)
    sq_local = jnp.mean(jnp.square(x), axis=batch_axes)
    batch_mean = axes.pmean(mean_local, axis_name)
    batch_var = axes.pmean(sq_local, axis_name) - jnp.square(batch_mean)
    n = n_local * axes.axis_size(axis_name)
    delta = batch_mean - stats.mean
    total = stats.count + n
    mean = stats.mean + delta * n / total
    m2 = stats.var * stats.count + batch_var * n + jnp.square(delta) * stats.count * n / total
    return RunningStats(mean, m2 / total, total)


def normalize(stats: RunningStats, x: jax.Array, clip: float = 10.0) -> jax.Array:
    return jnp.clip((x - stats.mean) / jnp.sqrt(stats.var + 1e-8), -clip, clip)


def scale(stats: RunningStats, x: jax.Array, clip: float = 10.0) -> jax.Array:
    """``x`` divided by the running std, not centred (rewards keep their sign), clipped."""
    return jnp.clip(x / jnp.sqrt(stats.var + 1e-8), -clip, clip)


def init_reward_scaling(on: bool, num_envs: int
                        ) -> tuple[RunningStats | None, jax.Array | None]:
    """``(stats, discounted_return [num_envs])`` for :func:`scale_rewards` at the start of
    a run, or ``(None, None)`` when rewards are not scaled (no leaves in the state)."""
    if not on:
        return None, None
    return init_stats(()), jnp.zeros(num_envs)


def scale_rewards(stats: RunningStats, discounted_return: jax.Array, reward: jax.Array,
                  done: jax.Array, gamma, axis_name: str | None = None
                  ) -> tuple[jax.Array, RunningStats, jax.Array]:
    """Rewards divided by the running std of each env's discounted return (gym's
    NormalizeReward, as CleanRL's and PureJaxRL's continuous PPO use), so values are of
    order 1 whatever the reward scale.

    Args:
      stats: the statistics of the discounted returns so far (shape ``[]``).
      discounted_return: ``[N]`` each env's running return, carried between rollouts.
      reward, done: ``[T, N]`` a rollout's rewards and episode ends.
      gamma: the discount of the running returns.
      axis_name: a data axis over which ``N`` is sharded (statistics over all shards).

    Returns:
      ``(reward / std [T, N], stats, discounted_return [N])``: the returns of every step
      (reset where an episode ends) folded into the statistics first, then used.
    """
    def step(ret, x):
        r, d = x
        ret = ret * gamma + r
        return jnp.where(d, 0.0, ret), ret

    last, returns = jax.lax.scan(step, discounted_return, (reward, done))
    stats = update_stats(stats, returns, axis_name)
    return scale(stats, reward), stats, last
