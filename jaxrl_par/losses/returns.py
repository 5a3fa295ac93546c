"""Return estimators. Unbatched over time ``[T]``; callers ``vmap`` over envs."""

from __future__ import annotations

from typing import NamedTuple

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

    advantages = _backward(delta_t, decay_t, method)
    return advantages, advantages + value_tm1


GAE_METHODS = ("auto", "scan", "associative")


class VTraceOutput(NamedTuple):
    """What :func:`vtrace` returns, each ``[T]``."""

    vtrace_targets: jax.Array  # v_s, the value targets
    pg_advantages: jax.Array  # clipped rho_s * (r_s + gamma * v_{s+1} - V(x_s))
    importance_weights: jax.Array  # rho_s = pi(a_s | x_s) / mu(a_s | x_s), unclipped


def vtrace(
    reward_t: jax.Array,
    value_tm1: jax.Array,
    bootstrap_value_t: jax.Array,
    terminated_t: jax.Array,
    done_t: jax.Array,
    log_rho_t: jax.Array,
    gamma: float,
    lambda_: float = 1.0,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float | None = None,
    method: str = "auto",
) -> VTraceOutput:
    """V-trace targets and policy-gradient advantages (Espeholt et al. 2018,
    arXiv:1802.01561, section 4), for a trajectory acted by a behaviour policy ``mu`` and
    learned by a target policy ``pi``, with auto-resetting environments as in
    :func:`gae_advantages` (``bootstrap_value_t`` is the value of the observation step
    ``t`` reached: the next one, or the final one before a reset on truncation)::

        rho_t   = exp(log_rho_t)
        d_t     = gamma * (1 - terminated_t)
        delta_t = min(rho_bar, rho_t) * (r_t + d_t * bootstrap_value_t - V(x_t))
        v_t - V(x_t) = delta_t
                       + gamma * lambda * min(c_bar, rho_t) * (1 - done_t) * (v_{t+1} - V(x_{t+1}))
        pg_advantage_t = min(pg_rho_bar, rho_t) * (r_t + d_t * q_t - V(x_t))

    where ``q_t`` is ``v_{t+1}`` while the episode goes on and ``bootstrap_value_t`` where
    it ended at ``t`` or the trajectory does (``t = T - 1``). ``done_t`` cuts the trace, so
    nothing leaks across episodes. On-policy (``log_rho = 0``) with ``rho_bar, c_bar >= 1``
    the targets are the lambda-returns of :func:`gae_advantages`.

    With ``lambda_ < 1`` the policy-gradient advantage still bootstraps from the V-trace
    target ``v_{t+1}``, as in the paper (section 4.2), its reference implementation and
    seed_rl's ``vtrace``; rlax's ``vtrace_td_error_and_advantage`` bootstraps from
    ``lambda v_{t+1} + (1 - lambda) V(x_{t+1})`` instead. Without truncations (which rlax
    does not model) the targets equal rlax's for every ``lambda_``, the advantages for
    ``lambda_ = 1``.

    Args:
      reward_t, value_tm1, bootstrap_value_t, terminated_t, done_t: ``[T]``, as for
        :func:`gae_advantages`. Values are treated as constants (no gradient flows
        through the targets; callers pass ``stop_gradient``-ed values or not, alike).
      log_rho_t: ``[T]`` ``log pi(a_t | x_t) - log mu(a_t | x_t)``.
      gamma: discount. lambda_: the trace's lambda (1 in the paper).
      rho_bar, c_bar: truncation levels of the importance weights in ``delta_t`` and in
        the trace. pg_rho_bar: that of the policy gradient (default ``rho_bar``).
      method: the backward recursion, as for :func:`gae_advantages`.

    Returns:
      :class:`VTraceOutput` of ``[T]`` arrays.
    """
    chex.assert_rank([reward_t, value_tm1, bootstrap_value_t, terminated_t, done_t,
                      log_rho_t], 1)
    chex.assert_equal_shape([reward_t, value_tm1, bootstrap_value_t, terminated_t, done_t,
                             log_rho_t])
    if pg_rho_bar is None:
        pg_rho_bar = rho_bar
    value_tm1 = jax.lax.stop_gradient(value_tm1)
    bootstrap_value_t = jax.lax.stop_gradient(bootstrap_value_t)
    rho_t = jnp.exp(jax.lax.stop_gradient(log_rho_t))
    discount_t = gamma * (1.0 - terminated_t.astype(reward_t.dtype))
    not_done = 1.0 - done_t.astype(reward_t.dtype)
    delta_t = jnp.minimum(rho_bar, rho_t) * (reward_t + discount_t * bootstrap_value_t
                                             - value_tm1)
    decay_t = gamma * lambda_ * jnp.minimum(c_bar, rho_t) * not_done
    targets = value_tm1 + _backward(delta_t, decay_t, method)
    # v_{t+1} where the episode goes on within the trajectory, else the bootstrap value.
    next_targets = jnp.concatenate([targets[1:], bootstrap_value_t[-1:]])
    q_t = jnp.where(done_t, bootstrap_value_t, next_targets)
    pg_advantages = jnp.minimum(pg_rho_bar, rho_t) * (reward_t + discount_t * q_t - value_tm1)
    return VTraceOutput(targets, pg_advantages, rho_t)


def _backward(delta_t: jax.Array, decay_t: jax.Array, method: str) -> jax.Array:
    """``A_t = delta_t + decay_t * A_{t+1}``, ``A_T = 0``, by ``method`` (see
    :func:`gae_advantages`): the recursion shared by GAE and V-trace."""
    if method not in GAE_METHODS:
        raise ValueError(f"method={method!r}; choose from {GAE_METHODS}")
    if method == "auto":
        return jax.lax.platform_dependent(
            delta_t, decay_t, cpu=_backward_scan, default=_backward_associative)
    if method == "scan":
        return _backward_scan(delta_t, decay_t)
    return _backward_associative(delta_t, decay_t)


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


__all__ = ["GAE_METHODS", "VTraceOutput", "gae_advantages", "vtrace"]
