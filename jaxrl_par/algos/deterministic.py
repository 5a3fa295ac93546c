"""Deterministic-policy actor-critics from replay: what DDPG (Lillicrap et al. 2015,
https://arxiv.org/abs/1509.02971) and TD3 (Fujimoto et al. 2018,
https://arxiv.org/abs/1802.09477) share, the serial replay paradigm for continuous actions.

``num_envs`` vectorised envs act ``num_steps`` steps with the tanh-squashed deterministic
actor ``mu(s)`` plus exploration noise (uniform random actions before
``learning_starts``): Gaussian (:func:`~jaxrl_par.blocks.exploration.gaussian_exploration`)
or Ornstein-Uhlenbeck (:func:`~jaxrl_par.blocks.exploration.ou_noise_step`, its state
``[N, D]`` in :class:`State`, restarted at episode ends). The transitions go to a
uniform replay buffer in the state, and the learner takes one critic step per
``train_frequency`` env steps on a random batch: ``num_critics`` critics regressed on
``r + gamma (1 - terminated) min_k Q'_k(s', a')`` with ``a'`` the target actor's action,
smoothed by clipped noise (``target_noise``; :func:`~jaxrl_par.losses.soft_actor_critic.
target_policy_smoothing`). After every ``policy_delay`` critic steps the actor takes one
step on the deterministic policy gradient of the first critic and the target actor and
critics move towards the online ones by Polyak averaging (``tau``). Truncated episodes
bootstrap from ``final_obs``, terminated ones do not. One ``update`` does the acting and
the learning, inside jit; on host envs (``gymnasium:<id>``) the same maths is split at the
env step (``Algorithm.host_steps``), the OU state kept between steps by its ``observe``.

DDPG is this with one critic, no target smoothing and ``policy_delay=1``; TD3 with twin
critics, ``target_noise=0.2`` clipped at 0.5 and ``policy_delay=2``: the two modules
(:mod:`~jaxrl_par.algos.ddpg`, :mod:`~jaxrl_par.algos.td3`) are this module's
:class:`Config` with their defaults.

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
from jaxrl_par.algos import hyper
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.algos.config import ReplaySchedule, algorithm_name
from jaxrl_par.algos.continuous_common import (
    Blocks,
    Transition,
    algorithm,
    apply_gradients,
    critic_step,
    init_parts,
    learner_metrics,
    make_blocks,
    optimizers,
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
from jaxrl_par.blocks.exploration import gaussian_exploration, ou_noise_reset, ou_noise_step
from jaxrl_par.blocks.rollouts import env_steps
from jaxrl_par.losses.soft_actor_critic import (
    clipped_double_q_target,
    deterministic_policy_gradient_loss,
    target_policy_smoothing,
)
from jaxrl_par.networks import DeterministicActor

EXPLORATION = ("gaussian", "ou")


@configclass
class Config(ReplaySchedule, DataParallel, Network, Critics, Polyak, TrainFrequency, Replay,
             Optimizer, RolloutLength, Vectorized, Run):
    """The fields of DDPG and TD3; their modules subclass it with their defaults (these
    are TD3's: CleanRL's and rejax's settings on Pendulum-v1, with 4 envs and 64-64
    networks as :mod:`~jaxrl_par.algos.sac`)."""

    #: Fields a sweep can vary per lane (``sweep``; see ``jaxrl_par.algos.hyper``).
    SWEEPABLE: ClassVar[tuple] = ("learning_rate", "gamma", "tau", "exploration_noise",
                                  "target_noise", "target_noise_clip")

    env: str = "Pendulum-v1"
    total_timesteps: int = 30_000
    num_steps: int = 16
    buffer_size: int = 100_000
    batch_size: int = 256
    learning_starts: int = 5_000  # of uniform random actions
    train_frequency: int = 1  # env steps per critic step
    learning_rate: float = 3e-4  # actor and critics
    max_grad_norm: float = 0.0
    tau: float = 0.005  # after every actor step
    activation: str = "relu"
    exploration: str = field("gaussian", '"gaussian" or "ou" (Ornstein-Uhlenbeck) action '
                             "noise")
    exploration_noise: float = field(0.1, "the noise's std (Gaussian) or sigma (OU), in "
                                     "half-widths of the action box", range="non_negative")
    ou_theta: float = field(0.15, "OU mean reversion", range="positive")
    ou_dt: float = field(1e-2, "OU time step", range="positive")
    policy_delay: int = field(2, "critic steps per actor and target step (TD3's delayed "
                              "updates)", range="positive")
    target_noise: float = field(0.2, "target policy smoothing std, in half-widths (0: off)",
                                range="non_negative")
    target_noise_clip: float = field(0.5, "bound of the smoothing noise, in half-widths",
                                     range="non_negative")

    def __post_init__(self):
        name = algorithm_name(self)
        hyper.check_sweep(self)
        self.check_continuous_actor()
        if self.exploration not in EXPLORATION:
            raise ValueError(f"{name}.Config.exploration={self.exploration!r}; choose from "
                             f"{EXPLORATION}")
        self.check_train_frequency()
        if self.gradient_steps_per_update % self.policy_delay:
            raise ValueError(f"{name}.Config.policy_delay={self.policy_delay} does not divide "
                             f"the {self.gradient_steps_per_update} critic steps of one update; "
                             "pick a divisor of num_envs*num_steps/train_frequency")
        self.check_replay()


@struct.dataclass
class State:
    actor_params: dict
    critic_params: dict  # [K, ...] leaves: the ensemble
    target_actor_params: dict
    target_critic_params: dict
    actor_opt: optax.OptState
    critic_opt: optax.OptState
    noise: jax.Array  # [N_local, D] float32: the OU process of each env (zeros if Gaussian)
    env_state: envs.EnvState  # leaves [N_local, ...]
    buffer: object  # uniform replay state
    key: jax.Array
    env_steps: jax.Array  # [] int32: env steps taken, all envs of all shards
    gradient_steps: jax.Array  # [] int32: critic steps
    update_count: jax.Array  # [] int32
    hparams: dict | None = None  # the swept fields, float32 [] each (None: no sweep)


STATS = ("critic_loss", "actor_loss", "q_mean")  # a learner step's statistics


class Learner(NamedTuple):
    """The learner's carry through an update's gradient steps."""

    actor_params: dict
    critic_params: dict  # [K, ...] leaves
    target_actor_params: dict
    target_critic_params: dict
    actor_opt: optax.OptState
    critic_opt: optax.OptState


def init_state(b: Blocks, key: jax.Array) -> State:
    """The state before the first update: fresh envs (none on host envs), an empty
    replay, the networks' initial parameters (also as their targets) and OU states of
    zero."""
    cfg = b.cfg
    parts = init_parts(b, key)
    tx_actor, tx_critic = optimizers(b, cfg)
    return State(
        actor_params=parts.actor_params, critic_params=parts.critic_params,
        target_actor_params=parts.actor_params, target_critic_params=parts.critic_params,
        actor_opt=tx_actor.init(parts.actor_params),
        critic_opt=tx_critic.init(parts.critic_params),
        noise=jnp.zeros((b.n_local(), b.action_dim), jnp.float32),
        env_state=parts.env_state, buffer=parts.buffer, key=parts.key,
        env_steps=jnp.int32(0), gradient_steps=jnp.int32(0), update_count=jnp.int32(0),
        hparams=hyper.init(cfg))


def exploring(b: Blocks, hp, actor_params, obs: jax.Array, eps: jax.Array, x: jax.Array,
              warm: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(action [N, D], ou_state [N, D])``: one step's actions at ``obs [N, ...]``
    from the standard normal draws ``eps [N, D]``: uniform over the box (``eps``
    through the normal CDF) while ``warm``, else the actor's plus Gaussian noise or
    the OU process ``x`` advanced by ``eps`` (returned; ``x`` unchanged if
    Gaussian)."""
    cfg, low, high = b.cfg, b.low, b.high
    mu = b.actor.apply(actor_params, obs)
    if cfg.exploration == "ou":
        x = ou_noise_step(x, eps, cfg.ou_theta, hp.exploration_noise, cfg.ou_dt)
        explore = gaussian_exploration(mu, x, 1.0, low, high)
    else:
        explore = gaussian_exploration(mu, eps, hp.exploration_noise, low, high)
    uniform = low + jax.scipy.special.ndtr(eps) * (high - low)
    return jnp.where(warm, uniform, explore), x


def act_step(b: Blocks, env_step, hp, actor_params, warm: jax.Array, carry, xs):
    """One step of every env with :func:`exploring`'s actions. Carry ``(env_state,
    ou_state [N, D])``, the OU state restarted where an episode ended; ``xs`` the
    step's normal draws ``[N, D]`` and env input (``env_step``'s, see
    :func:`~jaxrl_par.blocks.rollouts.env_steps`); output the step's records
    ``(obs, action, ts)``."""
    env_state, x = carry
    eps_t, env_x = xs
    obs = env_state.obs
    action, x = exploring(b, hp, actor_params, obs, eps_t, x, warm)
    env_state, ts = env_step(env_x, env_state, action)
    if b.cfg.exploration == "ou":
        x = ou_noise_reset(x, ts.done)
    return (env_state, x), (obs, action, ts)


def act_steps(b: Blocks, state: State, key: jax.Array, warm: jax.Array, hp):
    """``num_steps`` steps of every env (:func:`act_step`): uniform actions while
    ``warm``, else the actor's plus exploration noise, the draws of the global batch
    sliced per shard. Returns ``(env_state, noise, (obs, action, ts))``, the records
    ``[T, N_local, ...]``."""
    cfg = b.cfg
    k_noise, k_env = jax.random.split(key)
    eps = axes.shard_draw(lambda k, shape: jax.random.normal(k, shape + (b.action_dim,)),
                          k_noise, cfg.num_envs, cfg.axis_name, steps=cfg.num_steps)
    env_xs, env_step = env_steps(
        b.local_env(), axes.shard_keys(k_env, cfg.num_envs, cfg.axis_name, steps=cfg.num_steps))
    (env_state, noise), records = jax.lax.scan(
        functools.partial(act_step, b, env_step, hp, state.actor_params, warm),
        (state.env_state, state.noise), (eps, env_xs))
    return env_state, noise, records


def bootstrap_target(b: Blocks, hp, learner: Learner, batch: Transition, noise: jax.Array
                     ) -> jax.Array:
    """``[B]``: ``r + gamma (1 - terminated) min_k Q'_k(s', a')`` of the stored
    ``batch``, ``a'`` the target actor's action smoothed by the clipped standard normal
    ``noise [B, D]`` (:func:`~jaxrl_par.losses.soft_actor_critic.
    target_policy_smoothing`; ``target_noise = 0``: none)."""
    next_action = b.actor.apply(learner.target_actor_params, batch.next_obs)
    next_action = jax.vmap(target_policy_smoothing, (0, 0, None, None, None, None))(
        next_action, noise, hp.target_noise, hp.target_noise_clip, b.low, b.high)
    next_q = b.critic.apply(learner.target_critic_params, batch.next_obs, next_action)
    discount = hp.gamma * (1.0 - batch.terminated)
    return jax.vmap(clipped_double_q_target, (0, 0, 1))(batch.reward, discount, next_q)


def critic_update(b: Blocks, hp, buffer, learner: Learner, xs):
    """One critic step on a batch of stored transitions (``xs``: its slots ``[B]`` and
    smoothing noise ``[B, D]``), against the targets (:func:`bootstrap_target`).
    Output ``(critic loss, mean Q)``."""
    slots, noise = xs
    batch = b.buf.sample_at(buffer, slots).transitions
    _, tx_critic = optimizers(b, hp)
    critic_params, critic_opt, loss, q_mean = critic_step(
        b, tx_critic, learner.critic_params, learner.critic_opt, batch,
        bootstrap_target(b, hp, learner, batch, noise))
    return learner._replace(critic_params=critic_params, critic_opt=critic_opt), jnp.stack(
        [loss, q_mean])


def actor_loss(b: Blocks, params, critic_params, obs: jax.Array) -> jax.Array:
    """The batch mean of the deterministic policy gradient's loss ``-Q_1(s, mu(s))`` at
    ``obs [B, ...]``, with the first critic."""
    q = b.critic.apply(critic_params, obs, b.actor.apply(params, obs))[0]  # [B]
    return jnp.mean(jax.vmap(deterministic_policy_gradient_loss)(q))


def delayed_step(b: Blocks, hp, buffer, learner: Learner, xs):
    """``policy_delay`` critic steps (:func:`critic_update`; ``xs`` their slots
    ``[d, B]`` and noise ``[d, B, D]``), then one actor step (on the last batch, with
    the first critic) and the Polyak update of the target actor and critics. Output the
    ``[3]`` statistics :data:`STATS`."""
    slots, _ = xs
    learner, stats = jax.lax.scan(functools.partial(critic_update, b, hp, buffer), learner,
                                  xs)
    obs = b.buf.sample_at(buffer, slots[-1]).transitions.obs
    tx_actor, _ = optimizers(b, hp)
    a_loss, grads = jax.value_and_grad(functools.partial(actor_loss, b))(
        learner.actor_params, learner.critic_params, obs)
    actor_params, actor_opt = apply_gradients(b, tx_actor, grads, learner.actor_opt,
                                              learner.actor_params)
    learner = learner._replace(
        actor_params=actor_params, actor_opt=actor_opt,
        target_actor_params=optax.incremental_update(
            actor_params, learner.target_actor_params, hp.tau),
        target_critic_params=optax.incremental_update(
            learner.critic_params, learner.target_critic_params, hp.tau))
    stats = jnp.mean(stats, axis=0)
    return learner, jnp.stack([stats[0], a_loss, stats[1]])


def learn(b: Blocks, learner: Learner, buffer, key: jax.Array, hparams):
    """``gradient_steps_per_update`` critic steps in groups of ``policy_delay``
    (:func:`delayed_step`), their batches and noise drawn at once; returns the learner
    and the groups' mean :data:`STATS`."""
    cfg = b.cfg
    hp = hyper.view(cfg, hparams)
    d = cfg.policy_delay
    groups = cfg.gradient_steps_per_update // d
    k_slots, k_noise = jax.random.split(key)
    slots = jax.random.randint(k_slots, (groups, d, cfg.batch_size), 0, buffer.size)
    noise = jax.random.normal(k_noise, (groups, d, cfg.batch_size, b.action_dim))
    learner, stats = jax.lax.scan(functools.partial(delayed_step, b, hp, buffer), learner,
                                  (slots, noise))
    return learner, jnp.mean(stats, axis=0)


def learn_steps(b: Blocks, state: State, obs, action, ts: envs.Timestep, k_learn: jax.Array,
                warmup: bool = False) -> tuple[State, dict[str, jax.Array]]:
    """An update's storing and learning from its ``T`` steps (``[T, N, ...]``),
    ``state`` holding the envs' state, the OU noise and the key after them
    (:func:`~jaxrl_par.algos.continuous_common.store_and_learn` of :func:`learn`)."""
    learner = Learner(state.actor_params, state.critic_params, state.target_actor_params,
                      state.target_critic_params, state.actor_opt, state.critic_opt)
    out = store_and_learn(b, state, obs, action, ts, learner, functools.partial(learn, b),
                          len(STATS), k_learn, warmup)
    metrics = learner_metrics(b, dict(zip(STATS, out.stats, strict=True)),
                              out.gradient_steps, ts)
    return state.replace(**out.learner._asdict(), buffer=out.buffer, env_steps=out.env_steps,
                         gradient_steps=out.gradient_steps,
                         update_count=state.update_count + 1), metrics


def update(b: Blocks, state: State, warmup: bool = False
           ) -> tuple[State, dict[str, jax.Array]]:
    """One update: :func:`act_steps`, then :func:`learn_steps`. ``warmup=True`` leaves
    out the learning branch, for the updates in which it cannot run
    (``Config.warmup_updates``): the same result, cheaper under a vmap, where the
    ``lax.cond`` computes both branches."""
    hp = hyper.view(b.cfg, state.hparams)
    key, k_act, k_learn = host_steps.update_keys(state.key)
    warm = state.env_steps < b.cfg.learning_starts
    env_state, noise, (obs, action, ts) = act_steps(b, state, k_act, warm, hp)
    return learn_steps(b, state.replace(env_state=env_state, noise=noise, key=key), obs,
                       action, ts, k_learn, warmup)


def host_act(b: Blocks, state: State, obs: jax.Array, t: jax.Array) -> host_steps.HostAction:
    """Step ``t`` of the update on host envs (``obs [N, ...]``), as :func:`act_steps`
    acts (its normal draws from the step's key); the extras hold the advanced OU state
    (None if Gaussian), which :func:`host_observe` keeps."""
    hp = hyper.view(b.cfg, state.hparams)
    eps = jax.random.normal(host_steps.step_key(state.key, t), (obs.shape[0], b.action_dim))
    warm = state.env_steps < b.cfg.learning_starts
    action, x = exploring(b, hp, state.actor_params, obs, eps, state.noise, warm)
    return host_steps.HostAction(action, action, x if b.cfg.exploration == "ou" else None)


def host_observe(state: State, action: host_steps.HostAction, done: jax.Array) -> State:
    """The state after a host step ending the episodes ``done [N]``: the OU state
    of the step, restarted where an episode ended."""
    return state.replace(noise=ou_noise_reset(action.extras, done))


def act(b: Blocks, state: State, obs: jax.Array, key: jax.Array) -> jax.Array:
    """The deterministic policy's action, inside the action box."""
    del key
    return b.actor.apply(state.actor_params, obs)


def make(config: Config) -> Algorithm:
    """Builds the pure ``init`` and ``update`` of DDPG or TD3 for ``config``; on host
    envs, the update split at the env step (``host_steps``) instead."""
    b = make_blocks(config, DeterministicActor)
    return algorithm(b, functools.partial(init_state, b), functools.partial(update, b),
                     functools.partial(learn_steps, b), functools.partial(act, b),
                     functools.partial(host_act, b),
                     host_observe=host_observe if config.exploration == "ou" else None)
