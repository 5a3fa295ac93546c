"""Soft Actor-Critic (Haarnoja et al. 2018, https://arxiv.org/abs/1801.01290 and
https://arxiv.org/abs/1812.05905): the serial replay paradigm for continuous actions.

``num_envs`` vectorised envs act ``num_steps`` steps with the tanh-squashed Gaussian
policy (uniform random actions before ``learning_starts``), the transitions go to a
uniform replay buffer in the state, and the learner takes one gradient step per
``train_frequency`` env steps on a random batch: twin critics regressed on the soft
target ``r + gamma (1 - terminated) (min_k Q'_k(s', a') - alpha log pi(a' | s'))``,
``a' ~ pi(. | s')``, with Polyak-averaged target critics; the actor minimising
``alpha log pi(a | s) - min_k Q_k(s, a)`` (reparameterised); and the temperature
``alpha`` tuned so the policy's entropy tracks ``target_entropy`` (default ``-D``).
Truncated episodes bootstrap from ``final_obs``, terminated ones do not. One ``update``
does the acting and the learning, inside jit.

With ``axis_name`` set (data parallel), each shard keeps its own replay of its envs
(``buffer_size`` and ``batch_size`` are per shard) and gradients are averaged.
"""

from __future__ import annotations

import functools
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl_par import axes, envs, replay
from jaxrl_par.algos import hyper
from jaxrl_par.algos.base import Algorithm, HostSteps, clipped_adam
from jaxrl_par.algos.config import ReplaySchedule
from jaxrl_par.algos.fields import (
    Critics,
    DataParallel,
    Network,
    Optimizer,
    Polyak,
    Replay,
    RolloutLength,
    Run,
    TrainFrequency,
    Vectorized,
    configclass,
    field,
)
from jaxrl_par.blocks import host_steps
from jaxrl_par.blocks.rollouts import policy_rollout
from jaxrl_par.envs import host
from jaxrl_par.losses.soft_actor_critic import (
    soft_actor_loss,
    soft_critic_loss,
    soft_q_target,
    temperature_loss,
)
from jaxrl_par.networks import EnsembleQ, SquashedGaussianActor


@configclass
class Config(ReplaySchedule, DataParallel, Network, Critics, Polyak, TrainFrequency, Replay,
             Optimizer, RolloutLength, Vectorized, Run):
    """SAC hyperparameters: CleanRL's and Stable-Baselines3's (learning rates, batch,
    tau, twin critics, tuned temperature), with 4 envs and rejax's 64-64 networks
    (CleanRL's 256-256 are far dearer on a CPU). The defaults reach a return of about
    -150 on Pendulum-v1 in 3e4 env steps."""

    #: Fields a sweep can vary per lane (``sweep``; see ``jaxrl_par.algos.hyper``).
    SWEEPABLE: ClassVar[tuple] = ("learning_rate", "alpha_learning_rate", "gamma", "tau")

    env: str = "Pendulum-v1"
    total_timesteps: int = 30_000
    num_steps: int = 16
    buffer_size: int = 100_000
    batch_size: int = 256
    learning_starts: int = 5_000  # of uniform random actions
    learning_rate: float = 3e-4  # actor and critics
    max_grad_norm: float = 0.0
    activation: str = "relu"
    train_frequency: int = 1
    alpha_learning_rate: float = field(3e-4, "step size of the temperature",
                                       range="positive")
    tau: float = 0.005  # every gradient step
    init_alpha: float = field(1.0, "initial temperature", range="positive")
    autotune_alpha: bool = field(True, "tune the temperature to target_entropy")
    target_entropy: float | None = field(None, "entropy the temperature aims at (None: "
                                         "minus the action dimensions)")

    def __post_init__(self):
        hyper.check_sweep(self)
        self.check_continuous_actor()
        self.check_train_frequency()
        self.check_replay()


class Transition(NamedTuple):
    """One stored step (no batch axis in the buffer's example)."""

    obs: jax.Array
    action: jax.Array  # [D] as the env took it (inside the box)
    reward: jax.Array
    terminated: jax.Array  # float32 1/0
    next_obs: jax.Array  # the observation reached (final_obs before a reset)


@struct.dataclass
class State:
    actor_params: dict
    critic_params: dict  # [K, ...] leaves: the ensemble
    target_critic_params: dict
    log_alpha: jax.Array  # [] float32
    actor_opt: optax.OptState
    critic_opt: optax.OptState
    alpha_opt: optax.OptState
    env_state: envs.EnvState  # leaves [N_local, ...]
    buffer: object  # uniform replay state
    key: jax.Array
    env_steps: jax.Array  # [] int32: env steps taken, all envs of all shards
    gradient_steps: jax.Array  # [] int32
    update_count: jax.Array  # [] int32
    hparams: dict | None = None  # the swept fields, float32 [] each (None: no sweep)


class _Exploring(NamedTuple):
    """The acting distribution: uniform over the box before ``learning_starts``, the
    policy after (as :func:`jaxrl_par.blocks.rollouts.policy_rollout` uses it: the same
    standard normal noise, mapped through the normal CDF for the uniform draw)."""

    policy: object
    warm: jax.Array  # [] bool: still in the random-action phase

    def sample_with_noise(self, noise):
        low, high = self.policy.low, self.policy.high
        uniform = low + jax.scipy.special.ndtr(noise) * (high - low)
        return jnp.where(self.warm, uniform, self.policy.sample_with_noise(noise))

    def log_prob(self, action):
        return self.policy.log_prob(action)  # not used by SAC's learner


def make(config: Config) -> Algorithm:
    """Builds SAC's pure ``init`` and ``update`` for ``config``."""
    cfg = config
    on_host = host.is_host(cfg.env)  # a vector of host envs (jaxrl_par.parallel.host_loop)
    spec = envs.spec(cfg.env)
    low, high = (jnp.broadcast_to(b, spec.action_shape) for b in spec.action_bounds)
    action_dim = spec.num_actions
    actor = SquashedGaussianActor(action_dim, tuple(float(x) for x in low.ravel()),
                                  tuple(float(x) for x in high.ravel()),
                                  obs_shape=spec.observation_shape,
                                  hidden_sizes=tuple(cfg.hidden_sizes), activation=cfg.activation)
    critic = EnsembleQ(cfg.num_critics, tuple(cfg.hidden_sizes), cfg.activation)
    target_entropy = -float(action_dim) if cfg.target_entropy is None else cfg.target_entropy
    buf = replay.uniform(cfg.buffer_size)

    def optimizers(hp):
        """Adam for the actor, the critics and the temperature, at the values ``hp``."""
        return (clipped_adam(hp.learning_rate, cfg.max_grad_norm),
                clipped_adam(hp.learning_rate, cfg.max_grad_norm),
                optax.adam(hp.alpha_learning_rate))

    def local_env() -> envs.VecEnv:
        return envs.make(cfg.env, axes.local_size(cfg.num_envs, cfg.axis_name))

    def init(key: jax.Array) -> State:
        k_actor, k_critic, k_env, k_run = jax.random.split(key, 4)
        obs0 = jnp.zeros((1,) + spec.observation_shape, spec.observation_dtype)
        actor_params = actor.init(k_actor, obs0)
        critic_params = critic.init(k_critic, obs0, jnp.zeros((1, action_dim)))
        log_alpha = jnp.log(jnp.float32(cfg.init_alpha))
        tx_actor, tx_critic, tx_alpha = optimizers(cfg)
        example = Transition(jnp.zeros(spec.observation_shape, spec.observation_dtype),
                             jnp.zeros((action_dim,)), jnp.float32(0), jnp.float32(0),
                             jnp.zeros(spec.observation_shape, spec.observation_dtype))
        return State(
            actor_params=actor_params, critic_params=critic_params,
            target_critic_params=critic_params, log_alpha=log_alpha,
            actor_opt=tx_actor.init(actor_params), critic_opt=tx_critic.init(critic_params),
            alpha_opt=tx_alpha.init(log_alpha),
            env_state=None if on_host else local_env().reset(
                axes.shard_keys(k_env, cfg.num_envs, cfg.axis_name)),
            buffer=buf.init(example), key=k_run, env_steps=jnp.int32(0),
            gradient_steps=jnp.int32(0), update_count=jnp.int32(0), hparams=hyper.init(cfg))

    def gradient_step(carry, xs, buffer, hp):
        """One learner step on a batch of stored transitions: critics, then the actor
        (against the updated critics), then the temperature, then the targets, each loss
        a batch mean of :mod:`jaxrl_par.losses.soft_actor_critic`'s. Carry ``(actor,
        critic and target parameters, log_alpha, optimiser states)``; output the
        ``[4]`` statistics ``(critic loss, actor loss, mean Q, entropy)``."""
        (actor_params, critic_params, target_params, log_alpha, opts) = carry
        slots, noise = xs  # [B], [2, B, D]
        batch = buf.sample_at(buffer, slots).transitions
        tx_actor, tx_critic, tx_alpha = optimizers(hp)
        actor_opt, critic_opt, alpha_opt = opts
        alpha = jnp.exp(log_alpha)

        next_action, next_log_prob = actor.apply(actor_params, batch.next_obs
                                                 ).sample_and_log_prob(noise[0])
        next_q = jnp.min(critic.apply(target_params, batch.next_obs, next_action), axis=0)
        discount = hp.gamma * (1.0 - batch.terminated)
        target = jax.vmap(soft_q_target, (0, 0, 0, 0, None))(
            batch.reward, discount, next_q, next_log_prob, alpha)  # [B]

        def critic_loss(params):
            q = critic.apply(params, batch.obs, batch.action)  # [K, B]
            loss = jnp.mean(jax.vmap(soft_critic_loss, (1, 0))(q, target))
            return loss, jnp.mean(q)

        (c_loss, q_mean), grads = jax.value_and_grad(critic_loss, has_aux=True)(critic_params)
        grads = axes.pmean(grads, cfg.axis_name)
        updates, critic_opt = tx_critic.update(grads, critic_opt, critic_params)
        critic_params = optax.apply_updates(critic_params, updates)

        def actor_loss(params):
            action, log_prob = actor.apply(params, batch.obs).sample_and_log_prob(noise[1])
            q = jnp.min(critic.apply(critic_params, batch.obs, action), axis=0)
            return jnp.mean(jax.vmap(soft_actor_loss, (0, 0, None))(log_prob, q, alpha)), log_prob

        (a_loss, log_prob), grads = jax.value_and_grad(actor_loss, has_aux=True)(actor_params)
        grads = axes.pmean(grads, cfg.axis_name)
        updates, actor_opt = tx_actor.update(grads, actor_opt, actor_params)
        actor_params = optax.apply_updates(actor_params, updates)

        entropy = -jnp.mean(log_prob)
        if cfg.autotune_alpha:
            # The temperature loss's gradient: the entropy estimate minus target_entropy.
            grad = jax.grad(lambda la: jnp.mean(jax.vmap(temperature_loss, (None, 0, None))(
                la, log_prob, target_entropy)))(log_alpha)
            grad = axes.pmean(grad, cfg.axis_name)
            updates, alpha_opt = tx_alpha.update(grad, alpha_opt, log_alpha)
            log_alpha = log_alpha + updates
        target_params = optax.incremental_update(critic_params, target_params, hp.tau)
        carry = (actor_params, critic_params, target_params, log_alpha,
                 (actor_opt, critic_opt, alpha_opt))
        return carry, jnp.stack([c_loss, a_loss, q_mean, entropy])

    def learn(carry, buffer, key, hparams):
        hp = hyper.view(cfg, hparams)
        g = cfg.gradient_steps_per_update
        k_slots, k_noise = jax.random.split(key)
        slots = jax.random.randint(k_slots, (g, cfg.batch_size), 0, buffer.size)
        noise = jax.random.normal(k_noise, (g, 2, cfg.batch_size, action_dim))
        carry, stats = jax.lax.scan(lambda c, x: gradient_step(c, x, buffer, hp), carry,
                                    (slots, noise))
        return carry, jnp.mean(stats, axis=0)

    def skip(carry, buffer, key, hparams):
        return carry, jnp.zeros(4, jnp.float32)

    def update(state: State, warmup: bool = False) -> tuple[State, dict[str, jax.Array]]:
        """One update; ``warmup=True`` leaves out the learning branch, for the updates in
        which it cannot run (``Config.warmup_updates``): the same result, cheaper under a
        vmap, where the ``lax.cond`` below computes both branches."""
        key, k_act, k_learn = host_steps.update_keys(state.key)
        env_state, (obs, action, _, ts) = policy_rollout(
            local_env(), functools.partial(exploring, state), state.env_state, k_act,
            cfg.num_envs, cfg.num_steps, cfg.axis_name)
        return learn_steps(state.replace(env_state=env_state, key=key), obs, action, ts,
                           k_learn, warmup)

    def exploring(state: State, obs: jax.Array) -> _Exploring:
        """The acting distribution of the state's next update at ``obs``."""
        warm = state.env_steps < cfg.learning_starts
        return _Exploring(actor.apply(state.actor_params, obs), warm)

    def learn_steps(state: State, obs, action, ts: envs.Timestep, k_learn: jax.Array,
                    warmup: bool = False) -> tuple[State, dict[str, jax.Array]]:
        """An update's storing and learning from its ``T`` steps (``[T, N, ...]``),
        ``state`` holding the envs' state and key after them."""

        def flat(x):
            return x.reshape((-1,) + x.shape[2:])

        transitions = Transition(flat(obs), flat(action), flat(ts.reward),
                                 flat(ts.terminated).astype(jnp.float32), flat(ts.final_obs))
        buffer = buf.add(state.buffer, transitions)
        env_steps = state.env_steps + cfg.env_steps_per_update
        can_learn = (env_steps >= cfg.learning_starts) & buf.can_sample(buffer, cfg.batch_size)
        carry = (state.actor_params, state.critic_params, state.target_critic_params,
                 state.log_alpha, (state.actor_opt, state.critic_opt, state.alpha_opt))
        if warmup:  # can_learn is False in every warm-up update
            carry, stats = skip(carry, buffer, k_learn, state.hparams)
        else:
            carry, stats = jax.lax.cond(can_learn, learn, skip, carry, buffer, k_learn,
                                        state.hparams)
        actor_params, critic_params, target_params, log_alpha, opts = carry
        gradient_steps = state.gradient_steps + jnp.where(
            can_learn, cfg.gradient_steps_per_update, 0).astype(jnp.int32)
        metrics = dict(zip(("critic_loss", "actor_loss", "q_mean", "entropy"), stats,
                           strict=True))
        metrics["alpha"] = jnp.exp(log_alpha)
        metrics["gradient_steps"] = gradient_steps.astype(jnp.float32)
        metrics = axes.pmean(metrics, cfg.axis_name)
        metrics.update(envs.episode_metrics(ts, cfg.axis_name))
        new_state = State(actor_params, critic_params, target_params, log_alpha, *opts,
                          state.env_state, buffer, state.key, env_steps, gradient_steps,
                          state.update_count + 1, state.hparams)
        return new_state, metrics

    def host_act(state: State, obs: jax.Array, t: jax.Array) -> host_steps.HostAction:
        """Step ``t`` of the update on host envs, drawn as :func:`policy_rollout` draws."""
        action, _ = host_steps.sample(exploring(state, obs), host_steps.step_key(state.key, t),
                                      obs.shape[0], action_dim, False)
        return host_steps.HostAction(action, action)

    def host_learn(state: State, traj: host_steps.Rollout, warmup: bool = False):
        """:func:`learn_steps` from a host rollout."""
        key, _, k_learn = host_steps.update_keys(state.key)
        return learn_steps(state.replace(key=key), traj.obs, traj.action, traj.timestep,
                           k_learn, warmup)

    def act(state: State, obs: jax.Array, key: jax.Array) -> jax.Array:
        """The policy's mode: the squashed mean, inside the action box."""
        del key
        return actor.apply(state.actor_params, obs).mode()

    def sample(state: State, obs: jax.Array, key: jax.Array) -> jax.Array:
        """An action drawn from the squashed Gaussian, inside the action box."""
        dist = actor.apply(state.actor_params, obs)
        return dist.sample_with_noise(jax.random.normal(key, dist.mean.shape))

    return Algorithm(
        config=cfg,
        init=init,
        update=host.compiled_update if on_host else update,
        num_updates=cfg.num_updates,
        env_steps_per_update=cfg.env_steps_per_update,
        act=act,
        sample=sample,
        hyperparams=cfg.sweep,
        warmup_update=functools.partial(update, warmup=True),
        axis_name=cfg.axis_name,
        data_parallel=not on_host,
        warmup_updates=cfg.warmup_updates,
        host_steps=HostSteps(host_act, host_learn, functools.partial(host_learn, warmup=True))
        if on_host else None,
    )
