"""Q-learning maths shared by DQN, Ape-X and Gorila: n-step (double) Q TD errors and
their elementwise losses.

Unbatched functions in the rlax style (``_tm1`` for the step acted in, ``_t`` for the
bootstrap step), batched with ``jax.vmap`` at the call site
(:func:`jaxrl_par.algos.q_common.batch_td_error`). The n-step reward and discount come
from :func:`jaxrl_par.replay.nstep_transitions`: ``r_t`` is the discounted reward sum over
the window and ``discount_t`` is ``gamma ** n'`` (0 when the episode terminated inside
it), so the same functions serve 1-step and n-step targets.

* Q-learning (Watkins 1989; DQN, Mnih et al. 2015): ``target = r + d * max_a q_t[a]``.
* Double Q-learning (van Hasselt et al. 2016, https://arxiv.org/abs/1509.06461):
  ``target = r + d * q_t_value[argmax_a q_t_selector[a]]``, the online network selects
  and the target network evaluates.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import optax

LOSSES = ("huber", "mse")


def q_learning(q_tm1: jax.Array, a_tm1: jax.Array, r_t: jax.Array, discount_t: jax.Array,
               q_t: jax.Array) -> jax.Array:
    """TD error of (n-step) Q-learning, ``r_t + discount_t * max q_t - q_tm1[a_tm1]``.

    Args:
      q_tm1: ``[A]`` values at the start state. a_tm1: ``[]`` action. r_t, discount_t:
      ``[]``. q_t: ``[A]`` target-network values at the bootstrap state.

    >>> float(q_learning(jnp.array([1., 2.]), 0, 1., 0.5, jnp.array([4., 2.])))
    2.0
    """
    chex.assert_rank([q_tm1, a_tm1, r_t, discount_t, q_t], [1, 0, 0, 0, 1])
    target = r_t + discount_t * jnp.max(q_t)
    return jax.lax.stop_gradient(target) - q_tm1[a_tm1]


def double_q_learning(q_tm1: jax.Array, a_tm1: jax.Array, r_t: jax.Array,
                      discount_t: jax.Array, q_t_value: jax.Array,
                      q_t_selector: jax.Array) -> jax.Array:
    """TD error of (n-step) double Q-learning.

    ``r_t + discount_t * q_t_value[argmax q_t_selector] - q_tm1[a_tm1]``, with
    ``q_t_value`` from the target network and ``q_t_selector`` from the online network.

    >>> float(double_q_learning(jnp.array([1., 2.]), 0, 1., 0.5,
    ...                         jnp.array([4., 2.]), jnp.array([0., 3.])))
    1.0
    """
    chex.assert_rank([q_tm1, a_tm1, r_t, discount_t, q_t_value, q_t_selector],
                     [1, 0, 0, 0, 1, 1])
    best = jnp.argmax(q_t_selector)
    target = r_t + discount_t * q_t_value[best]
    return jax.lax.stop_gradient(target) - q_tm1[a_tm1]


def td_loss(td_error: jax.Array, kind: str = "huber", delta: float = 1.0) -> jax.Array:
    """Elementwise loss of TD errors: ``"huber"`` (quadratic within ``delta``) or ``"mse"``
    (``0.5 * td**2``). Both have gradient ``-td`` for small errors."""
    if kind == "huber":
        return optax.huber_loss(td_error, delta=delta)
    if kind == "mse":
        return 0.5 * jnp.square(td_error)
    raise ValueError(f"td_loss: kind={kind!r}; choose from {LOSSES}")


__all__ = [
    "LOSSES",
    "double_q_learning",
    "q_learning",
    "td_loss",
]
