"""Exploration for value-based agents: epsilon schedules, the Ape-X ladder, epsilon-greedy.

* :func:`linear_epsilon`: the DQN schedule (Mnih et al. 2015), linear from ``start`` to
  ``end`` over ``decay_steps`` then constant.
* :func:`apex_epsilons`: one fixed rate per actor, ``eps_i = eps ** (1 + alpha * i / (N-1))``
  (Horgan et al. 2018, https://arxiv.org/abs/1803.00933, section 4.1).
* :func:`epsilon_greedy`: per-row actions from ``[N, A]`` Q-values, one key per row, so a
  sharded batch draws exactly the actions it draws on one device.
* :func:`exploration_draws` and :func:`epsilon_greedy_from_draws`: the same rule with the
  random numbers of many steps drawn at once (one batched draw instead of a few per
  step: on CPU every draw is a small loop of its own).
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


__all__ = ["apex_epsilons", "epsilon_greedy", "epsilon_greedy_from_draws",
           "exploration_draws", "linear_epsilon"]
