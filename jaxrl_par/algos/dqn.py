"""Deep Q-Networks (Mnih et al. 2015, https://www.nature.com/articles/nature14236).

The serial replay paradigm: ``num_envs`` vectorised envs act epsilon-greedily (linear
decay) for ``num_steps`` steps, the n-step transitions go to a replay buffer that lives in
the state, and the learner takes one gradient step per ``train_frequency`` env steps on a
random batch, with a target network (hard copy every ``target_update_period`` gradient
steps, or Polyak averaging with ``tau < 1``). One ``update`` does both, inside jit.

Options: double Q-learning (van Hasselt et al. 2016), dueling head (Wang et al. 2016),
n-step returns, Huber or MSE loss, prioritized replay (Schaul et al. 2016,
https://arxiv.org/abs/1511.05952) with ``beta`` annealed to 1. Truncated episodes
bootstrap from ``final_obs``, terminated ones do not. Learning starts after
``learning_starts`` env steps and once the buffer holds a batch (``lax.cond``).

With ``axis_name`` set (data parallel), each shard keeps its own replay of its envs
(``buffer_size`` and ``batch_size`` are per shard) and gradients are averaged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl_par import axes, envs, replay
from jaxrl_par.algos import hyper
from jaxrl_par.algos.base import Algorithm, HostSteps
from jaxrl_par.algos.config import ReplaySchedule
from jaxrl_par.algos.fields import (
    DataParallel,
    EpsilonDecay,
    Network,
    Optimizer,
    Polyak,
    Prioritized,
    QLearning,
    Replay,
    RolloutLength,
    Run,
    TargetNetwork,
    TrainFrequency,
    Vectorized,
    configclass,
    field,
)
from jaxrl_par.algos.q_common import (
    NStepCarry,
    act_steps,
    check_q_config,
    example_transition,
    greedy,
    init_nstep_carry,
    make_q_network,
    optimizer,
    q_loss,
    to_transitions,
)
from jaxrl_par.blocks import host_steps
from jaxrl_par.blocks.exploration import (
    epsilon_greedy_from_draws,
    exploration_draws,
    linear_epsilon,
)
from jaxrl_par.envs import host
from jaxrl_par.networks import QNetwork


@configclass
class Config(ReplaySchedule, DataParallel, Network, Prioritized, EpsilonDecay, Polyak,
             TargetNetwork, QLearning, TrainFrequency, Replay, Optimizer, RolloutLength,
             Vectorized, Run):
    """DQN hyperparameters. Defaults follow PureJaxRL's DQN on CartPole-v1 (10 envs,
    one gradient step of 128 per 10 env steps, target copy every 500 env steps), with
    10 env steps per env in one update (10 gradient steps). With ``axis_name`` set,
    ``buffer_size`` and ``batch_size`` are per shard."""

    #: Fields a sweep can vary per lane (``sweep``; see ``jaxrl_par.algos.hyper``).
    SWEEPABLE: ClassVar[tuple] = ("learning_rate", "gamma", "max_grad_norm", "tau",
                                  "epsilon_start", "epsilon_end", "huber_delta", "per_beta")
    SWEEP_POSITIVE: ClassVar[tuple] = ("max_grad_norm",)  # 0 turns clipping off

    num_envs: int = 10
    num_steps: int = 10
    max_grad_norm: float = 10.0
    hidden_sizes: tuple[int, ...] = (120, 84)
    activation: str = "relu"
    prioritized: bool = field(False, "prioritized replay (Schaul et al. 2016)")

    def __post_init__(self):
        hyper.check_sweep(self)
        if self.tau <= 0:
            raise ValueError("dqn.Config.tau must be in (0, 1]: 1 for a hard target copy")
        check_q_config(self, "num_envs*num_steps")
        self.check_train_frequency()


@struct.dataclass
class State:
    params: dict
    target_params: dict
    opt_state: optax.OptState
    env_state: envs.EnvState  # leaves [N_local, ...]
    nstep_carry: NStepCarry  # [n_step - 1, N_local, ...]
    buffer: object  # replay state (uniform or prioritized)
    key: jax.Array
    env_steps: jax.Array  # [] int32: env steps taken, all envs of all shards
    gradient_steps: jax.Array  # [] int32
    update_count: jax.Array  # [] int32
    hparams: dict | None = None  # the swept fields, float32 [] each (None: no sweep)


class Blocks(NamedTuple):
    """What DQN's parts share: the config, the env spec, the Q-network and the replay,
    with the shard geometry that follows from ``cfg.axis_name``."""
    cfg: Config
    spec: Any  # envs.VecEnv of one env, or host.HostSpec for gymnasium envs
    network: QNetwork  # make_q_network
    buf: replay.Buffer  # uniform, or prioritized with cfg.prioritized
    on_host: bool  # a vector of host envs (jaxrl_par.parallel.host_loop)

    @property
    def q_fn(self) -> Callable:
        return self.network.apply

    @property
    def decay_steps(self) -> int:
        """Env steps (all envs) over which epsilon decays."""
        return int(self.cfg.exploration_fraction * self.cfg.total_timesteps)

    def n_local(self) -> int:
        """Envs on this shard."""
        return axes.local_size(self.cfg.num_envs, self.cfg.axis_name)

    def local_env(self) -> envs.VecEnv:
        """This shard's envs."""
        return envs.make(self.cfg.env, self.n_local())

    def step_keys(self, key: jax.Array) -> jax.Array:
        """``[num_steps, N_local]`` keys: one per (step, env), by global env index."""
        return axes.shard_keys(key, self.cfg.num_envs, self.cfg.axis_name,
                               steps=self.cfg.num_steps)


def init_state(b: Blocks, key: jax.Array) -> State:
    """The state before the first update: fresh envs (none on host envs), an empty
    replay and n-step carry, the network's initial parameters as online and target."""
    cfg, spec = b.cfg, b.spec
    k_params, k_env, k_run = jax.random.split(key, 3)
    params = b.network.init(k_params, jnp.zeros((1,) + spec.observation_shape))
    return State(
        params=params,
        target_params=params,
        opt_state=optimizer(cfg).init(params),
        env_state=None if b.on_host else b.local_env().reset(
            axes.shard_keys(k_env, cfg.num_envs, cfg.axis_name)),
        nstep_carry=init_nstep_carry(cfg.n_step, b.n_local(), spec.observation_shape,
                                     spec.observation_dtype),
        buffer=b.buf.init(example_transition(spec.observation_shape,
                                             spec.observation_dtype)),
        key=k_run,
        env_steps=jnp.int32(0),
        gradient_steps=jnp.int32(0),
        update_count=jnp.int32(0),
        hparams=hyper.init(cfg),
    )


def epsilon_of(b: Blocks, state: State) -> jax.Array:
    """float32 ``[]``: the exploration rate of the state's next update."""
    hp = hyper.view(b.cfg, state.hparams)
    return linear_epsilon(state.env_steps, hp.epsilon_start, hp.epsilon_end, b.decay_steps)


def draw(b: Blocks, buffer, key: jax.Array) -> jax.Array:
    """What each of the ``G`` learner steps samples with: for uniform replay the
    slots ``[G, B]`` of all steps in one draw (one small loop instead of two per
    step on CPU); for prioritized replay (priorities change between steps) one key
    per step, ``[G]``."""
    cfg = b.cfg
    g = cfg.gradient_steps_per_update
    if cfg.prioritized:
        return jax.random.split(key, g)
    return jax.random.randint(key, (g, cfg.batch_size), 0, buffer.size)


def gradient_step(b: Blocks, hp, carry, draws):
    """One learner step. Carry ``(params, target_params, (opt_state, buffer, step,
    beta))``; ``draws`` is one row of :func:`draw`; ``hp`` the lane's hyperparameters;
    outputs ``(loss, q_mean)``."""
    cfg, buf = b.cfg, b.buf
    params, target_params, (opt_state, buffer, step, beta) = carry
    if cfg.prioritized:
        sample = buf.sample(buffer, draws, cfg.batch_size, beta)
    else:
        sample = buf.sample_at(buffer, draws)
    importance_weights = replay.batch_normalized_weights(sample.weights, cfg.axis_name)
    (loss, aux), grads = jax.value_and_grad(
        lambda p: q_loss(p, target_params, b.q_fn, sample.transitions,
                         importance_weights, cfg.double_q, cfg.loss, hp.huber_delta),
        has_aux=True)(params)
    grads = axes.pmean(grads, cfg.axis_name)
    updates, opt_state = optimizer(hp).update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    if cfg.prioritized:
        priorities = (jnp.abs(aux["td_error"]) + cfg.priority_eps) * sample.transitions.mask
        buffer = buf.update_priorities(buffer, sample.indices, priorities)
    step = step + 1
    target_params = optax.periodic_update(
        optax.incremental_update(params, target_params, hp.tau), target_params, step,
        cfg.target_update_period)
    return (params, target_params, (opt_state, buffer, step, beta)), (loss, aux["q_mean"])


def priorities_of(b: Blocks, buffer) -> tuple:
    """The parts of ``buffer`` that learning changes: ``(tree, max_priority)`` of a
    prioritized replay, ``()`` of a uniform one."""
    return (buffer.tree, buffer.max_priority) if b.cfg.prioritized else ()


def learn(b: Blocks, carry, buffer, key: jax.Array, hparams):
    """``gradient_steps_per_update`` learner steps. Carry ``(params, target_params,
    opt_state, step, beta)``. Returns the carry, the buffer's priorities (the storage
    is read-only here, so ``lax.cond`` under ``vmap`` selects only the small parts,
    :func:`priorities_of`) and mean ``(loss, q_mean)``."""
    params, target_params, opt_state, step, beta = carry
    hp = hyper.view(b.cfg, hparams)
    (params, target_params, (opt_state, buffer, step, beta)), (loss, q_mean) = (
        jax.lax.scan(functools.partial(gradient_step, b, hp),
                     (params, target_params, (opt_state, buffer, step, beta)),
                     draw(b, buffer, key)))
    return ((params, target_params, opt_state, step, beta), priorities_of(b, buffer),
            (jnp.mean(loss), jnp.mean(q_mean)))


def skip_learning(b: Blocks, carry, buffer, key: jax.Array, hparams):
    """:func:`learn`'s outputs without a learner step: the carry, the priorities and
    zero ``(loss, q_mean)`` (before ``learning_starts``)."""
    return carry, priorities_of(b, buffer), (jnp.float32(0.0), jnp.float32(0.0))


def learn_steps(b: Blocks, state: State, steps: NStepCarry, ts: envs.Timestep,
                k_learn: jax.Array, warmup: bool = False) -> tuple[State, dict[str, jax.Array]]:
    """An update's storing and learning from its ``T`` steps (``[T, N, ...]``),
    ``state`` holding the envs' state and key after them: the n-step transitions go
    to the replay (new items of a prioritized one at the largest priority seen,
    Schaul et al.), then :func:`learn` runs once past ``learning_starts`` with a batch
    in the replay. ``warmup=True`` leaves the learning branch out."""
    cfg, buf = b.cfg, b.buf
    hp = hyper.view(cfg, state.hparams)
    epsilon = epsilon_of(b, state)
    carry, transitions = to_transitions(state.nstep_carry, steps, hp.gamma, cfg.n_step,
                                        state.env_steps)
    if cfg.prioritized:
        priorities = state.buffer.max_priority * transitions.mask
        buffer = buf.add(state.buffer, transitions, priorities)
    else:
        buffer = buf.add(state.buffer, transitions)
    env_steps = state.env_steps + cfg.env_steps_per_update
    beta = hp.per_beta + (1.0 - hp.per_beta) * jnp.minimum(
        1.0, env_steps.astype(jnp.float32) / cfg.total_timesteps)
    can_learn = (env_steps >= cfg.learning_starts) & buf.can_sample(buffer, cfg.batch_size)
    learner = (state.params, state.target_params, state.opt_state, state.gradient_steps,
               beta)
    if warmup:  # can_learn is False in every warm-up update
        learner, prio, (loss, q_mean) = skip_learning(b, learner, buffer, k_learn,
                                                      state.hparams)
    else:
        learner, prio, (loss, q_mean) = jax.lax.cond(
            can_learn, functools.partial(learn, b), functools.partial(skip_learning, b),
            learner, buffer, k_learn, state.hparams)
    params, target_params, opt_state, gradient_steps, _ = learner
    if cfg.prioritized:
        buffer = buffer.replace(tree=prio[0], max_priority=prio[1])
    metrics = {"loss": loss, "q_mean": q_mean, "epsilon": epsilon,
               "gradient_steps": gradient_steps.astype(jnp.float32)}
    metrics = axes.pmean(metrics, cfg.axis_name)
    metrics.update(envs.episode_metrics(ts, cfg.axis_name))
    new_state = State(params, target_params, opt_state, state.env_state, carry, buffer,
                      state.key, env_steps, gradient_steps, state.update_count + 1,
                      state.hparams)
    return new_state, metrics


def update(b: Blocks, state: State, warmup: bool = False
           ) -> tuple[State, dict[str, jax.Array]]:
    """One update: ``num_steps`` epsilon-greedy steps of every env, then
    :func:`learn_steps`. ``warmup=True`` leaves out the learning branch, for the
    updates in which it cannot run (``Config.warmup_updates``): the same result,
    cheaper under a vmap, where the ``lax.cond`` computes both branches."""
    key, k_act, k_learn = host_steps.update_keys(state.key)
    env_state, steps, ts = act_steps(b.local_env(), b.q_fn, state.params, state.env_state,
                                     k_act, epsilon_of(b, state), b.cfg.num_steps,
                                     b.step_keys)
    return learn_steps(b, state.replace(env_state=env_state, key=key), steps, ts, k_learn,
                       warmup)


def host_act(b: Blocks, state: State, obs: jax.Array, t: jax.Array) -> host_steps.HostAction:
    """Step ``t`` of the update on host envs (``obs [N, ...]``): epsilon-greedy, as
    :func:`~jaxrl_par.algos.q_common.act_steps`."""
    keys = jax.random.split(host_steps.step_key(state.key, t), obs.shape[0])
    uniforms, random_actions = exploration_draws(keys, b.spec.num_actions)
    action = epsilon_greedy_from_draws(b.q_fn(state.params, obs), uniforms, random_actions,
                                       epsilon_of(b, state))
    return host_steps.HostAction(action, action)


def host_learn(b: Blocks, state: State, traj: host_steps.Rollout, warmup: bool = False):
    """:func:`learn_steps` from a host rollout ``[T, N, ...]``."""
    key, _, k_learn = host_steps.update_keys(state.key)
    ts = traj.timestep
    steps = NStepCarry(traj.obs, traj.action, ts.reward, ts.terminated, ts.truncated,
                       ts.obs, ts.final_obs, jnp.ones_like(ts.terminated))
    return learn_steps(b, state.replace(key=key), steps, ts, k_learn, warmup)


def make(config: Config) -> Algorithm:
    """Builds DQN's pure ``init`` and ``update`` for ``config``; on host envs, the
    update split at the env step (``host_steps``) instead."""
    cfg = config
    on_host = host.is_host(cfg.env)
    spec = envs.spec(cfg.env)
    b = Blocks(cfg, spec, make_q_network(spec, cfg.hidden_sizes, cfg.activation, cfg.dueling),
               replay.prioritized(cfg.buffer_size, alpha=cfg.per_alpha) if cfg.prioritized
               else replay.uniform(cfg.buffer_size), on_host)
    host_learner = functools.partial(host_learn, b)
    return Algorithm(
        config=cfg,
        init=functools.partial(init_state, b),
        update=host.compiled_update if on_host else functools.partial(update, b),
        num_updates=cfg.num_updates,
        env_steps_per_update=cfg.env_steps_per_update,
        act=functools.partial(greedy, b.q_fn),
        hyperparams=cfg.sweep,
        warmup_update=functools.partial(update, b, warmup=True),
        axis_name=cfg.axis_name,
        data_parallel=not on_host,
        warmup_updates=cfg.warmup_updates,
        host_steps=HostSteps(functools.partial(host_act, b), host_learner,
                             functools.partial(host_learner, warmup=True), off_policy=True)
        if on_host else None,
    )
