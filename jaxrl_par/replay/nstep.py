"""n-step transitions from a time-major rollout, for DQN and Ape-X.

For a start step t the window runs over k = 0 .. n'-1 with n' <= n, stopping at the
first step that terminates or truncates the episode (inclusive) or at the end of the
rollout:

    reward_t   = sum_{k < n'} gamma^k r_{t+k}
    discount_t = gamma^{n'}, or 0 if the episode terminated inside the window
    next_obs_t = the observation to bootstrap from after step t+n'-1: `final_obs` if that
                 step ended the episode (auto-reset envs put the next episode's first
                 observation in `obs_t`), else `obs_t`.

Windows that run past the end of the rollout (t > T - n) are truncated at T and bootstrap
from the last step's next observation with discount gamma^{n'}: every one of the T steps
yields a valid (shorter) n-step target. Keep `[:T - n + 1]` for complete windows only.
See Sutton & Barto (2018), ch. 7, and Horgan et al. (2018, Ape-X).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp


class NStepTransitions(NamedTuple):
    """n-step transitions, time-major.

    Attributes:
        obs_tm1: `[T, B, ...]` observation at the window start.
        action: `[T, B, ...]` action at the window start.
        reward: float32 `[T, B]` discounted reward sum over the window.
        discount: float32 `[T, B]` gamma^{n'}, 0 if the episode terminated in the window.
        next_obs: `[T, B, ...]` observation to bootstrap from.
        steps: int32 `[T, B]` window length n' in `[1, n]`.
    """

    obs_tm1: Any
    action: Any
    reward: jax.Array
    discount: jax.Array
    next_obs: Any
    steps: jax.Array


def _shift(x: jax.Array, k: int) -> jax.Array:
    """`y[t] = x[t + k]`, zero-padded past the end (time on axis 0)."""
    if k == 0:
        return x
    pad = jnp.zeros((k, *x.shape[1:]), x.dtype)
    return jnp.concatenate([x[k:], pad], axis=0)


def nstep_transitions(
    obs_tm1: Any,
    action: Any,
    reward: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    obs_t: Any,
    final_obs: Any | None,
    gamma: float | jax.Array,
    n: int,
) -> NStepTransitions:
    """Builds n-step transitions from a rollout of T steps of B envs.

    Args:
        obs_tm1: pytree of `[T, B, ...]` observations the actions were taken in.
        action: pytree of `[T, B, ...]` actions.
        reward: `[T, B]` rewards r_t.
        terminated: bool `[T, B]`, the episode ended in a terminal state at step t.
        truncated: bool `[T, B]`, the episode was cut (time limit) at step t.
        obs_t: pytree of `[T, B, ...]` observations after step t (after auto-reset).
        final_obs: pytree like `obs_t`, the true last observation at steps that ended an
            episode (gymnax `info["final_observation"]`); None if `obs_t` never resets.
        gamma: discount factor.
        n: static window length, >= 1; windows stop at the rollout's end, so any n > T
            acts as n = T.

    Returns:
        `NStepTransitions`, T windows per env (see the module docstring).
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"nstep_transitions: n must be a Python int >= 1, got {n!r}.")
    chex.assert_rank([reward, terminated, truncated], 2)
    chex.assert_equal_shape([reward, terminated, truncated])
    num_steps, batch = reward.shape
    final_obs = obs_t if final_obs is None else final_obs
    terminated = terminated.astype(bool)
    done = terminated | truncated.astype(bool)
    gamma = jnp.asarray(gamma, jnp.float32)
    t = jnp.arange(num_steps, dtype=jnp.int32)[:, None]

    total = jnp.zeros((num_steps, batch), jnp.float32)
    scale = jnp.ones((num_steps, batch), jnp.float32)  # gamma^k while the window is open
    alive = jnp.ones((num_steps, batch), bool)
    boot_step = jnp.zeros((num_steps, batch), jnp.int32)
    boot_final = jnp.zeros((num_steps, batch), bool)
    ended_terminal = jnp.zeros((num_steps, batch), bool)
    steps = jnp.zeros((num_steps, batch), jnp.int32)
    # n is small and static: unrolled, vectorised over [T, B]. No window reaches past the
    # rollout's T steps, so a window length n > T gives the same transitions as n = T.
    for k in range(min(n, num_steps)):
        active = alive & (t + k < num_steps)
        done_k = _shift(done, k)
        total = total + jnp.where(active, scale * _shift(reward, k).astype(jnp.float32), 0.0)
        scale = jnp.where(active, scale * gamma, scale)
        boot_step = jnp.where(active, t + k, boot_step)
        boot_final = jnp.where(active, done_k, boot_final)
        ended_terminal = jnp.where(active, _shift(terminated, k), ended_terminal)
        steps = steps + active.astype(jnp.int32)
        alive = active & ~done_k

    env = jnp.arange(batch)[None, :]

    def bootstrap(after: jax.Array, final: jax.Array) -> jax.Array:
        a, f = after[boot_step, env], final[boot_step, env]
        mask = boot_final.reshape(boot_final.shape + (1,) * (a.ndim - 2))
        return jnp.where(mask, f, a)

    return NStepTransitions(
        obs_tm1=obs_tm1,
        action=action,
        reward=total,
        discount=jnp.where(ended_terminal, 0.0, scale),
        next_obs=jax.tree.map(bootstrap, obs_t, final_obs),
        steps=steps,
    )
