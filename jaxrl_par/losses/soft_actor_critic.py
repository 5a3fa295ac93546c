"""Losses and targets of off-policy actor-critics for continuous actions: SAC, DDPG, TD3.

Unbatched functions in the rlax style (``_tm1`` for the state acted in, ``_t`` for the
next state a target bootstraps from, or the state a policy loss is evaluated at), batched
with ``jax.vmap`` at the call site. ``discount_t`` is ``gamma`` times ``1 - terminated``:
0 where the episode terminated, ``gamma`` where it goes on or was truncated (a
truncation bootstraps from the final observation). Targets are constants: no gradient
flows into them.

* Soft Actor-Critic (Haarnoja et al. 2018, https://arxiv.org/abs/1801.01290, and the
  automatic temperature of https://arxiv.org/abs/1812.05905): the soft Q target, the
  critics' regression, the reparameterised actor loss and the temperature loss.
* Deterministic policy gradient (Silver et al. 2014; DDPG, Lillicrap et al. 2015,
  https://arxiv.org/abs/1509.02971), TD3's clipped double-Q target and its target policy
  smoothing (Fujimoto et al. 2018, https://arxiv.org/abs/1802.09477).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def soft_q_target(r_t: jax.Array, discount_t: jax.Array, min_q_t: jax.Array,
                  log_prob_t: jax.Array, alpha: float | jax.Array) -> jax.Array:
    """SAC's soft Q target (Haarnoja et al. 2018, arXiv:1801.01290, section 4.2, with the
    twin target critics of arXiv:1812.05905)::

        r_t + discount_t * (min_k Q'_k(s_t, a_t) - alpha * log pi(a_t | s_t)),  a_t ~ pi(. | s_t)

    Args:
      r_t: ``[]`` reward. discount_t: ``[]`` ``gamma * (1 - terminated)``.
      min_q_t: ``[]`` the smallest target critic's value of the next state and an action
        sampled there from the current policy.
      log_prob_t: ``[]`` that action's log-probability.
      alpha: the temperature.

    Returns:
      ``[]`` the target (``stop_gradient``-ed).

    >>> float(soft_q_target(1.0, 0.5, jnp.float32(4.0), jnp.float32(-2.0), 0.5))
    3.5
    """
    chex.assert_rank([r_t, discount_t, min_q_t, log_prob_t], 0)
    target = r_t + discount_t * (min_q_t - alpha * log_prob_t)
    return jax.lax.stop_gradient(target)


def soft_critic_loss(q_tm1: jax.Array, target_tm1: jax.Array) -> jax.Array:
    """The critics' regression on a shared target, ``0.5 * sum_k (Q_k(s, a) - y)^2``
    (Haarnoja et al. 2018, arXiv:1801.01290, section 4.2, for each of ``K`` critics).

    Args:
      q_tm1: ``[K]`` each critic's value of the state acted in and the action taken.
      target_tm1: ``[]`` the target ``y`` (e.g. :func:`soft_q_target`; a constant).

    Returns:
      ``[]`` the loss, summed over critics (each critic's gradient is its own error).

    >>> float(soft_critic_loss(jnp.array([1.0, 3.0]), jnp.float32(2.0)))
    1.0
    """
    chex.assert_rank([q_tm1, target_tm1], [1, 0])
    return 0.5 * jnp.sum(jnp.square(q_tm1 - jax.lax.stop_gradient(target_tm1)))


def soft_actor_loss(log_prob_t: jax.Array, min_q_t: jax.Array,
                    alpha: float | jax.Array) -> jax.Array:
    """SAC's policy loss ``alpha * log pi(a_t | s_t) - min_k Q_k(s_t, a_t)`` for an action
    ``a_t`` sampled with the reparameterisation trick (Haarnoja et al. 2018,
    arXiv:1801.01290, section 4.2; the minimum over critics as in arXiv:1812.05905).

    Args:
      log_prob_t: ``[]`` the sampled action's log-probability.
      min_q_t: ``[]`` the smallest critic's value of that action: the gradient flows
        through it into the action, and so into the policy.
      alpha: the temperature (a constant here).

    Returns:
      ``[]`` the loss.

    >>> float(soft_actor_loss(jnp.float32(-1.0), jnp.float32(3.0), 0.5))
    -3.5
    """
    chex.assert_rank([log_prob_t, min_q_t], 0)
    return jax.lax.stop_gradient(alpha) * log_prob_t - min_q_t


def temperature_loss(log_alpha: jax.Array, log_prob_t: jax.Array,
                     target_entropy: float | jax.Array) -> jax.Array:
    """SAC's temperature loss (Haarnoja et al. 2018, arXiv:1812.05905, section 5:
    ``-alpha * (log pi + target_entropy)``), in ``log_alpha`` as implementations learn it::

        -log_alpha * (log pi(a_t | s_t) + target_entropy)

    Its gradient in ``log_alpha`` is ``-(log pi + target_entropy)``: over a batch, the
    policy's entropy estimate minus ``target_entropy``, so descent lowers the temperature
    while the entropy is above its target and raises it while below.

    Args:
      log_alpha: ``[]`` the log temperature being learned.
      log_prob_t: ``[]`` log-probability of an action sampled from the policy (a
        constant here).
      target_entropy: the entropy to track (``-dim(A)`` by default in SAC).

    Returns:
      ``[]`` the loss.

    >>> float(jax.grad(temperature_loss)(jnp.float32(0.0), jnp.float32(-3.0), -1.0))
    4.0
    """
    chex.assert_rank([log_alpha, log_prob_t], 0)
    return -log_alpha * jax.lax.stop_gradient(log_prob_t + target_entropy)


def deterministic_policy_gradient_loss(q_t: jax.Array) -> jax.Array:
    """The deterministic policy gradient loss ``-Q(s_t, mu(s_t))`` (Silver et al. 2014;
    DDPG, Lillicrap et al. 2015, arXiv:1509.02971): its gradient in the policy's
    parameters is ``-dQ/da * dmu/dtheta``, the critic held fixed by differentiating
    only the actor's parameters.

    Args:
      q_t: ``[]`` the critic's value of the state and the policy's action there.

    Returns:
      ``[]`` the loss.

    >>> float(deterministic_policy_gradient_loss(jnp.float32(2.0)))
    -2.0
    """
    chex.assert_rank(q_t, 0)
    return -q_t


def clipped_double_q_target(r_t: jax.Array, discount_t: jax.Array,
                            q_t: jax.Array) -> jax.Array:
    """TD3's clipped double-Q target ``r_t + discount_t * min_k Q'_k(s_t, a_t)``
    (Fujimoto et al. 2018, arXiv:1802.09477, eq. 10), with ``a_t`` the target policy's
    (smoothed) action at the next state.

    Args:
      r_t: ``[]`` reward. discount_t: ``[]`` ``gamma * (1 - terminated)``.
      q_t: ``[K]`` each target critic's value of the next state and action.

    Returns:
      ``[]`` the target (``stop_gradient``-ed).

    >>> float(clipped_double_q_target(1.0, 0.5, jnp.array([4.0, 2.0])))
    2.0
    """
    chex.assert_rank([r_t, discount_t, q_t], [0, 0, 1])
    return jax.lax.stop_gradient(r_t + discount_t * jnp.min(q_t))


def target_policy_smoothing(action_t: jax.Array, noise_t: jax.Array,
                            sigma: float | jax.Array, noise_clip: float | jax.Array,
                            low: jax.Array, high: jax.Array) -> jax.Array:
    """TD3's target policy smoothing (Fujimoto et al. 2018, arXiv:1802.09477, eq. 14): the
    target policy's action at the next state plus clipped Gaussian noise, kept in the box::

        clip(a_t + clip(sigma * noise_t, -noise_clip, noise_clip) * s, low, high)

    with ``s = (high - low) / 2`` (``sigma`` and ``noise_clip`` in units of the box's
    half-width, CleanRL's ``action_scale``).

    Args:
      action_t: ``[D]`` the target policy's action. noise_t: ``[D]`` standard normal draws.
      sigma: the noise scale (0.2 in the paper). noise_clip: its bound (0.5).
      low, high: ``[D]`` the action box.

    Returns:
      ``[D]`` the smoothed action (``stop_gradient``-ed: targets are constants).

    >>> lo, hi = jnp.array([-2.0, -2.0, -2.0]), jnp.array([2.0, 2.0, 2.0])
    >>> target_policy_smoothing(jnp.array([0.0, 1.5, 0.5]), jnp.array([1.0, 5.0, -4.0]),
    ...                         0.25, 0.5, lo, hi).tolist()  # noise 0.25*2, min(1.25, .5)*2, -0.5*2
    [0.5, 2.0, -0.5]
    """
    chex.assert_rank([action_t, noise_t], 1)
    chex.assert_equal_shape([action_t, noise_t])
    clipped = jnp.clip(sigma * noise_t, -noise_clip, noise_clip) * 0.5 * (high - low)
    return jax.lax.stop_gradient(jnp.clip(action_t + clipped, low, high))


__all__ = [
    "clipped_double_q_target",
    "deterministic_policy_gradient_loss",
    "soft_actor_loss",
    "soft_critic_loss",
    "soft_q_target",
    "target_policy_smoothing",
    "temperature_loss",
]
