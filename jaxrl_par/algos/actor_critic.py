"""What the actor-critic algorithms share: the blocks their parts are built over (PPO,
IMPALA, A3C/A2C), and the policy-gradient actor-critic loss with V-trace targets of IMPALA
(a learner correcting its actors' lag) and A3C/A2C (workers differentiating at the
parameters they acted with, where V-trace reduces to n-step returns)."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl_par import axes, envs
from jaxrl_par.losses.policy_gradient import actor_critic_loss, policy_gradient_loss, value_loss
from jaxrl_par.losses.returns import vtrace
from jaxrl_par.networks import ActorCritic


class ActorCriticBlocks(NamedTuple):
    """What an actor-critic algorithm's parts share: the config, the env spec and the
    actor-critic, with the shard geometry that follows from ``cfg.axis_name``."""
    cfg: Any  # the algorithm's Config
    spec: Any  # envs.VecEnv of one env, or host.HostSpec for gymnasium envs
    network: ActorCritic  # cfg.actor_critic(spec)
    on_host: bool  # gymnasium envs, stepped from Python by the algorithm's runtime

    @property
    def normalize_rewards(self) -> bool:
        """Whether rewards are scaled (``cfg.normalize_rewards``, "auto" resolved)."""
        return self.cfg.normalizes_rewards(self.spec)

    def n_local(self) -> int:
        """Envs on this shard (all of them without a data axis)."""
        return axes.local_size(self.cfg.num_envs, self.cfg.axis_name)

    def local_env(self) -> envs.VecEnv:
        """This shard's envs; made where the axis is bound, inside init/update."""
        return envs.make(self.cfg.env, self.n_local())

# What the loss reports, in this order.
LOSS_METRICS = ("loss", "policy_loss", "value_loss", "entropy", "importance_weight",
                "clipped_rho_fraction")


@struct.dataclass
class Trajectory:
    """Unrolls of ``N`` envs, time-major ``[T, N, ...]``, and who acted them."""

    obs: jax.Array  # observations acted on
    action: jax.Array
    log_prob: jax.Array  # log mu(a_t | x_t), the behaviour policy's
    reward: jax.Array
    terminated: jax.Array  # no bootstrap here (rollouts.zero_bootstrap: time limits too
    truncated: jax.Array   # when the config does not bootstrap them)
    final_obs: jax.Array  # the observation each step reached (before a reset)
    version: jax.Array  # [] int32: learner steps of the parameters that acted them


def vtrace_loss(network: ActorCritic, params, traj: Trajectory, hp, *, method: str,
                off_policy_correction: bool = True) -> tuple[jax.Array, dict[str, jax.Array]]:
    """``(loss, info)``: the actor-critic loss of ``params`` on the unrolls ``traj``
    (``[T, n, ...]``), with V-trace targets from ``params`` themselves and no gradient
    through them (Espeholt et al. 2018, arXiv:1802.01561, section 4):

    ``mean(-rho_s A_s log pi(a_s | x_s)) + vf_coef * 0.5 mean((v_s - V(x_s))^2)
    - ent_coef * mean(H(pi(. | x_s)))``: the means of
    :func:`~jaxrl_par.losses.policy_gradient_loss` with the V-trace advantages and of
    :func:`~jaxrl_par.losses.value_loss` with the V-trace targets, combined by
    :func:`~jaxrl_par.losses.actor_critic_loss`.

    ``hp`` gives ``gamma``, ``vtrace_lambda``, ``rho_bar``, ``c_bar``, ``vf_coef`` and
    ``ent_coef`` (a config, or :func:`jaxrl_par.algos.hyper.view` of one). With
    ``off_policy_correction=False`` every importance weight is taken as 1: the targets
    are then TD(lambda) returns of the behaviour data, and with ``vtrace_lambda=1``
    A3C's n-step returns (bootstrapped from the unroll's last state and from truncated
    episodes' final observations). ``info`` holds :data:`LOSS_METRICS`, the
    mean importance weight ``pi / mu`` and the fraction above ``rho_bar`` included.
    """
    t, n = traj.reward.shape

    def rows(x):
        return x.reshape((t * n,) + x.shape[2:])

    dist, value = network.apply(params, rows(traj.obs))
    bootstrap = network.apply(params, rows(traj.final_obs), method=ActorCritic.value)
    log_prob = dist.log_prob(rows(traj.action)).reshape(t, n)
    value, bootstrap = value.reshape(t, n), bootstrap.reshape(t, n)
    log_rho = log_prob - traj.log_prob
    targets = jax.vmap(
        functools.partial(vtrace, method=method),
        in_axes=(1, 1, 1, 1, 1, 1, None, None, None, None), out_axes=1,
    )(traj.reward, value, bootstrap, traj.terminated, traj.terminated | traj.truncated,
      log_rho if off_policy_correction else jnp.zeros_like(log_rho), hp.gamma,
      hp.vtrace_lambda, hp.rho_bar, hp.c_bar)
    # Per-step losses over [T, n], averaged.
    pg_loss = jnp.mean(jax.vmap(jax.vmap(policy_gradient_loss))(
        log_prob, targets.pg_advantages))
    v_loss = jnp.mean(jax.vmap(jax.vmap(value_loss))(value, targets.vtrace_targets))
    entropy = jnp.mean(dist.entropy())
    loss = actor_critic_loss(pg_loss, v_loss, entropy, hp.vf_coef, hp.ent_coef)
    rho = jnp.exp(jax.lax.stop_gradient(log_rho))  # reported, used or not
    return loss, {
        "loss": loss,
        "policy_loss": pg_loss,
        "value_loss": v_loss,
        "entropy": entropy,
        "importance_weight": jnp.mean(rho),
        "clipped_rho_fraction": jnp.mean((rho > hp.rho_bar).astype(jnp.float32)),
    }
