"""Return estimators. Unbatched over time ``[T]``; callers ``vmap`` over envs."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def gae_advantages(
    reward_t: jax.Array,
    value_tm1: jax.Array,
    bootstrap_value_t: jax.Array,
    terminated_t: jax.Array,
    done_t: jax.Array,
    gamma: float,
    lambda_: float,
    method: str = "auto",
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation (Schulman et al. 2016, arXiv:1506.02438).

    With auto-resetting environments, step ``t`` takes ``obs_t`` to the observation whose
    value is ``bootstrap_value_t``: the value of the next observation, or, where the
    episode was truncated, the value of the final observation before the reset. On
    termination the bootstrap is zero. ``done_t`` (terminated or truncated) cuts the
    lambda-trace so advantages never leak across episodes::

        delta_t = r_t + gamma * (1 - terminated_t) * bootstrap_value_t - v_t
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}

    Args:
      reward_t: ``[T]`` rewards.
      value_tm1: ``[T]`` values ``V(obs_t)`` of the observations acted on.
      bootstrap_value_t: ``[T]`` values of the observations each step reached.
      terminated_t: ``[T]`` bool, episode terminated at this step.
      done_t: ``[T]`` bool, episode ended (terminated or truncated) at this step.
      gamma: discount.
      lambda_: GAE lambda.
      method: how the backward recursion runs. ``"scan"``: ``T`` sequential steps.
        ``"associative"``: ``lax.associative_scan`` over the affine maps
        ``x -> delta_t + decay_t * x``, ``O(log T)`` sequential levels. ``"auto"``
        (default): the scan on CPU, where PPO trains as fast with either and the scan
        compiles faster, and the associative form on GPU and TPU, where each sequential
        step costs at least one kernel launch. The two agree to float rounding (a
        different order of the same products and sums).

    Returns:
      ``(advantages [T], returns [T])`` with ``returns = advantages + value_tm1``.
    """
    chex.assert_rank([reward_t, value_tm1, bootstrap_value_t, terminated_t, done_t], 1)
    chex.assert_equal_shape([reward_t, value_tm1, bootstrap_value_t, terminated_t, done_t])
    not_terminated = 1.0 - terminated_t.astype(reward_t.dtype)
    not_done = 1.0 - done_t.astype(reward_t.dtype)
    delta_t = reward_t + gamma * not_terminated * bootstrap_value_t - value_tm1
    decay_t = gamma * lambda_ * not_done

    if method not in GAE_METHODS:
        raise ValueError(f"method={method!r}; choose from {GAE_METHODS}")
    if method == "auto":
        advantages = jax.lax.platform_dependent(
            delta_t, decay_t, cpu=_backward_scan, default=_backward_associative)
    elif method == "scan":
        advantages = _backward_scan(delta_t, decay_t)
    else:
        advantages = _backward_associative(delta_t, decay_t)
    return advantages, advantages + value_tm1


GAE_METHODS = ("auto", "scan", "associative")


def _backward_scan(delta_t: jax.Array, decay_t: jax.Array) -> jax.Array:
    """``A_t = delta_t + decay_t * A_{t+1}``, ``A_T = 0``, as ``T`` sequential steps."""
    def body(acc, xs):
        delta, decay = xs
        acc = delta + decay * acc
        return acc, acc

    _, out = jax.lax.scan(body, jnp.zeros_like(delta_t[0]), (delta_t, decay_t), reverse=True)
    return out


def _backward_associative(delta_t: jax.Array, decay_t: jax.Array) -> jax.Array:
    """The same recursion as a reverse associative scan. Step ``t`` is the affine map
    ``f_t(x) = delta_t + decay_t * x`` and ``A_t = f_t(f_{t+1}(... f_{T-1}(0)))``; a pair
    ``(a, b)`` stands for ``x -> b + a * x``, and composing ``f_t`` after a later map is
    ``(a_t * a, b_t + a_t * b)``."""
    def compose(later, earlier):
        a_later, b_later = later
        a_t, b_t = earlier
        return a_t * a_later, b_t + a_t * b_later

    _, out = jax.lax.associative_scan(compose, (decay_t, delta_t), reverse=True)
    return out
