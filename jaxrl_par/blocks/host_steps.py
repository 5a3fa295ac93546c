"""The records that pass between a vector of host envs and an algorithm's jitted
``act`` and ``learn`` (:class:`jaxrl_par.algos.base.HostSteps`), and the acting step the
stochastic policies share."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from jaxrl_par import envs
from jaxrl_par.networks import action_noise


class HostAction(NamedTuple):
    """What ``act`` gives for one step of ``N`` envs.

    Attributes:
      action: ``[N, ...]`` the policy's action, the one learned from.
      env_action: ``[N, ...]`` what the envs are stepped with (clipped to the box).
      extras: what the learner needs of the acting policy (a log-probability ``[N]``),
        or None.
    """

    action: jax.Array
    env_action: jax.Array
    extras: Any = None


class Rollout(NamedTuple):
    """``T`` steps of ``N`` host envs, time-major ``[T, N, ...]``: what the on-device
    rollouts (:func:`jaxrl_par.blocks.rollouts.policy_rollout`) record.

    Attributes:
      obs: the observations acted on.
      action: the policy's actions (:attr:`HostAction.action`).
      extras: the steps' :attr:`HostAction.extras`, stacked.
      timestep: each step's :class:`~jaxrl_par.envs.Timestep` (``obs`` after auto-reset,
        ``final_obs`` the observation reached, ``terminated`` apart from ``truncated``).
    """

    obs: jax.Array
    action: jax.Array
    extras: Any
    timestep: envs.Timestep


def update_keys(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(next_key, act_key, learn_key)`` of an update from the state's key: the split
    the algorithms' on-device updates make."""
    key, k_act, k_learn = jax.random.split(key, 3)
    return key, k_act, k_learn


def step_key(key: jax.Array, t: jax.Array) -> jax.Array:
    """Step ``t``'s key of an update whose state holds ``key`` (from its act key)."""
    return jax.random.fold_in(update_keys(key)[1], t)


def sample(dist, key: jax.Array, num_envs: int, num_actions: int, discrete: bool
           ) -> tuple[jax.Array, jax.Array]:
    """``(action [N, ...], log_prob [N])``: one action of ``dist`` per env, drawn as
    :func:`~jaxrl_par.blocks.rollouts.policy_rollout` draws them (noise, then
    ``dist.sample_with_noise``)."""
    action = dist.sample_with_noise(action_noise(key, (num_envs, num_actions), discrete))
    return action, dist.log_prob(action)
