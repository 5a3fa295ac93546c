"""Exploration: epsilon schedules, the Ape-X ladder and epsilon-greedy for value-based
agents; Gaussian and Ornstein-Uhlenbeck action noise for deterministic continuous policies.

* :func:`linear_epsilon`: the DQN schedule (Mnih et al. 2015), linear from ``start`` to
  ``end`` over ``decay_steps`` then constant.
* :func:`apex_epsilons`: one fixed rate per actor, ``eps_i = eps ** (1 + alpha * i / (N-1))``
  (Horgan et al. 2018, https://arxiv.org/abs/1803.00933, section 4.1).
* :func:`epsilon_greedy`: per-row actions from ``[N, A]`` Q-values, one key per row, so a
  sharded batch draws exactly the actions it draws on one device.
* :func:`exploration_draws` and :func:`epsilon_greedy_from_draws`: the same rule with the
  random numbers of many steps drawn at once (one batched draw instead of a few per
  step: on CPU every draw is a small loop of its own).
* :func:`gaussian_exploration`: a deterministic action plus Gaussian noise, clipped to the
  action box (TD3, Fujimoto et al. 2018, https://arxiv.org/abs/1802.09477, section 6.1).
* :func:`ou_noise_step` and :func:`ou_noise_reset`: the temporally correlated
  Ornstein-Uhlenbeck noise of DDPG (Lillicrap et al. 2015, https://arxiv.org/abs/1509.02971,
  section 7), a pure state ``[N, D]`` that restarts at 0 where an episode ended.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np


def linear_epsilon(step: jax.Array, start: float, end: float, decay_steps: int) -> jax.Array:
    """float32 ``[]``: ``start`` at step 0, linearly to ``end`` at ``decay_steps``, then ``end``.

    >>> float(linear_epsilon(50, 1.0, 0.0, 100))
    0.5
    """
    frac = jnp.clip(jnp.asarray(step, jnp.float32) / max(decay_steps, 1), 0.0, 1.0)
    return jnp.float32(start) + frac * jnp.float32(end - start)


def apex_epsilons(num_actors: int, epsilon: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """The Ape-X ladder: float32 ``[N]``, ``eps_i = epsilon ** (1 + alpha * i / (N - 1))``.

    Actor 0 explores most (``epsilon``), actor ``N-1`` least (``epsilon ** (1 + alpha)``).
    One actor gets ``epsilon``. A static NumPy array (the ladder never changes).

    >>> [round(float(e), 6) for e in apex_epsilons(3, 0.4, 7.0)]  # 0.4, 0.4**4.5, 0.4**8
    [0.4, 0.016191, 0.000655]
    """
    if not isinstance(num_actors, (int, np.integer)) or num_actors < 1:
        raise ValueError(f"apex_epsilons: num_actors must be a positive int, got {num_actors!r}")
    if num_actors == 1:
        return np.array([epsilon], np.float32)
    i = np.arange(num_actors, dtype=np.float64)
    return (epsilon ** (1.0 + alpha * i / (num_actors - 1))).astype(np.float32)


def epsilon_greedy(keys: jax.Array, q_values: jax.Array, epsilon: jax.Array) -> jax.Array:
    """Epsilon-greedy actions, one per row.

    Args:
      keys: ``[N]`` PRNG keys, one per row.
      q_values: ``[N, A]`` action values.
      epsilon: ``[]`` or ``[N]`` probability of a uniformly random action.

    Returns:
      int32 ``[N]`` actions: argmax with probability ``1 - eps``, else uniform over ``A``.
    """
    chex.assert_rank(q_values, 2)
    n, num_actions = q_values.shape
    chex.assert_shape(keys, (n,) + keys.shape[1:])
    uniforms, random_actions = exploration_draws(keys, num_actions)
    return epsilon_greedy_from_draws(q_values, uniforms, random_actions, epsilon)


def exploration_draws(keys: jax.Array, num_actions: int) -> tuple[jax.Array, jax.Array]:
    """The random numbers of epsilon-greedy for a batch of keys, in one draw.

    Args:
      keys: ``[...]`` PRNG keys, one per (step, env).
      num_actions: ``A``.

    Returns:
      ``(uniforms, random_actions)``: float32 ``[...]`` in ``[0, 1)`` (explore where
      below epsilon) and int32 ``[...]`` uniform over ``[0, A)``.
    """
    u = jax.vmap(lambda k: jax.random.uniform(k, (2,)))(keys.reshape(-1))
    u = u.reshape(keys.shape + (2,))
    random_action = jnp.minimum((u[..., 1] * num_actions).astype(jnp.int32), num_actions - 1)
    return u[..., 0], random_action


def epsilon_greedy_from_draws(q_values: jax.Array, uniforms: jax.Array,
                              random_actions: jax.Array, epsilon: jax.Array) -> jax.Array:
    """Epsilon-greedy actions from pre-drawn random numbers (see :func:`exploration_draws`).

    Args:
      q_values: ``[N, A]``. uniforms: float32 ``[N]``. random_actions: int32 ``[N]``.
      epsilon: ``[]`` or ``[N]``.

    Returns:
      int32 ``[N]``: ``random_actions`` where ``uniforms < epsilon``, else the argmax.

    >>> q = jnp.array([[0., 1.], [2., 0.]])
    >>> epsilon_greedy_from_draws(q, jnp.array([0.1, 0.9]), jnp.array([0, 1]), 0.5).tolist()
    [0, 0]
    """
    chex.assert_rank(q_values, 2)
    greedy = jnp.argmax(q_values, axis=-1).astype(jnp.int32)
    return jnp.where(uniforms < epsilon, random_actions, greedy)


def gaussian_exploration(action: jax.Array, noise: jax.Array, sigma: float | jax.Array,
                         low: jax.Array, high: jax.Array) -> jax.Array:
    """``clip(action + sigma * (high - low) / 2 * noise, low, high)``: Gaussian exploration
    around a deterministic action, ``sigma`` in units of the box's half-width (CleanRL's
    ``exploration_noise * action_scale``).

    Args:
      action: ``[..., D]`` the policy's action, inside the box.
      noise: ``[..., D]`` standard normal draws (or the state of :func:`ou_noise_step`).
      sigma: the noise scale. low, high: ``[D]`` the action box.

    Returns:
      ``[..., D]`` the action to take, inside ``[low, high]``.

    >>> gaussian_exploration(jnp.array([1.0, 1.0]), jnp.array([0.5, 4.0]), 0.5,
    ...                      jnp.array([-2.0, -2.0]), jnp.array([2.0, 2.0])).tolist()
    [1.5, 2.0]
    """
    chex.assert_equal_shape([action, noise])
    return jnp.clip(action + sigma * 0.5 * (high - low) * noise, low, high)


def ou_noise_step(x_tm1: jax.Array, noise: jax.Array, theta: float | jax.Array,
                  sigma: float | jax.Array, dt: float = 1e-2) -> jax.Array:
    """One Euler-Maruyama step of the Ornstein-Uhlenbeck process ``dx = -theta x dt +
    sigma dW`` (mean 0), DDPG's exploration noise (Lillicrap et al. 2015,
    arXiv:1509.02971, section 7: ``theta = 0.15``, ``sigma = 0.2``; ``dt`` as in OpenAI
    Baselines)::

        x_t = x_tm1 - theta * x_tm1 * dt + sigma * sqrt(dt) * noise

    Its stationary variance is ``sigma^2 dt / (1 - (1 - theta dt)^2)``, which tends to
    ``sigma^2 / (2 theta)`` as ``dt -> 0``.

    Args:
      x_tm1: ``[..., D]`` the process's state. noise: ``[..., D]`` standard normal draws.
      theta: the mean-reversion rate. sigma: the diffusion scale. dt: the time step.

    Returns:
      ``[..., D]`` the next state.
      (Below: ``1 - 0.5 * 1 * 0.25 + 0.5 * sqrt(0.25) * 2 = 1 - 0.125 + 0.5``.)

    >>> float(ou_noise_step(jnp.float32(1.0), jnp.float32(2.0), 0.5, 0.5, 0.25))
    1.375
    """
    chex.assert_equal_shape([x_tm1, noise])
    return x_tm1 - theta * x_tm1 * dt + sigma * (dt ** 0.5) * noise


def ou_noise_reset(x: jax.Array, done: jax.Array) -> jax.Array:
    """``x [N, D]`` with the rows of envs whose episode ended (``done [N]``) set to 0, the
    process's start: each episode's noise begins afresh."""
    chex.assert_rank([x, done], [2, 1])
    return jnp.where(done[:, None], 0.0, x)


__all__ = ["apex_epsilons", "epsilon_greedy", "epsilon_greedy_from_draws",
           "exploration_draws", "gaussian_exploration", "linear_epsilon", "ou_noise_reset",
           "ou_noise_step"]
