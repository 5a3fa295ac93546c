"""Proximal Policy Optimization (Schulman et al. 2017, arXiv:1707.06347).

The synchronous-actors paradigm: ``num_envs`` vectorised environments act with the
current policy for ``num_steps``, then the learner runs ``update_epochs`` passes of
``num_minibatches`` clipped-surrogate steps over that batch. Everything is one pure
``update(state)``, so the runner scans, vmaps (seeds) and shards (devices) it.

Data-parallel exactness: randomness is drawn for the *global* batch of envs (action noise
as one array, env keys from one split) and sliced per shard, and minibatches take
``num_steps / num_minibatches`` time steps from every env (a per-env permutation), so a
minibatch is the union of the shards' minibatches.
With ``axis_name`` set, gradients, advantage statistics, observation and return
statistics and metrics are averaged over that axis, and training on N devices equals
training on one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl_par import axes, envs
from jaxrl_par.algos import hyper
from jaxrl_par.algos.actor_critic import ActorCriticBlocks
from jaxrl_par.algos.base import Algorithm, HostSteps, annealed_adam
from jaxrl_par.algos.config import RolloutSchedule
from jaxrl_par.algos.fields import (
    ActorCriticLoss,
    ActorCriticNetwork,
    Annealing,
    DataParallel,
    Minibatches,
    Optimizer,
    RolloutLength,
    Run,
    Vectorized,
    configclass,
    field,
)
from jaxrl_par.blocks import host_steps
from jaxrl_par.blocks.normalization import (
    RunningStats,
    init_reward_scaling,
    init_stats,
    normalize,
    scale_rewards,
    update_stats,
)
from jaxrl_par.blocks.rollouts import env_action, policy_rollout, zero_bootstrap
from jaxrl_par.envs import host
from jaxrl_par.losses.policy_gradient import (
    actor_critic_loss,
    approx_kl,
    clipped_surrogate_loss,
    clipped_value_loss,
    value_loss,
)
from jaxrl_par.losses.returns import GAE_METHODS, gae_advantages
from jaxrl_par.networks import (
    ActorCritic,
    PolicyExtras,
    make_policy,
)

# What `ppo_loss` reports; `update` returns their means over the update's minibatch steps.
LOSS_METRICS = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


@configclass
class Config(RolloutSchedule, DataParallel, ActorCriticNetwork, ActorCriticLoss, Annealing,
             Optimizer, Minibatches, RolloutLength, Vectorized, Run):
    """PPO hyperparameters. Defaults solve CartPole-v1 in 5e5 steps (PureJaxRL's)."""

    #: Fields a sweep can vary per lane (``sweep``; see ``jaxrl_par.algos.hyper``).
    SWEEPABLE: ClassVar[tuple] = ("learning_rate", "gamma", "gae_lambda", "clip_eps",
                                  "vf_coef", "ent_coef", "max_grad_norm")
    SWEEP_POSITIVE: ClassVar[tuple] = ("max_grad_norm",)  # 0 turns clipping off

    update_epochs: int = field(4, "passes over each update's batch", range="positive")
    gae_lambda: float = field(0.95, "GAE's lambda", range="unit_interval")
    clip_eps: float = field(0.2, "clipping of the probability ratio (and of the value "
                            "change with clip_value_loss)", range="non_negative")
    clip_value_loss: bool = field(True, "clip the value loss as the policy's ratio")
    normalize_advantages: bool = field(True, "normalise advantages per minibatch (global "
                                       "over devices)")
    normalize_obs: bool = field(False, "normalise observations by their running mean/std")
    gae_method: str = field("auto", 'GAE\'s backward recursion: "scan", "associative", or '
                            '"auto" (the scan on CPU, the associative form on GPU/TPU)')

    def __post_init__(self):
        hyper.check_sweep(self)
        envs.check_env_id(self.env)
        if self.num_steps % self.num_minibatches:
            raise ValueError(
                f"num_minibatches={self.num_minibatches} does not divide num_steps="
                f"{self.num_steps}: each minibatch takes num_steps/num_minibatches steps of "
                "every env; pick a divisor of num_steps"
            )
        if self.gae_method not in GAE_METHODS:
            raise ValueError(f"gae_method={self.gae_method!r}; choose from {GAE_METHODS}")
        self.check_actor_critic()


@struct.dataclass
class State:
    params: dict
    opt_state: optax.OptState
    env_state: envs.EnvState  # leaves [N_local, ...]
    obs_stats: RunningStats
    key: jax.Array
    update_count: jax.Array  # [] int32
    # With reward normalisation (else None: no leaves, so older checkpoints still load):
    reward_stats: RunningStats | None = None  # of the discounted returns, shape []
    discounted_return: jax.Array | None = None  # [N_local] each env's running return
    hparams: dict | None = None  # the swept fields, float32 [] each (None: no sweep)


class Batch(NamedTuple):
    """One rollout, time-major ``[T, N_local, ...]``."""

    obs: jax.Array  # observations acted on (normalised if enabled)
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array  # lambda-returns, the value target


class Blocks(ActorCriticBlocks):
    """What PPO's parts share: the config, the env spec and the actor-critic."""

    def prepare(self, stats: RunningStats, obs: jax.Array) -> jax.Array:
        """``obs`` as the network sees them: normalised by ``stats`` with
        ``normalize_obs``, else as they are."""
        return normalize(stats, obs) if self.cfg.normalize_obs else obs


def make_blocks(config: Config) -> Blocks:
    """PPO's :class:`Blocks` for ``config``."""
    spec = envs.spec(config.env)
    return Blocks(config, spec, config.actor_critic(spec), host.is_host(config.env))


def make_rollout(config: Config) -> Callable[[State, jax.Array], tuple]:
    """``rollout(state, key) -> (env_state, (obs, action, extras, ts))``: one update's
    acting (:func:`rollout`)."""
    return functools.partial(rollout, make_blocks(config))


def rollout(b: Blocks, state: State, key: jax.Array):
    """One update's acting: ``num_steps`` steps of every env with the current policy
    (:func:`jaxrl_par.blocks.rollouts.policy_rollout`), on observations normalised by
    ``state.obs_stats`` with ``normalize_obs``. Returns ``(env_state, (obs, action,
    extras, ts))``, records ``[T, N_local, ...]``; ``extras.value`` is None (PPO
    evaluates the critic after the rollout, :func:`critic_values`)."""
    cfg = b.cfg
    prepare = functools.partial(normalize, state.obs_stats) if cfg.normalize_obs else None
    env_state, (obs, action, log_prob, ts) = policy_rollout(
        b.local_env(), functools.partial(b.network.apply, state.params,
                                         method=ActorCritic.actor),
        state.env_state, key, cfg.num_envs, cfg.num_steps, cfg.axis_name, prepare=prepare)
    return env_state, (obs, action, PolicyExtras(log_prob=log_prob, value=None), ts)


def ppo_loss(network: ActorCritic, params, batch: Batch, hp,
             clip_value_loss: bool = True) -> tuple[jax.Array, dict[str, jax.Array]]:
    """PPO's loss on a minibatch (Schulman et al. 2017, arXiv:1707.06347, eq. 9)::

        mean(clipped surrogate) + vf_coef * mean(value loss) - ent_coef * mean(entropy)

    with the clipped surrogate of eq. 7 (:func:`~jaxrl_par.losses.clipped_surrogate_loss`)
    and the value loss clipped around the values the data was collected with
    (:func:`~jaxrl_par.losses.clipped_value_loss`) or not
    (:func:`~jaxrl_par.losses.value_loss`).

    Args:
      network: the actor-critic. params: its parameters, being differentiated.
      batch: a :class:`Batch` of leaves ``[B, ...]``, its advantages already normalised.
      hp: ``clip_eps``, ``vf_coef`` and ``ent_coef`` (a :class:`Config`, or
        :func:`jaxrl_par.algos.hyper.view` of one: traced values in a sweep).
      clip_value_loss: whether the value loss is clipped.

    Returns:
      ``(loss [], info)``, ``info`` holding :data:`LOSS_METRICS` (``clip_fraction``: the
      fraction of ratios more than ``clip_eps`` from 1).
    """
    dist, value = network.apply(params, batch.obs)
    log_ratio = dist.log_prob(batch.action) - batch.log_prob
    ratio = jnp.exp(log_ratio)
    pg_loss = jnp.mean(jax.vmap(clipped_surrogate_loss, (0, 0, None))(
        ratio, batch.advantage, hp.clip_eps))
    if clip_value_loss:
        v_loss = jax.vmap(clipped_value_loss, (0, 0, 0, None))(
            value, batch.value, batch.target, hp.clip_eps)
    else:
        v_loss = jax.vmap(value_loss)(value, batch.target)
    v_loss = jnp.mean(v_loss)
    entropy = jnp.mean(dist.entropy())
    loss = actor_critic_loss(pg_loss, v_loss, entropy, hp.vf_coef, hp.ent_coef)
    return loss, {
        "loss": loss,
        "policy_loss": pg_loss,
        "value_loss": v_loss,
        "entropy": entropy,
        "approx_kl": jnp.mean(jax.vmap(approx_kl)(log_ratio)),
        "clip_fraction": jnp.mean((jnp.abs(ratio - 1) > hp.clip_eps).astype(jnp.float32)),
    }


def optimizer(cfg: Config, hp) -> optax.GradientTransformation:
    """Adam for the values ``hp`` (the config, or :func:`hyper.view` of a lane), its
    learning rate annealed over the run's minibatch steps with ``anneal_lr``. The
    state's structure is the same for every value, so :func:`init_state` builds it
    from the config and :func:`sgd_step` from the lane's values."""
    steps = cfg.num_updates * cfg.update_epochs * cfg.num_minibatches
    return annealed_adam(hp.learning_rate, hp.max_grad_norm, cfg.anneal_steps(steps),
                         eps=1e-5, final_learning_rate=cfg.final_learning_rate)


def init_state(b: Blocks, key: jax.Array) -> State:
    """The state before the first update: the network's initial parameters, fresh
    envs (none on host envs), empty observation statistics and, with reward
    normalisation, empty return statistics."""
    cfg, spec = b.cfg, b.spec
    k_params, k_env, k_run = jax.random.split(key, 3)
    reward_stats, discounted_return = init_reward_scaling(b.normalize_rewards, b.n_local())
    params = b.network.init(k_params, jnp.zeros((1,) + spec.observation_shape))
    return State(
        params=params,
        opt_state=optimizer(cfg, cfg).init(params),
        env_state=None if b.on_host else b.local_env().reset(
            axes.shard_keys(k_env, cfg.num_envs, cfg.axis_name)),
        obs_stats=init_stats(spec.observation_shape),
        key=k_run,
        update_count=jnp.int32(0),
        reward_stats=reward_stats,
        discounted_return=discounted_return,
        hparams=hyper.init(cfg),
    )


def scaled_rewards(b: Blocks, state: State, ts: envs.Timestep, gamma):
    """``(reward [T, N], reward_stats, discounted_return)``: the rollout's rewards
    divided by the std of the discounted returns seen so far, these returns (each
    env's, reset where an episode ends) folded into the statistics first (over all
    devices). Without reward normalisation the rewards and state as they are."""
    if not b.normalize_rewards:
        return ts.reward, state.reward_stats, state.discounted_return
    return scale_rewards(state.reward_stats, state.discounted_return, ts.reward, ts.done,
                         gamma, b.cfg.axis_name)


def normalized_advantages(cfg: Config, adv: jax.Array) -> jax.Array:
    """Advantages ``[B]`` standardised over the whole minibatch (global over devices)
    with ``normalize_advantages``, else as they are."""
    if not cfg.normalize_advantages:
        return adv
    mean = axes.pmean(jnp.mean(adv), cfg.axis_name)
    var = axes.pmean(jnp.mean(jnp.square(adv)), cfg.axis_name) - jnp.square(mean)
    return (adv - mean) / (jnp.sqrt(jnp.maximum(var, 0.0)) + 1e-8)


def sgd_step(b: Blocks, hp, carry, mb: Batch):
    """One minibatch gradient step of :func:`ppo_loss` on ``mb`` (``[T/M, N_local,
    ...]``), gradients averaged over devices. Carry ``(params, opt_state, metric sums
    [len(LOSS_METRICS)])``; no outputs."""
    cfg = b.cfg
    params, opt_state, sums = carry
    mb = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), mb)  # [T/M * N, ...]
    mb = mb._replace(advantage=normalized_advantages(cfg, mb.advantage))
    grads, info = jax.grad(
        functools.partial(ppo_loss, b.network, batch=mb, hp=hp,
                          clip_value_loss=cfg.clip_value_loss), has_aux=True)(params)
    grads = axes.pmean(grads, cfg.axis_name)
    updates, opt_state = optimizer(cfg, hp).update(grads, opt_state, params)
    sums = sums + jnp.stack([info[name] for name in LOSS_METRICS])
    return (optax.apply_updates(params, updates), opt_state, sums), None


def minibatches(cfg: Config, batch: Batch, key: jax.Array) -> Batch:
    """``[M, T/M, N_local, ...]``: one epoch's ``num_minibatches`` minibatches, each
    ``num_steps / num_minibatches`` time steps of every env, drawn by a permutation of
    the time steps per env (keyed by its global index, so on a data axis a minibatch is
    the union of the shards' minibatches)."""
    n_local = batch.action.shape[1]
    env_ids = axes.axis_index(cfg.axis_name) * n_local + jnp.arange(n_local)
    perms = jax.vmap(lambda e: jax.random.permutation(jax.random.fold_in(key, e),
                                                      cfg.num_steps))(env_ids)  # [N, T]
    cols = jnp.arange(n_local)[None, :]
    t_mb = cfg.num_steps // cfg.num_minibatches
    return jax.tree.map(
        lambda x: x[perms.T, cols].reshape((cfg.num_minibatches, t_mb) + x.shape[1:]),
        batch,
    )


def epoch(b: Blocks, hp, batch: Batch, carry, key: jax.Array):
    """One pass over the batch ``[T, N_local, ...]``: :func:`sgd_step` on each of
    :func:`minibatches`. Carry as :func:`sgd_step`'s; no outputs."""
    return jax.lax.scan(functools.partial(sgd_step, b, hp), carry,
                        minibatches(b.cfg, batch, key))


def critic_values(b: Blocks, params, x: jax.Array) -> jax.Array:
    """``[T, N]``: the critic's values of observations ``x`` (``[T, N, ...]``), in one
    batched pass."""
    t, n = x.shape[:2]
    flat_x = x.reshape((t * n,) + x.shape[2:])
    return b.network.apply(params, flat_x, method=ActorCritic.value).reshape(t, n)


def learn(b: Blocks, state: State, traj: host_steps.Rollout, k_learn: jax.Array
          ) -> tuple[State, dict[str, jax.Array]]:
    """An update's learning from its rollout ``[T, N_local, ...]`` (``obs`` as the actor
    saw them), ``state`` holding the envs' state and key after it: GAE advantages and
    lambda-returns (Schulman et al. 2016, arXiv:1506.02438) from the critic's values
    after the rollout, on rewards scaled by :func:`scaled_rewards`, then
    ``update_epochs`` :func:`epoch` passes; the observation statistics take the
    rollout's observations. Returns the new state and the update's metrics."""
    cfg = b.cfg
    hp = hyper.view(cfg, state.hparams)
    obs, action, extras, ts = traj
    # Critic values after the rollout, in large batched passes: V(obs_t) for the
    # advantages, and V(final_obs_t), the bootstrap: it equals the next step's value
    # when the episode goes on and is the truncation bootstrap otherwise.
    value = critic_values(b, state.params, obs)
    bootstrap = critic_values(b, state.params, b.prepare(state.obs_stats, ts.final_obs))
    gae = jax.vmap(functools.partial(gae_advantages, method=cfg.gae_method),
                   in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1)
    reward, reward_stats, discounted_return = scaled_rewards(b, state, ts, hp.gamma)
    terminal = zero_bootstrap(ts.terminated, ts.truncated, cfg.bootstrap_truncation)
    advantage, target = gae(reward, value, bootstrap, terminal, ts.done, hp.gamma,
                            hp.gae_lambda)
    batch = Batch(obs, action, extras.log_prob, value, advantage, target)
    zeros = jnp.zeros((len(LOSS_METRICS),), jnp.float32)
    (params, opt_state, sums), _ = jax.lax.scan(
        functools.partial(epoch, b, hp, batch), (state.params, state.opt_state, zeros),
        jax.random.split(k_learn, cfg.update_epochs),
    )
    obs_stats = state.obs_stats
    if cfg.normalize_obs:
        obs_stats = update_stats(obs_stats, ts.final_obs, cfg.axis_name)
    steps = cfg.update_epochs * cfg.num_minibatches
    metrics = dict(zip(LOSS_METRICS, sums / steps, strict=True))
    metrics = axes.pmean(metrics, cfg.axis_name)
    metrics.update(envs.episode_metrics(ts, cfg.axis_name))
    new_state = State(params, opt_state, state.env_state, obs_stats, state.key,
                      state.update_count + 1, reward_stats, discounted_return,
                      state.hparams)
    return new_state, metrics


def update(b: Blocks, state: State) -> tuple[State, dict[str, jax.Array]]:
    """One update: :func:`rollout`, then :func:`learn` from it."""
    key, k_roll, k_learn = host_steps.update_keys(state.key)
    env_state, (obs, action, extras, ts) = rollout(b, state, k_roll)
    return learn(b, state.replace(env_state=env_state, key=key),
                 host_steps.Rollout(obs, action, extras, ts), k_learn)


def host_act(b: Blocks, state: State, obs: jax.Array, t: jax.Array
             ) -> host_steps.HostAction:
    """Step ``t`` of the rollout on host envs (``obs [N, ...]``): the actor's sample,
    as :func:`policy_rollout` draws it."""
    spec = b.spec
    dist = b.network.apply(state.params, b.prepare(state.obs_stats, obs),
                           method=ActorCritic.actor)
    action, log_prob = host_steps.sample(dist, host_steps.step_key(state.key, t),
                                         obs.shape[0], spec.num_actions, spec.discrete)
    return host_steps.HostAction(action, env_action(spec, action),
                                 PolicyExtras(log_prob=log_prob, value=None))


def host_learn(b: Blocks, state: State, traj: host_steps.Rollout):
    """:func:`learn` from a host rollout ``[T, N, ...]`` of raw observations."""
    key, _, k_learn = host_steps.update_keys(state.key)
    traj = traj._replace(obs=b.prepare(state.obs_stats, traj.obs))
    return learn(b, state.replace(key=key), traj, k_learn)


def act(b: Blocks, state: State, obs: jax.Array, key: jax.Array) -> jax.Array:
    """``[B, ...]``: the distribution's mode for ``obs [B, ...]``, as the env gets it
    (:func:`rollouts.env_action`)."""
    action, _ = make_policy(b.network, deterministic=True)(
        state.params, b.prepare(state.obs_stats, obs), key)
    return env_action(b.spec, action)


def sample(b: Blocks, state: State, obs: jax.Array, key: jax.Array) -> jax.Array:
    """``[B, ...]``: an action drawn from the distribution for ``obs [B, ...]``, as the
    env gets it."""
    action, _ = make_policy(b.network)(state.params, b.prepare(state.obs_stats, obs), key)
    return env_action(b.spec, action)


def make(config: Config) -> Algorithm:
    """Builds PPO's pure ``init`` and ``update`` for ``config``; on host envs, the
    update split at the env step (``host_steps``) instead."""
    cfg = config
    b = make_blocks(cfg)
    return Algorithm(
        config=cfg,
        init=functools.partial(init_state, b),
        update=host.compiled_update if b.on_host else functools.partial(update, b),
        num_updates=cfg.num_updates,
        env_steps_per_update=cfg.batch_size,
        act=functools.partial(act, b),
        sample=functools.partial(sample, b),
        hyperparams=cfg.sweep,
        axis_name=cfg.axis_name,
        data_parallel=not b.on_host,
        host_steps=HostSteps(functools.partial(host_act, b), functools.partial(host_learn, b))
        if b.on_host else None,
    )
