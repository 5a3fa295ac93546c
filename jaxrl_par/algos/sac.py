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

from jaxrl_par import axes, envs
from jaxrl_par.algos import continuous_common, hyper
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.algos.config import ReplaySchedule
from jaxrl_par.algos.continuous_common import (
    Blocks,
    Transition,
    algorithm,
    apply_gradients,
    critic_step,
    init_parts,
    learner_metrics,
    make_blocks,
    store_and_learn,
)
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
from jaxrl_par.losses.soft_actor_critic import soft_actor_loss, soft_q_target, temperature_loss
from jaxrl_par.networks import SquashedGaussianActor


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


STATS = ("critic_loss", "actor_loss", "q_mean", "entropy")  # a learner step's statistics


class Learner(NamedTuple):
    """The learner's carry through an update's gradient steps."""

    actor_params: dict
    critic_params: dict  # [K, ...] leaves
    target_critic_params: dict
    log_alpha: jax.Array  # [] float32
    actor_opt: optax.OptState
    critic_opt: optax.OptState
    alpha_opt: optax.OptState


def target_entropy(b: Blocks) -> float:
    """The entropy the temperature aims at: ``cfg.target_entropy``, or ``-D``."""
    cfg = b.cfg
    return -float(b.action_dim) if cfg.target_entropy is None else cfg.target_entropy


def optimizers(b: Blocks, hp):
    """Adam for the actor, the critics and the temperature, at the values ``hp`` (the
    config, or a lane's :func:`jaxrl_par.algos.hyper.view`)."""
    return (*continuous_common.optimizers(b, hp), optax.adam(hp.alpha_learning_rate))


def init_state(b: Blocks, key: jax.Array) -> State:
    """The state before the first update: fresh envs (none on host envs), an empty
    replay, the networks' initial parameters (the critics' as their targets) and the
    temperature at ``init_alpha``."""
    cfg = b.cfg
    parts = init_parts(b, key)
    log_alpha = jnp.log(jnp.float32(cfg.init_alpha))
    tx_actor, tx_critic, tx_alpha = optimizers(b, cfg)
    return State(
        actor_params=parts.actor_params, critic_params=parts.critic_params,
        target_critic_params=parts.critic_params, log_alpha=log_alpha,
        actor_opt=tx_actor.init(parts.actor_params),
        critic_opt=tx_critic.init(parts.critic_params), alpha_opt=tx_alpha.init(log_alpha),
        env_state=parts.env_state, buffer=parts.buffer, key=parts.key,
        env_steps=jnp.int32(0), gradient_steps=jnp.int32(0), update_count=jnp.int32(0),
        hparams=hyper.init(cfg))


def soft_target(b: Blocks, hp, actor_params, target_critic_params, batch: Transition,
                noise: jax.Array, alpha: jax.Array) -> jax.Array:
    """``[B]``: the soft bootstrap ``r + gamma (1 - terminated) (min_k Q'_k(s', a') -
    alpha log pi(a' | s'))`` of the stored ``batch``, ``a'`` the policy's sample at
    ``s'`` from the standard normal ``noise [B, D]``."""
    next_action, next_log_prob = b.actor.apply(actor_params, batch.next_obs
                                               ).sample_and_log_prob(noise)
    next_q = jnp.min(b.critic.apply(target_critic_params, batch.next_obs, next_action),
                     axis=0)
    discount = hp.gamma * (1.0 - batch.terminated)
    return jax.vmap(soft_q_target, (0, 0, 0, 0, None))(
        batch.reward, discount, next_q, next_log_prob, alpha)


def actor_loss(b: Blocks, params, critic_params, obs: jax.Array, noise: jax.Array,
               alpha: jax.Array):
    """``(loss, log_prob [B])``: the batch mean of ``alpha log pi(a | s) - min_k
    Q_k(s, a)`` at ``obs [B, ...]``, ``a`` the reparameterised sample from the standard
    normal ``noise [B, D]``."""
    action, log_prob = b.actor.apply(params, obs).sample_and_log_prob(noise)
    q = jnp.min(b.critic.apply(critic_params, obs, action), axis=0)
    return jnp.mean(jax.vmap(soft_actor_loss, (0, 0, None))(log_prob, q, alpha)), log_prob


def temperature_objective(b: Blocks, log_alpha: jax.Array, log_prob: jax.Array):
    """The batch mean of the temperature loss at ``log_prob [B]``: its gradient in
    ``log_alpha`` is the entropy estimate minus the target entropy."""
    return jnp.mean(jax.vmap(temperature_loss, (None, 0, None))(log_alpha, log_prob,
                                                                target_entropy(b)))


def gradient_step(b: Blocks, hp, buffer, learner: Learner, xs):
    """One learner step on a batch of stored transitions: critics, then the actor
    (against the updated critics), then the temperature (with ``autotune_alpha``), then
    the targets, each loss a batch mean of :mod:`jaxrl_par.losses.soft_actor_critic`'s.
    ``xs`` holds the batch's slots ``[B]`` and the noise ``[2, B, D]`` of the next and
    the current action; outputs the ``[4]`` statistics :data:`STATS`."""
    slots, noise = xs
    batch = b.buf.sample_at(buffer, slots).transitions
    tx_actor, tx_critic, tx_alpha = optimizers(b, hp)
    alpha = jnp.exp(learner.log_alpha)
    target = soft_target(b, hp, learner.actor_params, learner.target_critic_params, batch,
                         noise[0], alpha)
    critic_params, critic_opt, c_loss, q_mean = critic_step(
        b, tx_critic, learner.critic_params, learner.critic_opt, batch, target)
    (a_loss, log_prob), grads = jax.value_and_grad(
        functools.partial(actor_loss, b), has_aux=True)(learner.actor_params, critic_params,
                                                        batch.obs, noise[1], alpha)
    actor_params, actor_opt = apply_gradients(b, tx_actor, grads, learner.actor_opt,
                                              learner.actor_params)
    log_alpha, alpha_opt = learner.log_alpha, learner.alpha_opt
    if b.cfg.autotune_alpha:
        grad = jax.grad(functools.partial(temperature_objective, b))(log_alpha, log_prob)
        grad = axes.pmean(grad, b.cfg.axis_name)
        updates, alpha_opt = tx_alpha.update(grad, alpha_opt, log_alpha)
        log_alpha = log_alpha + updates
    learner = Learner(actor_params, critic_params, optax.incremental_update(
        critic_params, learner.target_critic_params, hp.tau), log_alpha, actor_opt,
        critic_opt, alpha_opt)
    return learner, jnp.stack([c_loss, a_loss, q_mean, -jnp.mean(log_prob)])


def learn(b: Blocks, learner: Learner, buffer, key: jax.Array, hparams):
    """``gradient_steps_per_update`` :func:`gradient_step` s on uniform batches, drawn
    at once; returns the learner and the steps' mean :data:`STATS`."""
    cfg = b.cfg
    hp = hyper.view(cfg, hparams)
    g = cfg.gradient_steps_per_update
    k_slots, k_noise = jax.random.split(key)
    slots = jax.random.randint(k_slots, (g, cfg.batch_size), 0, buffer.size)
    noise = jax.random.normal(k_noise, (g, 2, cfg.batch_size, b.action_dim))
    learner, stats = jax.lax.scan(functools.partial(gradient_step, b, hp, buffer), learner,
                                  (slots, noise))
    return learner, jnp.mean(stats, axis=0)


def exploring(b: Blocks, state: State, obs: jax.Array) -> _Exploring:
    """The acting distribution of the state's next update at ``obs``."""
    warm = state.env_steps < b.cfg.learning_starts
    return _Exploring(b.actor.apply(state.actor_params, obs), warm)


def learn_steps(b: Blocks, state: State, obs, action, ts: envs.Timestep, k_learn: jax.Array,
                warmup: bool = False) -> tuple[State, dict[str, jax.Array]]:
    """An update's storing and learning from its ``T`` steps (``[T, N, ...]``),
    ``state`` holding the envs' state and key after them
    (:func:`~jaxrl_par.algos.continuous_common.store_and_learn` of :func:`learn`)."""
    learner = Learner(state.actor_params, state.critic_params, state.target_critic_params,
                      state.log_alpha, state.actor_opt, state.critic_opt, state.alpha_opt)
    out = store_and_learn(b, state, obs, action, ts, learner, functools.partial(learn, b),
                          len(STATS), k_learn, warmup)
    metrics = dict(zip(STATS, out.stats, strict=True))
    metrics["alpha"] = jnp.exp(out.learner.log_alpha)
    metrics = learner_metrics(b, metrics, out.gradient_steps, ts)
    return state.replace(**out.learner._asdict(), buffer=out.buffer, env_steps=out.env_steps,
                         gradient_steps=out.gradient_steps,
                         update_count=state.update_count + 1), metrics


def update(b: Blocks, state: State, warmup: bool = False
           ) -> tuple[State, dict[str, jax.Array]]:
    """One update: ``num_steps`` steps of every env with :func:`exploring`'s actions,
    then :func:`learn_steps`. ``warmup=True`` leaves out the learning branch, for the
    updates in which it cannot run (``Config.warmup_updates``): the same result,
    cheaper under a vmap, where the ``lax.cond`` computes both branches."""
    cfg = b.cfg
    key, k_act, k_learn = host_steps.update_keys(state.key)
    env_state, (obs, action, _, ts) = policy_rollout(
        b.local_env(), functools.partial(exploring, b, state), state.env_state, k_act,
        cfg.num_envs, cfg.num_steps, cfg.axis_name)
    return learn_steps(b, state.replace(env_state=env_state, key=key), obs, action, ts,
                       k_learn, warmup)


def host_act(b: Blocks, state: State, obs: jax.Array, t: jax.Array) -> host_steps.HostAction:
    """Step ``t`` of the update on host envs (``obs [N, ...]``), drawn as
    :func:`~jaxrl_par.blocks.rollouts.policy_rollout` draws."""
    action, _ = host_steps.sample(exploring(b, state, obs), host_steps.step_key(state.key, t),
                                  obs.shape[0], b.action_dim, False)
    return host_steps.HostAction(action, action)


def act(b: Blocks, state: State, obs: jax.Array, key: jax.Array) -> jax.Array:
    """The policy's mode: the squashed mean, inside the action box."""
    del key
    return b.actor.apply(state.actor_params, obs).mode()


def sample(b: Blocks, state: State, obs: jax.Array, key: jax.Array) -> jax.Array:
    """An action drawn from the squashed Gaussian, inside the action box."""
    dist = b.actor.apply(state.actor_params, obs)
    return dist.sample_with_noise(jax.random.normal(key, dist.mean.shape))


def make(config: Config) -> Algorithm:
    """Builds SAC's pure ``init`` and ``update`` for ``config``; on host envs, the
    update split at the env step (``host_steps``) instead."""
    b = make_blocks(config, SquashedGaussianActor)
    return algorithm(b, functools.partial(init_state, b), functools.partial(update, b),
                     functools.partial(learn_steps, b), functools.partial(act, b),
                     functools.partial(host_act, b), sample=functools.partial(sample, b))
