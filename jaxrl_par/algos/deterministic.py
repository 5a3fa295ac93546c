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

from jaxrl_par import axes, envs, replay
from jaxrl_par.algos import hyper
from jaxrl_par.algos.base import Algorithm, HostSteps, clipped_adam
from jaxrl_par.algos.config import ReplaySchedule, algorithm_name
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
from jaxrl_par.algos.sac import Transition  # the same stored step as SAC
from jaxrl_par.blocks import host_steps
from jaxrl_par.blocks.exploration import gaussian_exploration, ou_noise_reset, ou_noise_step
from jaxrl_par.envs import host
from jaxrl_par.losses.soft_actor_critic import (
    clipped_double_q_target,
    deterministic_policy_gradient_loss,
    soft_critic_loss,
    target_policy_smoothing,
)
from jaxrl_par.networks import DeterministicActor, EnsembleQ

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


class _Learner(NamedTuple):
    """The learner's carry through an update's gradient steps."""

    actor_params: dict
    critic_params: dict
    target_actor_params: dict
    target_critic_params: dict
    actor_opt: optax.OptState
    critic_opt: optax.OptState


def make(config: Config) -> Algorithm:
    """Builds the pure ``init`` and ``update`` of DDPG or TD3 for ``config``."""
    cfg = config
    on_host = host.is_host(cfg.env)  # a vector of host envs (jaxrl_par.parallel.host_loop)
    spec = envs.spec(cfg.env)
    low, high = (jnp.broadcast_to(jnp.asarray(b, jnp.float32), spec.action_shape)
                 for b in spec.action_bounds)
    action_dim = spec.num_actions
    actor = DeterministicActor(action_dim, tuple(float(x) for x in low.ravel()),
                               tuple(float(x) for x in high.ravel()),
                               obs_shape=spec.observation_shape,
                               hidden_sizes=tuple(cfg.hidden_sizes), activation=cfg.activation)
    critic = EnsembleQ(cfg.num_critics, tuple(cfg.hidden_sizes), cfg.activation)
    buf = replay.uniform(cfg.buffer_size)

    def optimizers(hp):
        """Adam for the actor and the critics, at the values ``hp``."""
        return (clipped_adam(hp.learning_rate, cfg.max_grad_norm),
                clipped_adam(hp.learning_rate, cfg.max_grad_norm))

    def local_env() -> envs.VecEnv:
        return envs.make(cfg.env, axes.local_size(cfg.num_envs, cfg.axis_name))

    def init(key: jax.Array) -> State:
        k_actor, k_critic, k_env, k_run = jax.random.split(key, 4)
        obs0 = jnp.zeros((1,) + spec.observation_shape, spec.observation_dtype)
        actor_params = actor.init(k_actor, obs0)
        critic_params = critic.init(k_critic, obs0, jnp.zeros((1, action_dim)))
        tx_actor, tx_critic = optimizers(cfg)
        example = Transition(jnp.zeros(spec.observation_shape, spec.observation_dtype),
                             jnp.zeros((action_dim,)), jnp.float32(0), jnp.float32(0),
                             jnp.zeros(spec.observation_shape, spec.observation_dtype))
        return State(
            actor_params=actor_params, critic_params=critic_params,
            target_actor_params=actor_params, target_critic_params=critic_params,
            actor_opt=tx_actor.init(actor_params), critic_opt=tx_critic.init(critic_params),
            noise=jnp.zeros((axes.local_size(cfg.num_envs, cfg.axis_name), action_dim),
                            jnp.float32),
            env_state=None if on_host else local_env().reset(
                axes.shard_keys(k_env, cfg.num_envs, cfg.axis_name)),
            buffer=buf.init(example), key=k_run, env_steps=jnp.int32(0),
            gradient_steps=jnp.int32(0), update_count=jnp.int32(0), hparams=hyper.init(cfg))

    def exploring(actor_params, obs, eps, x, warm, hp):
        """``(action [N, D], ou_state [N, D])``: one step's actions at ``obs [N, ...]``
        from the standard normal draws ``eps [N, D]``: uniform over the box (``eps``
        through the normal CDF) while ``warm``, else the actor's plus Gaussian noise or
        the OU process ``x`` advanced by ``eps`` (returned; ``x`` unchanged if
        Gaussian)."""
        mu = actor.apply(actor_params, obs)
        if cfg.exploration == "ou":
            x = ou_noise_step(x, eps, cfg.ou_theta, hp.exploration_noise, cfg.ou_dt)
            explore = gaussian_exploration(mu, x, 1.0, low, high)
        else:
            explore = gaussian_exploration(mu, eps, hp.exploration_noise, low, high)
        uniform = low + jax.scipy.special.ndtr(eps) * (high - low)
        return jnp.where(warm, uniform, explore), x

    def act_steps(state: State, key: jax.Array, warm: jax.Array, hp):
        """``num_steps`` steps of every env: uniform actions while ``warm``, else the
        actor's plus exploration noise. Returns ``(env_state, noise, (obs, action, ts))``,
        the records ``[T, N_local, ...]``."""
        env = local_env()
        k_noise, k_env = jax.random.split(key)
        eps = axes.shard_draw(lambda k, shape: jax.random.normal(k, shape + (action_dim,)),
                              k_noise, cfg.num_envs, cfg.axis_name, steps=cfg.num_steps)
        env_keys = axes.shard_keys(k_env, cfg.num_envs, cfg.axis_name, steps=cfg.num_steps)

        def step(carry, xs):
            """Carry ``(env_state, ou_state [N, D])``; output the step's records."""
            env_state, x = carry
            eps_t, keys_t = xs
            obs = env_state.obs
            action, x = exploring(state.actor_params, obs, eps_t, x, warm, hp)
            env_state, ts = env.step(keys_t, env_state, action)
            if cfg.exploration == "ou":
                x = ou_noise_reset(x, ts.done)
            return (env_state, x), (obs, action, ts)

        (env_state, noise), records = jax.lax.scan(step, (state.env_state, state.noise),
                                                   (eps, env_keys))
        return env_state, noise, records

    def critic_step(learner: _Learner, xs, buffer, hp):
        """One critic step on a batch of stored transitions, against the targets.
        Output ``(critic loss, mean Q)``."""
        slots, noise = xs  # [B], [B, D]
        batch = buf.sample_at(buffer, slots).transitions
        _, tx_critic = optimizers(hp)
        next_action = actor.apply(learner.target_actor_params, batch.next_obs)
        next_action = jax.vmap(target_policy_smoothing, (0, 0, None, None, None, None))(
            next_action, noise, hp.target_noise, hp.target_noise_clip, low, high)
        next_q = critic.apply(learner.target_critic_params, batch.next_obs, next_action)
        discount = hp.gamma * (1.0 - batch.terminated)
        target = jax.vmap(clipped_double_q_target, (0, 0, 1))(batch.reward, discount, next_q)

        def critic_loss(params):
            q = critic.apply(params, batch.obs, batch.action)  # [K, B]
            return jnp.mean(jax.vmap(soft_critic_loss, (1, 0))(q, target)), jnp.mean(q)

        (loss, q_mean), grads = jax.value_and_grad(critic_loss, has_aux=True)(
            learner.critic_params)
        grads = axes.pmean(grads, cfg.axis_name)
        updates, critic_opt = tx_critic.update(grads, learner.critic_opt, learner.critic_params)
        learner = learner._replace(critic_params=optax.apply_updates(learner.critic_params,
                                                                     updates),
                                   critic_opt=critic_opt)
        return learner, jnp.stack([loss, q_mean])

    def delayed_step(learner: _Learner, xs, buffer, hp):
        """``policy_delay`` critic steps, then one actor step (on the last batch, with the
        first critic) and the Polyak update of the target actor and critics. Output the
        ``[3]`` statistics ``(critic loss, actor loss, mean Q)``."""
        slots, noise = xs  # [d, B], [d, B, D]
        learner, stats = jax.lax.scan(lambda c, x: critic_step(c, x, buffer, hp), learner,
                                      (slots, noise))
        obs = buf.sample_at(buffer, slots[-1]).transitions.obs
        tx_actor, _ = optimizers(hp)

        def actor_loss(params):
            q = critic.apply(learner.critic_params, obs, actor.apply(params, obs))[0]  # [B]
            return jnp.mean(jax.vmap(deterministic_policy_gradient_loss)(q))

        a_loss, grads = jax.value_and_grad(actor_loss)(learner.actor_params)
        grads = axes.pmean(grads, cfg.axis_name)
        updates, actor_opt = tx_actor.update(grads, learner.actor_opt, learner.actor_params)
        actor_params = optax.apply_updates(learner.actor_params, updates)
        learner = learner._replace(
            actor_params=actor_params, actor_opt=actor_opt,
            target_actor_params=optax.incremental_update(
                actor_params, learner.target_actor_params, hp.tau),
            target_critic_params=optax.incremental_update(
                learner.critic_params, learner.target_critic_params, hp.tau))
        stats = jnp.mean(stats, axis=0)
        return learner, jnp.stack([stats[0], a_loss, stats[1]])

    def learn(learner, buffer, key, hparams):
        hp = hyper.view(cfg, hparams)
        d = cfg.policy_delay
        groups = cfg.gradient_steps_per_update // d
        k_slots, k_noise = jax.random.split(key)
        slots = jax.random.randint(k_slots, (groups, d, cfg.batch_size), 0, buffer.size)
        noise = jax.random.normal(k_noise, (groups, d, cfg.batch_size, action_dim))
        learner, stats = jax.lax.scan(lambda c, x: delayed_step(c, x, buffer, hp), learner,
                                      (slots, noise))
        return learner, jnp.mean(stats, axis=0)

    def skip(learner, buffer, key, hparams):
        return learner, jnp.zeros(3, jnp.float32)

    def update(state: State, warmup: bool = False) -> tuple[State, dict[str, jax.Array]]:
        """One update; ``warmup=True`` leaves out the learning branch, for the updates in
        which it cannot run (``Config.warmup_updates``): the same result, cheaper under a
        vmap, where the ``lax.cond`` below computes both branches."""
        hp = hyper.view(cfg, state.hparams)
        key, k_act, k_learn = host_steps.update_keys(state.key)
        warm = state.env_steps < cfg.learning_starts
        env_state, noise, (obs, action, ts) = act_steps(state, k_act, warm, hp)
        return learn_steps(state.replace(env_state=env_state, noise=noise, key=key), obs,
                           action, ts, k_learn, warmup)

    def learn_steps(state: State, obs, action, ts: envs.Timestep, k_learn: jax.Array,
                    warmup: bool = False) -> tuple[State, dict[str, jax.Array]]:
        """An update's storing and learning from its ``T`` steps (``[T, N, ...]``),
        ``state`` holding the envs' state, the OU noise and the key after them."""

        def flat(x):
            return x.reshape((-1,) + x.shape[2:])

        transitions = Transition(flat(obs), flat(action), flat(ts.reward),
                                 flat(ts.terminated).astype(jnp.float32), flat(ts.final_obs))
        buffer = buf.add(state.buffer, transitions)
        env_steps = state.env_steps + cfg.env_steps_per_update
        can_learn = (env_steps >= cfg.learning_starts) & buf.can_sample(buffer, cfg.batch_size)
        learner = _Learner(state.actor_params, state.critic_params, state.target_actor_params,
                           state.target_critic_params, state.actor_opt, state.critic_opt)
        if warmup:  # can_learn is False in every warm-up update
            learner, stats = skip(learner, buffer, k_learn, state.hparams)
        else:
            learner, stats = jax.lax.cond(can_learn, learn, skip, learner, buffer, k_learn,
                                          state.hparams)
        gradient_steps = state.gradient_steps + jnp.where(
            can_learn, cfg.gradient_steps_per_update, 0).astype(jnp.int32)
        metrics = dict(zip(("critic_loss", "actor_loss", "q_mean"), stats, strict=True))
        metrics["gradient_steps"] = gradient_steps.astype(jnp.float32)
        metrics = axes.pmean(metrics, cfg.axis_name)
        metrics.update(envs.episode_metrics(ts, cfg.axis_name))
        new_state = State(**learner._asdict(), noise=state.noise, env_state=state.env_state,
                          buffer=buffer, key=state.key, env_steps=env_steps,
                          gradient_steps=gradient_steps,
                          update_count=state.update_count + 1, hparams=state.hparams)
        return new_state, metrics

    def host_act(state: State, obs: jax.Array, t: jax.Array) -> host_steps.HostAction:
        """Step ``t`` of the update on host envs, as :func:`act_steps` acts (its normal
        draws from the step's key); the extras hold the advanced OU state (None if
        Gaussian), which :func:`host_observe` keeps."""
        hp = hyper.view(cfg, state.hparams)
        eps = jax.random.normal(host_steps.step_key(state.key, t), (obs.shape[0], action_dim))
        warm = state.env_steps < cfg.learning_starts
        action, x = exploring(state.actor_params, obs, eps, state.noise, warm, hp)
        return host_steps.HostAction(action, action, x if cfg.exploration == "ou" else None)

    def host_observe(state: State, action: host_steps.HostAction, done: jax.Array) -> State:
        """The state after a host step ending the episodes ``done [N]``: the OU state
        of the step, restarted where an episode ended."""
        return state.replace(noise=ou_noise_reset(action.extras, done))

    def host_learn(state: State, traj: host_steps.Rollout, warmup: bool = False):
        """:func:`learn_steps` from a host rollout."""
        key, _, k_learn = host_steps.update_keys(state.key)
        return learn_steps(state.replace(key=key), traj.obs, traj.action, traj.timestep,
                           k_learn, warmup)

    def act(state: State, obs: jax.Array, key: jax.Array) -> jax.Array:
        """The deterministic policy's action, inside the action box."""
        del key
        return actor.apply(state.actor_params, obs)

    return Algorithm(
        config=cfg,
        init=init,
        update=host.compiled_update if on_host else update,
        num_updates=cfg.num_updates,
        env_steps_per_update=cfg.env_steps_per_update,
        act=act,
        hyperparams=cfg.sweep,
        warmup_update=functools.partial(update, warmup=True),
        axis_name=cfg.axis_name,
        data_parallel=not on_host,
        warmup_updates=cfg.warmup_updates,
        host_steps=HostSteps(host_act, host_learn, functools.partial(host_learn, warmup=True),
                             host_observe if cfg.exploration == "ou" else None)
        if on_host else None,
    )
