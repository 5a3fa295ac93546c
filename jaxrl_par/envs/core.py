"""Vectorised, auto-resetting environments on device.

A :class:`VecEnv` wraps one gymnax-style environment (``step_env``/``reset_env``/
``is_truncated``) and steps ``num_envs`` copies of it with ``jax.vmap``. It keeps
``terminated`` and ``truncated`` apart, returns the observation reached by the step
(``final_obs``) so that learners bootstrap from it on truncation, and tracks the return
and length of every episode on device.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_par import axes
from jaxrl_par.platform import rng

#: From this many copies on, `VecEnv.step` hands the reset keys to the environment as
#: `rng.rolled_keys` (same bits). gymnax's CartPole reset draws 4 uniforms and builds its
#: observation from them; XLA:CPU fused that draw's hash into the observation's
#: concatenation and into the four fusions of the state's components, so each computed
#: it again. As a rolled loop it is computed once: the 4096-env CartPole rollout ran
#: 1.14x faster (1.17x at 256 and 1024 envs; Acrobot, Pendulum and MountainCar
#: 1.10-1.13x at 1024). Below this size the loop's own kernels cost more than they save
#: (0.92x at 4 envs, 1.00x at 64). MinAtar resets draw little: 0.96-1.00x at 256-1024
#: envs. Measured 2026-12-04 (BENCHMARKS.md).
ROLLED_RESET_MIN_ENVS = 128


@struct.dataclass
class EnvState:
    """State of ``num_envs`` environments. Every leaf has a leading ``[N]`` axis."""

    inner: Any  # the wrapped environment's state pytree, leaves [N, ...]
    obs: jax.Array  # [N, *obs_shape] obs_dtype: observation to act on now
    episode_return: jax.Array  # [N] float32: undiscounted return of the running episode
    episode_length: jax.Array  # [N] int32: steps taken in the running episode


class Timestep(NamedTuple):
    """What one vectorised step returns. Every field has a leading ``[N]`` axis.

    ``obs`` is already the first observation of a new episode where ``done``; the
    observation the step actually reached is ``final_obs``. Bootstrap from
    ``final_obs`` on truncation and from zero on termination.
    """

    obs: jax.Array  # [N, *obs_shape] obs_dtype: next observation (after auto-reset)
    reward: jax.Array  # [N] float32
    terminated: jax.Array  # [N] bool: the episode reached a terminal state
    truncated: jax.Array  # [N] bool: cut by a time limit, not terminal (never both)
    final_obs: jax.Array  # [N, *obs_shape] obs_dtype: observation reached, before reset
    episode_return: jax.Array  # [N] float32: return of the episode that ended here, else 0
    episode_length: jax.Array  # [N] int32: length of the episode that ended here, else 0

    @property
    def done(self) -> jax.Array:
        """``[N]`` bool: the episode ended at this step (terminated or truncated)."""
        return self.terminated | self.truncated


@dataclasses.dataclass(frozen=True, eq=False)
class VecEnv:
    """``num_envs`` copies of one environment, stepped together.

    Attributes:
      env_id: registry id, e.g. ``"CartPole-v1"``.
      env: a gymnax ``Environment`` (or any object with the same methods).
      params: its ``EnvParams`` pytree.
      num_envs: number of parallel copies ``N``.
      obs_dtype: dtype of the observations it returns (``"float32"``; ``"uint8"`` for
        MinAtar's 0/1 grids, see ``registry.register``). Networks take either.
    """

    env_id: str
    env: Any
    params: Any
    num_envs: int
    obs_dtype: str = "float32"

    # -- spaces -------------------------------------------------------------------------
    @property
    def observation_shape(self) -> tuple[int, ...]:
        return tuple(self.env.observation_space(self.params).shape)

    @property
    def observation_dtype(self) -> jnp.dtype:
        """The dtype of ``obs`` and ``final_obs``."""
        return jnp.dtype(self.obs_dtype)

    @property
    def discrete(self) -> bool:
        """True when actions are integers in ``[0, num_actions)``."""
        return not hasattr(self.env.action_space(self.params), "low")

    @property
    def num_actions(self) -> int:
        """Number of discrete actions; the action dimension for continuous control."""
        space = self.env.action_space(self.params)
        if self.discrete:
            return int(space.n)
        return int(space.shape[0]) if space.shape else 1

    @property
    def action_shape(self) -> tuple[int, ...]:
        return () if self.discrete else tuple(self.env.action_space(self.params).shape)

    @property
    def action_bounds(self) -> tuple[jax.Array, jax.Array]:
        """``(low, high)`` of a continuous action space, broadcast to ``action_shape``."""
        space = self.env.action_space(self.params)
        shape = self.action_shape
        low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), shape)
        high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), shape)
        return low, high

    @functools.cached_property
    def step_uses_key(self) -> bool:
        """Whether the environment's ``step_env`` reads its key (from its jaxpr: the key
        feeds some operation or an output). CartPole, Pendulum and the Breakout and
        SpaceInvaders MinAtar games do not; Acrobot, Asterix and Freeway do. Where it
        does not, `step` hashes only the reset keys: the 4096-env CartPole rollout ran
        1.05x faster (BENCHMARKS.md, 2026-12-04), with the same episodes."""
        key = jax.random.key(0)
        _, inner = jax.eval_shape(self.env.reset_env, key, self.params)
        dtype = jnp.int32 if self.discrete else jnp.float32
        action = jax.ShapeDtypeStruct(self.action_shape, dtype)
        jaxpr = jax.make_jaxpr(
            lambda k, s, a: self.env.step_env(k, s, a, self.params))(key, inner, action).jaxpr
        key_var = jaxpr.invars[0]
        return (any(v is key_var for eqn in jaxpr.eqns for v in eqn.invars)
                or any(v is key_var for v in jaxpr.outvars))

    # -- dynamics -----------------------------------------------------------------------
    def reset(self, keys: jax.Array) -> EnvState:
        """Resets all copies.

        Args:
          keys: ``[N]`` PRNG keys, one per copy (see ``jaxrl_par.axes.shard_keys``).
        """
        chex.assert_shape(keys, (self.num_envs,) + keys.shape[1:])
        obs, inner = jax.vmap(self.env.reset_env, in_axes=(0, None))(keys, self.params)
        zeros = jnp.zeros((self.num_envs,), jnp.float32)
        return EnvState(
            inner=inner,
            obs=obs.astype(self.observation_dtype),
            episode_return=zeros,
            episode_length=jnp.zeros((self.num_envs,), jnp.int32),
        )

    def step(self, keys: jax.Array, state: EnvState, action: jax.Array) -> tuple[EnvState, Timestep]:
        """Steps all copies by one action each, resetting those whose episode ended.

        Args:
          keys: ``[N]`` PRNG keys.
          state: current :class:`EnvState`.
          action: ``[N, *action_shape]`` actions.

        Returns:
          ``(next_state, timestep)``.
        """
        chex.assert_shape(action, (self.num_envs,) + self.action_shape)
        if self.step_uses_key:
            pairs = rng.split_each(keys)  # [N, 2]: each copy's step and reset keys
            k_step, k_reset = pairs[:, 0], pairs[:, 1]
        else:  # the same reset keys, without hashing the step keys nobody reads
            k_step, k_reset = keys, rng.split_each(keys, index=1)
        if self.num_envs >= ROLLED_RESET_MIN_ENVS:
            k_reset = rng.rolled_keys(k_reset)
        obs, inner, final_obs, reward, terminated, truncated = jax.vmap(self._step_one)(
            k_step, k_reset, state.inner, action
        )
        done = terminated | truncated
        ep_return = state.episode_return + reward
        ep_length = state.episode_length + 1
        timestep = Timestep(
            obs=obs,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            episode_return=jnp.where(done, ep_return, 0.0),
            episode_length=jnp.where(done, ep_length, 0),
        )
        next_state = EnvState(
            inner=inner,
            obs=obs,
            episode_return=jnp.where(done, 0.0, ep_return),
            episode_length=jnp.where(done, 0, ep_length),
        )
        return next_state, timestep

    def _step_one(self, key_step, key_reset, inner, action):
        """One copy: step, then reset where the episode ended (gymnax 1.x semantics)."""
        final_obs, inner_st, reward, terminated, _ = self.env.step_env(
            key_step, inner, action, self.params
        )
        terminated = jnp.asarray(terminated, jnp.bool_)
        # Termination wins: a terminal state reached at the time limit has value zero.
        truncated = jnp.asarray(self.env.is_truncated(inner_st, self.params), jnp.bool_)
        truncated = truncated & ~terminated
        done = terminated | truncated
        obs_re, inner_re = self.env.reset_env(key_reset, self.params)
        inner_re = rng.threefry_keys(inner_re)  # a key the env keeps: back to jax's kind
        inner = jax.tree.map(lambda r, s: jax.lax.select(done, r, s), inner_re, inner_st)
        final_obs = final_obs.astype(self.observation_dtype)
        obs = jax.lax.select(done, obs_re.astype(self.observation_dtype), final_obs)
        return obs, inner, final_obs, jnp.asarray(reward, jnp.float32), terminated, truncated


def episode_metrics(timesteps: Timestep, axis_name: str | None = None) -> dict[str, jax.Array]:
    """Mean return and length of the episodes that finished in a batch of timesteps.

    Args:
      timesteps: a :class:`Timestep` with any leading axes (e.g. ``[T, N]``).
      axis_name: reduce over this device axis too, so every shard reports the global mean.

    Returns:
      ``episode_return`` and ``episode_length`` (NaN when no episode finished) and
      ``num_episodes``, all scalars.
    """
    done = timesteps.done.astype(jnp.float32)
    count = axes.psum(jnp.sum(done), axis_name)
    ret = axes.psum(jnp.sum(timesteps.episode_return * done), axis_name)
    length = axes.psum(jnp.sum(timesteps.episode_length * done), axis_name)
    safe = jnp.maximum(count, 1.0)
    nan = jnp.float32(jnp.nan)
    return {
        "episode_return": jnp.where(count > 0, ret / safe, nan),
        "episode_length": jnp.where(count > 0, length / safe, nan),
        "num_episodes": count,
    }
