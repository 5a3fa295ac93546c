"""Policy-gradient and value losses of the actor-critic family (PPO, IMPALA, A3C/A2C).

Unbatched functions in the rlax style: each takes the quantities of one sample (rank-0
arrays) and is batched with ``jax.vmap`` at the call site, hyperparameters passed
unbatched (``in_axes=None``); they may be traced arrays, as in sweeps. Losses are to be
minimised, and targets and advantages are constants: no gradient flows into them.

* PPO (Schulman et al. 2017, https://arxiv.org/abs/1707.06347): the clipped surrogate
  (eq. 7), the clipped value loss of the reference implementation, the combined
  objective (eq. 9), and the ``(r - 1) - log r`` estimate of the KL it reports.
* Policy gradient with given advantages (Williams 1992; A3C, Mnih et al. 2016,
  https://arxiv.org/abs/1602.01783; IMPALA, Espeholt et al. 2018,
  https://arxiv.org/abs/1802.01561, section 4.2, with the V-trace advantages of
  :func:`jaxrl_par.losses.returns.vtrace`).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def clipped_surrogate_loss(ratio_t: jax.Array, advantage_t: jax.Array,
                           clip_eps: float | jax.Array) -> jax.Array:
    """PPO's clipped surrogate loss (Schulman et al. 2017, arXiv:1707.06347, eq. 7)::

        -min(r_t * A_t, clip(r_t, 1 - eps, 1 + eps) * A_t)

    The minimum takes the clipped term only where it is the smaller: the ratio's pull is
    cut once it has moved ``eps`` past 1 in the direction the advantage rewards (above
    ``1 + eps`` for ``A_t > 0``, below ``1 - eps`` for ``A_t < 0``), and kept in full in
    the other direction.

    Args:
      ratio_t: ``[]`` probability ratio ``pi(a_t | s_t) / pi_old(a_t | s_t)``.
      advantage_t: ``[]`` advantage estimate (a constant: no gradient flows into it).
      clip_eps: the clipping range ``eps``.

    Returns:
      ``[]`` the loss (the negated surrogate objective).

    >>> float(clipped_surrogate_loss(jnp.float32(1.5), jnp.float32(2.0), 0.25))
    -2.5
    """
    chex.assert_rank([ratio_t, advantage_t], 0)
    advantage_t = jax.lax.stop_gradient(advantage_t)
    clipped_ratio_t = jnp.clip(ratio_t, 1.0 - clip_eps, 1.0 + clip_eps)
    return -jnp.minimum(ratio_t * advantage_t, clipped_ratio_t * advantage_t)


def value_loss(value_tm1: jax.Array, target_tm1: jax.Array) -> jax.Array:
    """Squared-error value loss ``0.5 * (V(s) - target)^2``.

    Args:
      value_tm1: ``[]`` value of the state acted in.
      target_tm1: ``[]`` its return target (a constant: no gradient flows into it).

    Returns:
      ``[]`` the loss, whose gradient in ``value_tm1`` is ``value_tm1 - target_tm1``.

    >>> float(value_loss(jnp.float32(1.0), jnp.float32(3.0)))
    2.0
    """
    chex.assert_rank([value_tm1, target_tm1], 0)
    return 0.5 * jnp.square(value_tm1 - jax.lax.stop_gradient(target_tm1))


def clipped_value_loss(value_tm1: jax.Array, old_value_tm1: jax.Array,
                       target_tm1: jax.Array, clip_eps: float | jax.Array) -> jax.Array:
    """PPO's clipped value loss (the reference implementation's, baselines ``ppo2``;
    Schulman et al. 2017, arXiv:1707.06347, uses it without stating it)::

        0.5 * max((v - t)^2, (v_old + clip(v - v_old, -eps, eps) - t)^2)

    The pessimistic (larger) of the unclipped error and that of the value moved at most
    ``eps`` from ``v_old``, the value when the data was collected. Where the clipped
    error is the larger the loss is flat in ``v``: no gradient pulls the value further
    than ``eps`` from ``v_old``.

    Args:
      value_tm1: ``[]`` value of the state acted in, under the parameters being learned.
      old_value_tm1: ``[]`` its value under the parameters that collected the data.
      target_tm1: ``[]`` the return target (a constant).
      clip_eps: the clipping range ``eps``.

    Returns:
      ``[]`` the loss.

    >>> float(clipped_value_loss(jnp.float32(2.0), jnp.float32(1.0), jnp.float32(2.0), 0.5))
    0.125
    """
    chex.assert_rank([value_tm1, old_value_tm1, target_tm1], 0)
    old_value_tm1 = jax.lax.stop_gradient(old_value_tm1)
    target_tm1 = jax.lax.stop_gradient(target_tm1)
    clipped_tm1 = old_value_tm1 + jnp.clip(value_tm1 - old_value_tm1, -clip_eps, clip_eps)
    return 0.5 * jnp.maximum(jnp.square(value_tm1 - target_tm1),
                             jnp.square(clipped_tm1 - target_tm1))


def approx_kl(log_ratio_t: jax.Array) -> jax.Array:
    """Unbiased, non-negative one-sample estimate of ``KL(pi_old || pi)`` from a sample of
    ``pi_old``: ``(r - 1) - log r`` with ``r = exp(log_ratio_t)`` (Schulman, "Approximating
    KL divergence", 2020, http://joschu.net/blog/kl-approx.html, the ``k3`` estimator;
    what PPO implementations report).

    Args:
      log_ratio_t: ``[]`` ``log pi(a_t | s_t) - log pi_old(a_t | s_t)``, ``a_t ~ pi_old``.

    Returns:
      ``[]`` the estimate, zero where the policies agree on the sample.

    >>> float(approx_kl(jnp.float32(0.0)))
    0.0
    """
    chex.assert_rank(log_ratio_t, 0)
    return (jnp.exp(log_ratio_t) - 1.0) - log_ratio_t


def policy_gradient_loss(log_prob_t: jax.Array, advantage_t: jax.Array) -> jax.Array:
    """The policy-gradient (REINFORCE with a baseline) loss ``-log pi(a_t | s_t) * A_t``:
    its gradient is ``-A_t * grad log pi(a_t | s_t)`` (Williams 1992; A3C, Mnih et al.
    2016, arXiv:1602.01783; with IMPALA's V-trace advantage
    ``rho_t (r_t + gamma v_{t+1} - V(x_t))``, Espeholt et al. 2018, arXiv:1802.01561,
    section 4.2).

    Args:
      log_prob_t: ``[]`` ``log pi(a_t | s_t)`` of the action taken.
      advantage_t: ``[]`` its advantage; a constant (``stop_gradient``-ed here), so a
        critic's parameters inside it get no gradient from this loss.

    Returns:
      ``[]`` the loss.

    >>> float(policy_gradient_loss(jnp.float32(-0.5), jnp.float32(2.0)))
    1.0
    """
    chex.assert_rank([log_prob_t, advantage_t], 0)
    return -log_prob_t * jax.lax.stop_gradient(advantage_t)


def actor_critic_loss(policy_loss: jax.Array, value_loss: jax.Array, entropy: jax.Array,
                      vf_coef: float | jax.Array, ent_coef: float | jax.Array) -> jax.Array:
    """The combined actor-critic loss ``policy_loss + c_1 value_loss - c_2 entropy``: the
    negated objective of PPO (Schulman et al. 2017, arXiv:1707.06347, eq. 9) and A3C's
    (Mnih et al. 2016, arXiv:1602.01783), the entropy entering as a bonus.

    Args:
      policy_loss, value_loss, entropy: ``[]`` each (usually means over a batch).
      vf_coef: ``c_1``, the value loss's weight. ent_coef: ``c_2``, the entropy's.

    Returns:
      ``[]`` the loss.

    >>> float(actor_critic_loss(jnp.float32(1.0), jnp.float32(2.0), jnp.float32(3.0),
    ...                         0.5, 0.25))
    1.25
    """
    chex.assert_rank([policy_loss, value_loss, entropy], 0)
    return policy_loss + vf_coef * value_loss - ent_coef * entropy


__all__ = [
    "actor_critic_loss",
    "approx_kl",
    "clipped_surrogate_loss",
    "clipped_value_loss",
    "policy_gradient_loss",
    "value_loss",
]
