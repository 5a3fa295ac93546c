"""IMPALA (Espeholt et al. 2018, https://arxiv.org/abs/1802.01561).

The actor-learner paradigm with its policy lag corrected by V-trace, written as one pure
``update`` so that the runner scans, vmaps (seeds, sweeps) and shards (devices) it like
any other algorithm:

* **Actors**: ``num_envs`` vectorised envs act ``num_steps`` steps (the unroll) with the
  *copy* of the parameters they last pulled from the learner, and record the behaviour
  policy's log-probabilities and the copy's *version* (the learner step it was pulled at).
* **Learner**: ``num_minibatches`` gradient steps per update over the actors'
  trajectories (minibatch ``m`` holds the whole unrolls of envs ``m, m + M, ...``). Each
  step computes V-trace targets ``v_s`` and advantages with its current parameters
  (:func:`jaxrl_par.losses.returns.vtrace`) and descends ``-rho_s A_s log pi(a_s | x_s) +
  vf_coef * 0.5 (v_s - V(x_s))^2 - ent_coef * H(pi(. | x_s))``.
* The actors pull the learner's parameters every ``actor_sync_period`` learner steps.
  The policy lag of each trajectory (learner steps between the version that acted it
  and the parameters that learn from it) is computed from the versions and reported,
  with the importance weights ``pi / mu`` that V-trace truncates.

With ``pipeline=True`` (the default) the trajectories acted in update ``u`` are learned
from in update ``u + 1`` (the first ones are acted in ``init``), so an update's acting
and learning do not depend on each other: ``update`` computes both on one device, and
``train(..., actor_learner=True)`` (:mod:`jaxrl_par.parallel.actor_learner`) runs the
actors on one device and the learner on another at the same time (the Sebulba layout),
with the same numbers. Each trajectory is then at least one learner step old. With
``pipeline=False`` an update acts and then learns from what it acted; with
``actor_sync_period=1`` that is on-policy (lag 0, an A2C with V-trace's targets).

With ``env="gymnasium:<id>"`` (:mod:`jaxrl_par.envs.host`) the actors step gymnasium
envs from Python in the actor-learner runtime (``train(..., actor_learner=True)``)
while the learner's program runs: Sebulba's layout for simulators that are not JAX.

With ``axis_name`` set (data parallelism), each device acts its share of the envs with
the global batch's randomness, minibatch ``m`` is the union of the shards' minibatches
``m``, and gradients and metrics are averaged over the axis, so N devices train as one.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl_par import axes, envs
from jaxrl_par.algos import hyper
from jaxrl_par.algos.actor_critic import (
    LOSS_METRICS,
    ActorCriticBlocks,
    Trajectory,
    vtrace_loss,
)
from jaxrl_par.algos.base import (
    Algorithm,
    HostActing,
    Pipeline,
    annealed_adam,
    pipelined_update,
)
from jaxrl_par.algos.config import RolloutSchedule
from jaxrl_par.algos.fields import (
    ActorCriticLoss,
    ActorCriticNetwork,
    ActorLearner,
    Annealing,
    DataParallel,
    Minibatches,
    Optimizer,
    Pipelined,
    RolloutLength,
    Run,
    Vectorized,
    configclass,
    field,
)
from jaxrl_par.blocks.normalization import RunningStats, init_reward_scaling, scale_rewards
from jaxrl_par.blocks.rollouts import (
    env_action,
    host_policy,
    host_policy_rollout,
    policy_rollout,
    zero_bootstrap,
)
from jaxrl_par.envs import host
from jaxrl_par.losses.returns import GAE_METHODS
from jaxrl_par.networks import ActorCritic, make_policy


@configclass
class Config(RolloutSchedule, DataParallel, ActorCriticNetwork, Pipelined, ActorLearner,
             ActorCriticLoss, Annealing, Optimizer, Minibatches, RolloutLength, Vectorized,
             Run):
    """IMPALA hyperparameters. The defaults solve CartPole-v1 within 5e5 env steps."""

    #: Fields a sweep can vary per lane (``sweep``; see ``jaxrl_par.algos.hyper``).
    SWEEPABLE: ClassVar[tuple] = ("learning_rate", "gamma", "vtrace_lambda", "rho_bar",
                                  "c_bar", "vf_coef", "ent_coef", "max_grad_norm")
    SWEEP_POSITIVE: ClassVar[tuple] = ("max_grad_norm",)  # 0 turns clipping off

    num_envs: int = 16
    num_steps: int = 32
    learning_rate: float = 1e-3
    num_minibatches: int = 2
    vtrace_lambda: float = field(1.0, "V-trace's lambda", range="unit_interval")
    rho_bar: float = field(1.0, "truncation of the importance weights in the targets and "
                           "the policy gradient", range="positive")
    c_bar: float = field(1.0, "truncation of the trace's importance weights",
                         range="positive")
    pipeline: bool = True
    off_policy_correction: bool = field(
        True, "false: V-trace with every importance weight taken as 1, the lag left "
        "uncorrected (an ablation; the weights are still computed and reported)")
    vtrace_method: str = field("auto", "V-trace's backward recursion (see "
                               "returns.gae_advantages)")

    def __post_init__(self):
        hyper.check_sweep(self)
        envs.check_env_id(self.env)
        if host.is_host(self.env) and not (self.pipeline and self.axis_name is None):
            raise ValueError(f"impala.Config(env={self.env!r}): host envs are stepped by the "
                             "actor-learner runtime: keep pipeline=True and train with "
                             "actor_learner=True (CLI: --actor-learner), on one process "
                             "without a data axis")
        if self.num_envs % self.num_minibatches:
            raise ValueError(
                f"num_minibatches={self.num_minibatches} does not divide num_envs="
                f"{self.num_envs}: each learner step takes the whole unrolls of "
                "num_envs/num_minibatches envs; pick a divisor of num_envs")
        if self.vtrace_method not in GAE_METHODS:
            raise ValueError(f"vtrace_method={self.vtrace_method!r}; choose from {GAE_METHODS}")
        self.check_actor_critic()


@struct.dataclass
class ActorHalf:
    """The actors' part of :class:`State` (see :func:`jaxrl_par.algos.base.pipelined_update`)."""

    env_state: envs.EnvState  # leaves [N_local, ...]; None on host envs
    key: jax.Array  # the actors' key stream (the learner draws nothing)


@struct.dataclass
class LearnerHalf:
    """The learner's part of :class:`State`; it owns the actors' parameter copy too."""

    params: dict
    opt_state: optax.OptState
    actor_params: dict  # the actors' copy of params
    actor_version: jax.Array  # [] int32: learner step of the actors' copy
    learner_steps: jax.Array  # [] int32
    update_count: jax.Array  # [] int32
    # With reward normalisation (else None): the learner's statistics of the discounted
    # returns, and each env's running return [N_local].
    reward_stats: RunningStats | None = None
    discounted_return: jax.Array | None = None
    hparams: dict | None = None  # the swept fields while split from the State, else None


@struct.dataclass
class State:
    """IMPALA's training state: the actors' half and the learner's half."""

    actor: ActorHalf
    learner: LearnerHalf
    pending: Trajectory | None = None  # pipeline only: acted last update, learned now
    hparams: dict | None = None  # the swept fields, float32 [] each (None: no sweep)

    @property
    def params(self) -> dict:
        """The learner's parameters (what ``act`` and evaluation use)."""
        return self.learner.params


class Blocks(ActorCriticBlocks):
    """What IMPALA's parts share: the config, the env spec and the actor-critic."""


def optimizer(cfg: Config, hp) -> optax.GradientTransformation:
    """Adam for the values ``hp`` (the config, or :func:`hyper.view` of a lane), its
    learning rate annealed over the run's learner steps with ``anneal_lr``."""
    return annealed_adam(hp.learning_rate, hp.max_grad_norm,
                         cfg.anneal_steps(cfg.num_updates * cfg.num_minibatches),
                         final_learning_rate=cfg.final_learning_rate)


def init_halves(b: Blocks, key: jax.Array) -> State:
    """The state before the first update: fresh envs, initial parameters (the actors'
    copy at version 0) and reward statistics."""
    cfg = b.cfg
    k_params, k_env, k_actors = jax.random.split(key, 3)
    reward_stats, discounted_return = init_reward_scaling(
        b.normalize_rewards, axes.local_size(cfg.num_envs, cfg.axis_name))
    params = b.network.init(k_params, jnp.zeros((1,) + b.spec.observation_shape))
    actor = ActorHalf(
        env_state=None if b.on_host else b.local_env().reset(
            axes.shard_keys(k_env, cfg.num_envs, cfg.axis_name)),
        key=k_actors)
    learner = LearnerHalf(
        params=params, opt_state=optimizer(cfg, cfg).init(params), actor_params=params,
        actor_version=jnp.int32(0), learner_steps=jnp.int32(0),
        update_count=jnp.int32(0), reward_stats=reward_stats,
        discounted_return=discounted_return)
    return State(actor, learner, hparams=hyper.init(cfg))


def act_part(b: Blocks, actor: ActorHalf, copy) -> tuple[ActorHalf, Trajectory, dict]:
    """One update's acting with the actors' ``copy`` ``(params, version)``: ``num_steps``
    steps of every env. Returns the actors' half, the trajectory ``[T, N_local, ...]``
    and the episode metrics."""
    cfg = b.cfg
    params, version = copy
    key, k_roll = jax.random.split(actor.key)
    env_state, (obs, action, log_prob, ts) = policy_rollout(
        b.local_env(), lambda o: b.network.apply(params, o, method=ActorCritic.actor),
        actor.env_state, k_roll, cfg.num_envs, cfg.num_steps, cfg.axis_name)
    acted = Trajectory(obs, action, log_prob, ts.reward,
                       zero_bootstrap(ts.terminated, ts.truncated, cfg.bootstrap_truncation),
                       ts.truncated, ts.final_obs, version)
    return ActorHalf(env_state, key), acted, envs.episode_metrics(ts, cfg.axis_name)


def minibatches(cfg: Config, acted: Trajectory) -> Trajectory:
    """``[M, T, N_local / M, ...]``: minibatch ``m`` holds envs ``m, m + M, ...``, so
    on a data axis it is the union of the shards' minibatches ``m``."""
    m = cfg.num_minibatches
    n_local = acted.reward.shape[1]
    if n_local % m:
        raise ValueError(
            f"num_minibatches={m} does not divide the {n_local} envs of each device "
            f"(num_envs={cfg.num_envs} over {axes.axis_size(cfg.axis_name)} devices); "
            "pick num_envs a multiple of devices * num_minibatches")

    def split_envs(x):
        return jnp.moveaxis(x.reshape(x.shape[:1] + (n_local // m, m) + x.shape[2:]), 2, 0)

    fields = {f.name: getattr(acted, f.name) for f in dataclasses.fields(acted)
              if f.name != "version"}
    return acted.replace(version=jnp.broadcast_to(acted.version, (m,)),
                         **jax.tree.map(split_envs, fields))


def learn_part(b: Blocks, learner: LearnerHalf, acted: Trajectory) -> tuple[LearnerHalf, dict]:
    """One update's learning from ``acted``: ``num_minibatches`` V-trace steps; hands the
    actors a fresh parameter copy every ``actor_sync_period`` learner steps."""
    cfg = b.cfg
    steps_per_update = cfg.num_minibatches
    hp = hyper.view(cfg, learner.hparams)
    reward_stats, discounted_return = learner.reward_stats, learner.discounted_return
    if b.normalize_rewards:  # trajectories reach the learner in order, env by env
        reward, reward_stats, discounted_return = scale_rewards(
            reward_stats, discounted_return, acted.reward,
            acted.terminated | acted.truncated, hp.gamma, cfg.axis_name)
        acted = acted.replace(reward=reward)

    def loss_fn(params, mb: Trajectory):
        return vtrace_loss(b.network, params, mb, hp, method=cfg.vtrace_method,
                           off_policy_correction=cfg.off_policy_correction)

    def step(carry, mb):
        params, opt_state, sums = carry
        grads, info = jax.grad(loss_fn, has_aux=True)(params, mb)
        grads = axes.pmean(grads, cfg.axis_name)
        updates, opt_state = optimizer(cfg, hp).update(grads, opt_state, params)
        sums = sums + jnp.stack([info[name] for name in LOSS_METRICS])
        return (optax.apply_updates(params, updates), opt_state, sums), None

    zeros = jnp.zeros((len(LOSS_METRICS),), jnp.float32)
    (params, opt_state, sums), _ = jax.lax.scan(
        step, (learner.params, learner.opt_state, zeros), minibatches(cfg, acted))
    learner_steps = learner.learner_steps + steps_per_update
    sync = learner_steps - learner.actor_version >= cfg.actor_sync_period
    metrics = dict(zip(LOSS_METRICS, sums / steps_per_update, strict=True))
    metrics = axes.pmean(metrics, cfg.axis_name)
    # The mean over this update's learner steps of (its step - the acting version).
    metrics["policy_lag"] = ((learner.learner_steps - acted.version).astype(jnp.float32)
                             + (steps_per_update - 1) / 2)
    metrics["learner_steps"] = learner_steps.astype(jnp.float32)
    learner = LearnerHalf(
        params=params, opt_state=opt_state,
        actor_params=jax.tree.map(lambda a, b: jnp.where(sync, a, b), params,
                                  learner.actor_params),
        actor_version=jnp.where(sync, learner_steps, learner.actor_version),
        learner_steps=learner_steps, update_count=learner.update_count + 1,
        reward_stats=reward_stats, discounted_return=discounted_return,
        hparams=learner.hparams)
    return learner, metrics


# -- the pipeline's four parts (see jaxrl_par.algos.base.pipelined_update) ---------------


def split(state: State):
    """The halves (the learner's with the lane's swept values) and the actors' copy."""
    learner = state.learner.replace(hparams=state.hparams)
    return state.actor, (learner.actor_params, learner.actor_version), learner, state.pending


def join(actor: ActorHalf, learner: LearnerHalf, pending: Trajectory | None) -> State:
    return State(actor, learner.replace(hparams=None), pending, learner.hparams)


def pipeline_learner(b: Blocks, learner: LearnerHalf, pending: Trajectory):
    learner, metrics = learn_part(b, learner, pending)
    return learner, (learner.actor_params, learner.actor_version), metrics


def fused_update(b: Blocks, state: State) -> tuple[State, dict[str, jax.Array]]:
    """Act, then learn from what was acted, within one update."""
    actor, copy, learner, _ = split(state)
    actor, acted, actor_metrics = act_part(b, actor, copy)
    learner, learner_metrics = learn_part(b, learner, acted)
    return join(actor, learner, None), {**learner_metrics, **actor_metrics}


def make(config: Config) -> Algorithm:
    """Builds IMPALA's pure ``init`` and ``update`` for ``config``: actors and a V-trace
    learner, fused in one update or pipelined by one update (``pipeline``); on
    gymnasium envs the actors are host code for the actor-learner runtime."""
    cfg = config
    on_host = host.is_host(cfg.env)
    spec = host.spec(cfg.env) if on_host else envs.make(cfg.env, 1)
    b = Blocks(cfg, spec, cfg.actor_critic(spec), on_host)
    greedy = make_policy(b.network, deterministic=True)
    pipeline = Pipeline(split=split, learner=functools.partial(pipeline_learner, b),
                        join=join, actor=None if on_host else functools.partial(act_part, b))

    def init(key: jax.Array) -> State:
        state = init_halves(b, key)
        if not cfg.pipeline:
            return state
        if on_host:  # placeholder shapes: the runtime acts the first trajectories
            return state.replace(pending=_empty_trajectory(cfg, spec))
        # The pipeline's first trajectories are acted here, so update 0 has some to learn.
        actor, copy, learner, _ = split(state)
        actor, acted, _ = pipeline.actor(actor, copy)
        return join(actor, learner, acted)

    if on_host:
        update = host.compiled_update
    else:
        update = pipelined_update(pipeline) if cfg.pipeline else functools.partial(
            fused_update, b)

    def act(state: State, obs: jax.Array, key: jax.Array) -> jax.Array:
        """The learner's distribution's mode, as the env gets it."""
        action, _ = greedy(state.params, obs, key)
        return env_action(spec, action)

    def sample(state: State, obs: jax.Array, key: jax.Array) -> jax.Array:
        """An action drawn from the learner's distribution, as the env gets it."""
        action, _ = make_policy(b.network)(state.params, obs, key)
        return env_action(spec, action)

    return Algorithm(
        config=cfg,
        init=init,
        update=update,
        num_updates=cfg.num_updates,
        env_steps_per_update=cfg.batch_size,
        act=act,
        sample=sample,
        hyperparams=cfg.sweep,
        axis_name=cfg.axis_name,
        data_parallel=True,
        pipeline=pipeline if cfg.pipeline else None,
        host=_host_actor(cfg, spec, b.network) if on_host else None,
    )


def _empty_trajectory(cfg: Config, spec) -> Trajectory:
    """Zeros of one update's trajectory shapes ``[T, N, ...]`` (version -1)."""
    t, n = cfg.num_steps, cfg.num_envs
    obs = jnp.zeros((t, n) + tuple(spec.observation_shape), jnp.float32)
    action = (jnp.zeros((t, n), jnp.int32) if spec.discrete
              else jnp.zeros((t, n, spec.num_actions), jnp.float32))
    zeros, false = jnp.zeros((t, n), jnp.float32), jnp.zeros((t, n), bool)
    return Trajectory(obs, action, zeros, zeros, false, false, obs, jnp.int32(-1))


def _host_actor(cfg: Config, spec, network) -> HostActing:
    """IMPALA's actors on host envs (:mod:`jaxrl_par.envs.host`), for the actor-learner
    runtime (:mod:`jaxrl_par.parallel.actor_learner`), which runs them in Python while
    the learner's program runs on its device (Sebulba's layout): each lane's envs seeded
    from its actor key, and a step of one update's ``num_steps`` steps of every env with
    the copy ``(params, version)``, one compiled policy call per step for all lanes, as
    the compiled actors' half does.
    """

    act_lanes = jax.jit(jax.vmap(host_policy(network, spec)))

    def host_actor(lanes: list, actor: ActorHalf, copy):
        params, version = copy
        key, records, episodes = host_policy_rollout(lanes, act_lanes, params, actor.key,
                                                     cfg.num_steps, cfg.bootstrap_truncation)
        return actor.replace(key=key), Trajectory(**records, version=version), episodes

    return HostActing(make_envs=functools.partial(host.lane_envs, cfg.env, cfg.num_envs),
                      step=host_actor)
