"""What the continuous-action replay learners (SAC, DDPG, TD3) share above the building
blocks: the actor, the critic ensemble and the uniform replay of an env (:class:`Blocks`,
:func:`make_blocks`), the stored step (:class:`Transition`), the initial parameters,
envs and replay (:func:`init_parts`), the Adam pair of actor and critics
(:func:`optimizers`), a gradient step (:func:`apply_gradients`) and the critics'
regression on a bootstrap target (:func:`critic_step`), the storing of an update's steps
and the learning gated on ``learning_starts`` (:func:`store_and_learn`,
:func:`learner_metrics`), the host-env learner (:func:`host_learn`) and the
:class:`~jaxrl_par.algos.base.Algorithm` they make (:func:`algorithm`).

Each algorithm keeps its acting distribution, its learner's carry and its losses (from
:mod:`jaxrl_par.losses.soft_actor_critic`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_par import axes, envs, replay
from jaxrl_par.algos.base import Algorithm, HostSteps, clipped_adam
from jaxrl_par.blocks import host_steps
from jaxrl_par.envs import host
from jaxrl_par.losses.soft_actor_critic import soft_critic_loss
from jaxrl_par.networks import EnsembleQ


class Transition(NamedTuple):
    """One stored step (no batch axis in the buffer's example)."""

    obs: jax.Array
    action: jax.Array  # [D] as the env took it (inside the box)
    reward: jax.Array
    terminated: jax.Array  # float32 1/0
    next_obs: jax.Array  # the observation reached (final_obs before a reset)


class Blocks(NamedTuple):
    """What a continuous-action replay learner's parts share: the config, the env spec,
    the actor and critic ensemble, the uniform replay and the action box, with the shard
    geometry that follows from ``cfg.axis_name``."""

    cfg: Any  # the algorithm's Config
    spec: Any  # envs.VecEnv of one env, or host.HostSpec for gymnasium envs
    actor: Any  # networks.SquashedGaussianActor or networks.DeterministicActor
    critic: EnsembleQ  # [K] critics Q_k(s, a)
    buf: replay.Buffer  # uniform
    on_host: bool  # a vector of host envs (jaxrl_par.parallel.host_loop)
    low: jax.Array  # [D] float32: the action box
    high: jax.Array  # [D] float32

    @property
    def action_dim(self) -> int:
        """``D``: the action's dimensions."""
        return self.spec.num_actions

    def n_local(self) -> int:
        """Envs on this shard."""
        return axes.local_size(self.cfg.num_envs, self.cfg.axis_name)

    def local_env(self) -> envs.VecEnv:
        """This shard's envs."""
        return envs.make(self.cfg.env, self.n_local())


def make_blocks(cfg, actor_type: type) -> Blocks:
    """The :class:`Blocks` of ``cfg``: an ``actor_type`` actor (squashed into the env's
    action box) and ``cfg.num_critics`` critics, both MLPs of ``cfg.hidden_sizes``, and a
    uniform replay of ``cfg.buffer_size``."""
    spec = envs.spec(cfg.env)
    low, high = (jnp.broadcast_to(jnp.asarray(b, jnp.float32), spec.action_shape)
                 for b in spec.action_bounds)
    actor = actor_type(spec.num_actions, tuple(float(x) for x in low.ravel()),
                       tuple(float(x) for x in high.ravel()),
                       obs_shape=spec.observation_shape,
                       hidden_sizes=tuple(cfg.hidden_sizes), activation=cfg.activation)
    critic = EnsembleQ(cfg.num_critics, tuple(cfg.hidden_sizes), cfg.activation)
    return Blocks(cfg, spec, actor, critic, replay.uniform(cfg.buffer_size),
                  host.is_host(cfg.env), low, high)


class InitialParts(NamedTuple):
    """What every continuous learner's state starts from (:func:`init_parts`)."""

    actor_params: dict
    critic_params: dict  # [K, ...] leaves: the ensemble
    env_state: envs.EnvState | None  # leaves [N_local, ...]; None on host envs
    buffer: Any  # empty uniform replay of Transition
    key: jax.Array  # the run's key


def init_parts(b: Blocks, key: jax.Array) -> InitialParts:
    """The actor's and critics' initial parameters, this shard's fresh envs (none on
    host envs), an empty replay and the run's key, all from ``key``."""
    spec, cfg = b.spec, b.cfg
    k_actor, k_critic, k_env, k_run = jax.random.split(key, 4)
    obs0 = jnp.zeros((1,) + spec.observation_shape, spec.observation_dtype)
    obs = jnp.zeros(spec.observation_shape, spec.observation_dtype)
    example = Transition(obs, jnp.zeros((b.action_dim,)), jnp.float32(0), jnp.float32(0), obs)
    return InitialParts(
        actor_params=b.actor.init(k_actor, obs0),
        critic_params=b.critic.init(k_critic, obs0, jnp.zeros((1, b.action_dim))),
        env_state=None if b.on_host else b.local_env().reset(
            axes.shard_keys(k_env, cfg.num_envs, cfg.axis_name)),
        buffer=b.buf.init(example),
        key=k_run,
    )


def optimizers(b: Blocks, hp) -> tuple[optax.GradientTransformation,
                                        optax.GradientTransformation]:
    """``(actor, critics)``: Adam at ``hp.learning_rate`` (the config, or a lane's
    :func:`jaxrl_par.algos.hyper.view`) after clipping at ``cfg.max_grad_norm``."""
    return (clipped_adam(hp.learning_rate, b.cfg.max_grad_norm),
            clipped_adam(hp.learning_rate, b.cfg.max_grad_norm))


def apply_gradients(b: Blocks, tx: optax.GradientTransformation, grads, opt_state, params):
    """``(params, opt_state)`` after one step of ``tx`` on ``grads`` averaged over the
    data axis (``cfg.axis_name``; none on one device)."""
    grads = axes.pmean(grads, b.cfg.axis_name)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def critic_loss(b: Blocks, params, batch: Transition, target: jax.Array):
    """``(loss, mean Q)``: the batch mean of every critic's squared error
    (:func:`~jaxrl_par.losses.soft_actor_critic.soft_critic_loss`) against the bootstrap
    ``target [B]``, at the stored ``batch`` (``[B, ...]`` leaves)."""
    q = b.critic.apply(params, batch.obs, batch.action)  # [K, B]
    return jnp.mean(jax.vmap(soft_critic_loss, (1, 0))(q, target)), jnp.mean(q)


def critic_step(b: Blocks, tx: optax.GradientTransformation, params, opt_state,
                batch: Transition, target: jax.Array):
    """One step of the critics towards ``target [B]`` (:func:`critic_loss`). Returns
    ``(params, opt_state, loss, mean Q)``."""
    (loss, q_mean), grads = jax.value_and_grad(
        functools.partial(critic_loss, b), has_aux=True)(params, batch, target)
    params, opt_state = apply_gradients(b, tx, grads, opt_state, params)
    return params, opt_state, loss, q_mean


def to_transitions(obs: jax.Array, action: jax.Array, ts: envs.Timestep) -> Transition:
    """The ``T * N`` stored steps of ``T`` steps of ``N`` envs (``[T, N, ...]``), rows
    ordered (step, env); ``next_obs`` is ``final_obs``, the observation reached."""

    def flat(x):
        return x.reshape((-1,) + x.shape[2:])

    return Transition(flat(obs), flat(action), flat(ts.reward),
                      flat(ts.terminated).astype(jnp.float32), flat(ts.final_obs))


def skip_learning(num_stats: int, learner, buffer, key: jax.Array, hparams):
    """A learner's outputs without a step: the carry and ``[num_stats]`` zeros."""
    return learner, jnp.zeros(num_stats, jnp.float32)


class Learned(NamedTuple):
    """What :func:`store_and_learn` gives."""

    learner: Any  # the algorithm's learner carry after the update
    stats: jax.Array  # [num_stats] float32: mean statistics of the steps (zeros: none)
    buffer: Any  # the replay with the update's steps
    env_steps: jax.Array  # [] int32: env steps taken after the update
    gradient_steps: jax.Array  # [] int32: learner steps taken after the update


def store_and_learn(b: Blocks, state, obs: jax.Array, action: jax.Array, ts: envs.Timestep,
                    learner, learn: Callable, num_stats: int, k_learn: jax.Array,
                    warmup: bool = False) -> Learned:
    """An update's storing and learning: the ``T`` steps (``[T, N, ...]``) go to the
    replay, then ``learn(learner, buffer, k_learn, hparams) -> (learner, stats
    [num_stats])`` runs (``lax.cond``) once past ``learning_starts`` with a batch in the
    replay, taking ``cfg.gradient_steps_per_update`` steps. ``warmup=True`` leaves the
    learning branch out (it cannot run in ``Config.warmup_updates``)."""
    cfg, buf = b.cfg, b.buf
    buffer = buf.add(state.buffer, to_transitions(obs, action, ts))
    env_steps = state.env_steps + cfg.env_steps_per_update
    can_learn = (env_steps >= cfg.learning_starts) & buf.can_sample(buffer, cfg.batch_size)
    skip = functools.partial(skip_learning, num_stats)
    if warmup:  # can_learn is False in every warm-up update
        learner, stats = skip(learner, buffer, k_learn, state.hparams)
    else:
        learner, stats = jax.lax.cond(can_learn, learn, skip, learner, buffer, k_learn,
                                      state.hparams)
    gradient_steps = state.gradient_steps + jnp.where(
        can_learn, cfg.gradient_steps_per_update, 0).astype(jnp.int32)
    return Learned(learner, stats, buffer, env_steps, gradient_steps)


def learner_metrics(b: Blocks, metrics: dict[str, jax.Array], gradient_steps: jax.Array,
                    ts: envs.Timestep) -> dict[str, jax.Array]:
    """An update's metrics: the learner's ``metrics`` and ``gradient_steps`` averaged
    over the data axis, and the episodes that ended in ``ts`` (``[T, N]``)."""
    metrics["gradient_steps"] = gradient_steps.astype(jnp.float32)
    metrics = axes.pmean(metrics, b.cfg.axis_name)
    metrics.update(envs.episode_metrics(ts, b.cfg.axis_name))
    return metrics


def host_learn(learn_steps: Callable, state, traj: host_steps.Rollout, warmup: bool = False):
    """``learn_steps(state, obs, action, ts, k_learn, warmup)`` (an update's storing and
    learning) from a host rollout ``[T, N, ...]``, with the keys the on-device update
    splits."""
    key, _, k_learn = host_steps.update_keys(state.key)
    return learn_steps(state.replace(key=key), traj.obs, traj.action, traj.timestep,
                       k_learn, warmup)


def algorithm(b: Blocks, init: Callable, update: Callable, learn_steps: Callable,
              act: Callable, host_act: Callable, sample: Callable | None = None,
              host_observe: Callable | None = None) -> Algorithm:
    """The :class:`~jaxrl_par.algos.base.Algorithm` of a continuous replay learner:
    ``update(state, warmup=False)`` on device envs, or on host envs the update split at
    the env step (``host_act``, :func:`host_learn` of ``learn_steps`` and, where acting
    carries state, ``host_observe``)."""
    cfg = b.cfg
    learner = functools.partial(host_learn, learn_steps)
    return Algorithm(
        config=cfg,
        init=init,
        update=host.compiled_update if b.on_host else update,
        num_updates=cfg.num_updates,
        env_steps_per_update=cfg.env_steps_per_update,
        act=act,
        sample=sample,
        hyperparams=cfg.sweep,
        warmup_update=functools.partial(update, warmup=True),
        axis_name=cfg.axis_name,
        data_parallel=not b.on_host,
        warmup_updates=cfg.warmup_updates,
        host_steps=HostSteps(host_act, learner, functools.partial(learner, warmup=True),
                             host_observe, off_policy=True) if b.on_host else None,
    )
