"""Vectorised, auto-resetting environments on device.

A :class:`VecEnv` wraps one gymnax-style environment (``step_env``/``reset_env``/
``is_truncated``) and steps ``num_envs`` copies of it with ``jax.vmap``. It keeps
``terminated`` and ``truncated`` apart, returns the observation reached by the step
(``final_obs``) so that learners bootstrap from it on truncation, and tracks the return
and length of every episode on device.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_par import axes


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


class StepDraws(NamedTuple):
    """The randomness of one or more vectorised steps, drawn ahead
    (:meth:`VecEnv.draw_steps`). Leaves have leading axes ``[..., N]``."""

    step_keys: jax.Array  # [..., N] keys the env's dynamics (``step_env``) get
    reset_obs: jax.Array  # [..., N, *obs_shape] obs_dtype: first obs of the episode a reset starts
    reset_inner: Any  # the env's state at that reset, leaves [..., N, ...]


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

    # -- dynamics -----------------------------------------------------------------------
    def reset(self, keys: jax.Array) -> EnvState:
        """Resets all copies.

        Args:
          keys: ``[N]`` PRNG keys, one per copy (see ``jaxrl_par.axes.shard_keys``).
        """
        chex.assert_shape(keys, (self.num_envs,) + keys.shape[1:])
        obs, inner = self._new_episodes(keys)
        zeros = jnp.zeros((self.num_envs,), jnp.float32)
        return EnvState(
            inner=inner,
            obs=obs,
            episode_return=zeros,
            episode_length=jnp.zeros((self.num_envs,), jnp.int32),
        )

    def draw_steps(self, keys: jax.Array) -> StepDraws:
        """What the randomness of steps with ``keys`` decides, drawn in one batched call.

        A step of one copy splits its key into the key its dynamics get and the key of
        the episode an auto-reset would start; both are a function of the key alone, so
        a rollout draws them for all its steps before it starts: one batched hash and
        one batched ``reset_env`` instead of one of each per step, and the same values
        (``step(keys, ...)`` is ``step_drawn(draw_steps(keys), ...)``).

        Args:
          keys: ``[..., N]`` PRNG keys, e.g. ``[T, N]`` for ``T`` steps (typed keys, or
            the raw ``uint32 [..., N, 2]`` of ``jax.random.PRNGKey``).

        Returns:
          :class:`StepDraws` with leaves ``[..., N, ...]``.
        """
        if not jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
            keys = jax.random.wrap_key_data(keys)
        chex.assert_shape(keys, keys.shape[:-1] + (self.num_envs,))
        flat = keys.reshape(-1)
        halves = jax.vmap(jax.random.split)(flat)  # [M, 2]: (step, reset) per key
        obs, inner = self._new_episodes(halves[:, 1])
        draws = StepDraws(step_keys=halves[:, 0], reset_obs=obs, reset_inner=inner)
        return jax.tree.map(lambda x: x.reshape(keys.shape + x.shape[1:]), draws)

    def _new_episodes(self, keys: jax.Array) -> tuple[jax.Array, Any]:
        """``(obs [M, *obs_shape] obs_dtype, inner state, leaves [M, ...])`` of the
        episodes ``reset_env`` starts from keys ``[M]``."""
        obs, inner = jax.vmap(self.env.reset_env, in_axes=(0, None))(keys, self.params)
        return obs.astype(self.observation_dtype), inner

    def step(self, keys: jax.Array, state: EnvState, action: jax.Array
             ) -> tuple[EnvState, Timestep]:
        """Steps all copies by one action each, resetting those whose episode ended.

        Args:
          keys: ``[N]`` PRNG keys.
          state: current :class:`EnvState`.
          action: ``[N, *action_shape]`` actions.

        Returns:
          ``(next_state, timestep)``.
        """
        return self.step_drawn(self.draw_steps(keys), state, action)

    def step_drawn(self, draws: StepDraws, state: EnvState, action: jax.Array
                   ) -> tuple[EnvState, Timestep]:
        """:meth:`step` with its randomness drawn ahead by :meth:`draw_steps` (leaves
        ``[N, ...]``: one step's slice)."""
        chex.assert_shape(action, (self.num_envs,) + self.action_shape)
        obs, inner, final_obs, reward, terminated, truncated = jax.vmap(self._step_one)(
            draws, state.inner, action)
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

    def _step_one(self, draws: StepDraws, inner, action):
        """One copy: step, then reset where the episode ended (gymnax 1.x semantics)."""
        final_obs, inner_st, reward, terminated, _ = self.env.step_env(
            draws.step_keys, inner, action, self.params
        )
        terminated = jnp.asarray(terminated, jnp.bool_)
        # Termination wins: a terminal state reached at the time limit has value zero.
        truncated = jnp.asarray(self.env.is_truncated(inner_st, self.params), jnp.bool_)
        truncated = truncated & ~terminated
        done = terminated | truncated
        inner = jax.tree.map(lambda r, s: jax.lax.select(done, r, s), draws.reset_inner, inner_st)
        final_obs = final_obs.astype(self.observation_dtype)
        obs = jax.lax.select(done, draws.reset_obs, final_obs)
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
