"""Ape-X DQN (Horgan et al. 2018, https://arxiv.org/abs/1803.00933).

The experience-parallel paradigm, written as one pure ``update`` so that the runner
scans, vmaps (seeds) and shards (devices) it like any other algorithm:

* **Actors**: ``num_actors`` vectorised env lanes, lane ``i`` with its own fixed
  exploration rate from the ladder ``eps_i = epsilon ** (1 + alpha * i / (N - 1))``.
  They act with a *copy* of the learner's parameters (online and target), pulled every
  ``actor_sync_period`` learner steps; the policy lag (learner steps since the pull) is
  in the state and reported.
* **Initial priorities**: the actors compute the n-step double-Q TD error of each new
  transition with their own copy and add it with priority ``|td_error| + priority_eps``
  (not the max priority, section 3 of the paper).
* **Learner**: ``learner_steps_per_iteration`` prioritized steps (IS weights, ``beta``),
  n-step double Q-learning with a dueling head, priorities written back after each
  step, target network copied every ``target_period`` learner steps.
* The ratio of env steps to learner samples, ``num_actors * num_steps /
  (learner_steps_per_iteration * batch_size)``, follows from the config
  (``Config.env_steps_per_sample``) and is reported as a metric.

Every transition records the env step at which it was inserted, so the learner reports
the age (staleness) of what it samples.

With ``pipeline=True`` the actors' batch of one update enters the replay in the next
update (the first batch is acted in ``init``), so an update's acting and its learning do
not depend on each other. ``update`` then computes both on one device, and
``train(..., actor_learner=True)`` (:mod:`jaxrl_par.parallel.actor_learner`) computes the
same numbers with the actors on one device and the learner and replay on another, at
the same time: the paper's actors on hardware of their own, deterministic, with one
update of insertion delay.

With ``axis_name`` set (data parallelism over ``D`` devices), each device holds its own
actors and its own replay shard, and the learner batch of ``D * batch_size`` is drawn
from the *global* prioritized distribution over all shards
(:func:`jaxrl_par.replay.weighted_batch`): shard totals decide how many rows each shard
contributes, IS weights use the global ``N`` and the global batch maximum, and the
per-shard gradients are ``psum``-ed, so the update is the one a single buffer holding
every shard would give. Each shard computes ``max_per_shard`` rows (default twice its
share); rows beyond that are dropped and reported as ``dropped_fraction``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn
from flax import struct

from jaxrl_par import axes, envs, replay
from jaxrl_par.algos import hyper
from jaxrl_par.algos.base import Algorithm, Pipeline, pipelined_update
from jaxrl_par.algos.fields import (
    ActorLearner,
    DataParallel,
    Network,
    Optimizer,
    Pipelined,
    Prioritized,
    QLearning,
    Replay,
    RolloutLength,
    Run,
    configclass,
    field,
)
from jaxrl_par.algos.q_common import (
    NStepCarry,
    Transition,
    act_steps,
    batch_td_error,
    check_q_config,
    example_transition,
    init_nstep_carry,
    make_q_network,
    optimizer,
    q_loss,
    to_transitions,
)
from jaxrl_par.blocks.exploration import apex_epsilons


@configclass
class Config(DataParallel, Network, Pipelined, ActorLearner, Prioritized, QLearning, Replay,
             Optimizer, RolloutLength, Run):
    """Ape-X hyperparameters: the paper's structure (ladder, n-step double Q, dueling, PER)
    at a size that solves the default env, CartPole-v1, within the default budget on a
    CPU. Longer runs at this learning rate can lose the solution again, as DQN on CartPole
    often does. With ``axis_name`` set, each device keeps one replay shard and the
    learner takes one global batch."""

    #: Fields a sweep can vary per lane (``sweep``; see ``jaxrl_par.algos.hyper``).
    SWEEPABLE: ClassVar[tuple] = ("learning_rate", "max_grad_norm", "gamma", "huber_delta",
                                  "per_beta")
    SWEEP_POSITIVE: ClassVar[tuple] = ("max_grad_norm",)  # 0 turns clipping off

    total_timesteps: int = 100_000
    buffer_size: int = 50_000
    batch_size: int = 256
    learning_starts: int = 1_000
    learning_rate: float = 1e-3
    max_grad_norm: float = 40.0
    n_step: int = 3
    dueling: bool = True
    loss: str = "huber"
    hidden_sizes: tuple[int, ...] = (120, 84)
    activation: str = "relu"
    num_actors: int = field(16, "global env lanes, one exploration rate each",
                            range="positive")
    num_steps: int = 4
    learner_steps_per_iteration: int = field(8, "learner steps per update",
                                             range="positive")
    target_period: int = field(50, "learner steps between target copies", range="positive")
    actor_sync_period: int = 8
    epsilon: float = field(0.4, "base of the Ape-X exploration ladder", range="unit_interval")
    epsilon_alpha: float = field(7.0, "exponent of the Ape-X exploration ladder",
                                 range="non_negative")
    max_per_shard: int | None = field(
        None, "rows each shard computes per learner step when sharded (None: 2 * "
        "batch_size, at most the global batch D * batch_size, which never drops a row)")

    def __post_init__(self):
        hyper.check_sweep(self)
        check_q_config(self, "num_actors*num_steps")
        if self.max_per_shard is not None and (not isinstance(self.max_per_shard, int)
                                               or self.max_per_shard < 1):
            raise ValueError(f"apex.Config.max_per_shard={self.max_per_shard!r}: use None "
                             "(twice batch_size) or a positive int")
        if self.pipeline and "gamma" in self.sweep:
            raise ValueError("apex.Config: pipeline=True acts its first batch in init, with "
                             "the config's gamma, before the runner writes each lane's: "
                             "sweep gamma without the pipeline (or the other fields with it)")
        if self.pipeline and self.axis_name is not None:
            raise ValueError("apex.Config: pipeline=True runs actors and learner on two "
                             "devices of their own; it does not combine with data "
                             f"parallelism (axis_name={self.axis_name!r}). Set one of the two.")

    @property
    def env_steps_per_update(self) -> int:
        return self.num_actors * self.num_steps

    @property
    def num_envs(self) -> int:
        """Envs stepped in lockstep: one per actor (``num_actors``), as other configs'
        ``num_envs``."""
        return self.num_actors

    @property
    def env_steps_per_sample(self) -> float:
        """Env steps per transition the learner samples (the replay ratio's inverse) on one
        device; with ``D`` data-parallel devices the learner samples ``D`` times more."""
        return self.env_steps_per_update / (self.learner_steps_per_iteration * self.batch_size)

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.env_steps_per_update

    @property
    def epsilons(self):
        """float32 ``[num_actors]``: the ladder, actor 0 most exploratory."""
        return apex_epsilons(self.num_actors, self.epsilon, self.epsilon_alpha)


@struct.dataclass
class Acted:
    """What the actors hand the learner after one update: ``[B]`` n-step transitions with
    their initial priorities, and the actors' env-step count after acting them."""

    transitions: Transition
    priorities: jax.Array  # float32 [B]
    env_steps: jax.Array  # [] int32


@struct.dataclass
class ActorHalf:
    """The actors' part of :class:`State` (see :func:`jaxrl_par.algos.base.pipelined_update`)."""

    env_state: envs.EnvState  # leaves [N_local, ...]
    nstep_carry: NStepCarry  # [n_step - 1, N_local, ...]
    env_steps: jax.Array  # [] int32: env steps of all actors of all shards
    key: jax.Array | None  # pipeline only: the actors' own key stream
    hparams: dict | None = None  # the swept fields while split from the State, else None


@struct.dataclass
class LearnerHalf:
    """The learner's part of :class:`State`; it owns the actors' parameter copy too."""

    params: dict
    target_params: dict
    opt_state: optax.OptState
    actor_params: dict  # the actors' copy of params
    actor_target_params: dict  # the actors' copy of target_params (initial priorities)
    actor_version: jax.Array  # [] int32: learner step of the actors' copy
    buffer: replay.PrioritizedState
    key: jax.Array
    learner_steps: jax.Array  # [] int32
    update_count: jax.Array  # [] int32
    hparams: dict | None = None  # the swept fields while split from the State, else None


@struct.dataclass
class State:
    """Ape-X's training state: the actors' half and the learner's half."""

    actor: ActorHalf
    learner: LearnerHalf
    pending: Acted | None = None  # pipeline only: acted last update, learned from in this one
    hparams: dict | None = None  # the swept fields, float32 [] each (None: no sweep)

    @property
    def params(self) -> dict:
        """The learner's parameters (what ``act`` and evaluation use)."""
        return self.learner.params


class Blocks(NamedTuple):
    """What Ape-X's parts share: the config, the Q-network, its optimiser and the
    prioritized replay, with the shard geometry that follows from ``cfg.axis_name``."""
    cfg: Config
    spec: envs.VecEnv  # one env, for shapes
    network: nn.Module  # the Q-network (make_q_network)
    buf: replay.Buffer  # replay.prioritized

    @property
    def q_fn(self) -> Callable:
        return self.network.apply

    def n_local(self) -> int:
        """Actors on this shard."""
        return axes.local_size(self.cfg.num_actors, self.cfg.axis_name, "num_actors")

    def actor_ids(self) -> jax.Array:
        """int32 ``[N_local]`` global indices of this shard's actors."""
        return axes.axis_index(self.cfg.axis_name) * self.n_local() + jnp.arange(self.n_local())

    def step_keys(self, key: jax.Array) -> jax.Array:
        """``[num_steps, N_local]`` keys: one per (step, actor), by global actor index."""
        return axes.shard_keys(key, self.cfg.num_actors, self.cfg.axis_name,
                               steps=self.cfg.num_steps)

    def global_batch(self) -> int:
        """The learner batch over all shards: ``batch_size`` per device."""
        return self.cfg.batch_size * axes.axis_size(self.cfg.axis_name)

    def max_per_shard(self) -> int | None:
        cfg = self.cfg
        if cfg.axis_name is None:
            return None
        if cfg.max_per_shard is not None:
            return cfg.max_per_shard
        return min(2 * cfg.batch_size, self.global_batch())


def init_halves(b: Blocks, key: jax.Array) -> State:
    """The state before the first update: fresh envs, an empty replay, the network's
    initial parameters as the online, target and actors' copies."""
    cfg = b.cfg
    k_params, k_env, k_run = jax.random.split(key, 3)
    params = b.network.init(k_params, jnp.zeros((1,) + b.spec.observation_shape))
    actor = ActorHalf(
        env_state=envs.make(cfg.env, b.n_local()).reset(
            axes.shard_keys(k_env, cfg.num_actors, cfg.axis_name)),
        nstep_carry=init_nstep_carry(cfg.n_step, b.n_local(), b.spec.observation_shape,
                                     b.spec.observation_dtype),
        env_steps=jnp.int32(0),
        key=None)
    learner = LearnerHalf(
        params=params, target_params=params, opt_state=optimizer(cfg).init(params),
        actor_params=params, actor_target_params=params, actor_version=jnp.int32(0),
        buffer=b.buf.init(example_transition(b.spec.observation_shape,
                                             b.spec.observation_dtype)),
        key=k_run, learner_steps=jnp.int32(0), update_count=jnp.int32(0))
    return State(actor, learner, hparams=hyper.init(cfg))


def initial_priorities(b: Blocks, actor_params, actor_target_params, transitions) -> jax.Array:
    """float32 ``[B]``: ``|td_error| + priority_eps`` under the actors' copy, 0 for
    padding windows."""
    td, _ = batch_td_error(b.q_fn, actor_params, actor_target_params, transitions,
                           double=True)
    return (jnp.abs(td) + b.cfg.priority_eps) * transitions.mask


def learner_step(b: Blocks, carry, key, hp):
    """One prioritized double-Q step. Carry ``(params, target_params, (opt_state,
    buffer, step, env_steps))``; ``hp`` the lane's hyperparameters; outputs per-step
    metrics."""
    cfg = b.cfg
    params, target_params, (opt_state, buffer, step, env_steps) = carry
    batch = replay.weighted_batch(b.buf, buffer, key, b.global_batch(), hp.per_beta,
                                  cfg.axis_name, b.max_per_shard())
    (loss, aux), grads = jax.value_and_grad(
        lambda p: q_loss(p, target_params, b.q_fn, batch.transitions,
                         batch.loss_weights, True, cfg.loss, hp.huber_delta),
        has_aux=True)(params)
    grads = axes.psum(grads, cfg.axis_name)  # per-shard parts of the global mean
    updates, opt_state = optimizer(hp).update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    priorities = (jnp.abs(aux["td_error"]) + cfg.priority_eps) * batch.transitions.mask
    buffer = b.buf.update_priorities(buffer, batch.indices, priorities)  # skips index -1
    step = step + 1
    target_params = optax.periodic_update(params, target_params, step, cfg.target_period)
    rows = batch.valid.astype(jnp.float32)
    mask = batch.transitions.mask * rows
    age = (env_steps - batch.transitions.insert_step).astype(jnp.float32)
    sums = axes.psum({
        "loss": loss,
        "q_mean": aux["q_mean"] * jnp.sum(rows),
        "sampled_priority": jnp.sum(priorities * rows),
        "importance_weight": jnp.sum(batch.loss_weights),
        "staleness": jnp.sum(age * mask),
        "mask": jnp.sum(mask),
        "rows": jnp.sum(rows),
        "dropped": batch.dropped.astype(jnp.float32),
    }, cfg.axis_name)
    n = jnp.maximum(sums["rows"], 1.0)
    out = {
        "loss": sums["loss"],
        "q_mean": sums["q_mean"] / n,
        "sampled_priority": sums["sampled_priority"] / n,
        "sample_staleness": sums["staleness"] / jnp.maximum(sums["mask"], 1.0),
        "importance_weight": sums["importance_weight"] / n,
        "dropped_fraction": sums["dropped"] / b.global_batch(),
    }
    return (params, target_params, (opt_state, buffer, step, env_steps)), out


def learn(b: Blocks, carry, buffer, key, hparams):
    """``learner_steps_per_iteration`` learner steps; returns the learner carry, the
    buffer's priorities (its storage is read-only here) and mean metrics."""
    params, target_params, opt_state, step, env_steps = carry
    keys = jax.random.split(key, b.cfg.learner_steps_per_iteration)
    hp = hyper.view(b.cfg, hparams)
    (params, target_params, (opt_state, buffer, step, env_steps)), out = jax.lax.scan(
        lambda c, k: learner_step(b, c, k, hp),
        (params, target_params, (opt_state, buffer, step, env_steps)), keys)
    return ((params, target_params, opt_state, step, env_steps),
            (buffer.tree, buffer.max_priority), jax.tree.map(jnp.mean, out))


def skip_learning(b: Blocks, carry, buffer, key, hparams):
    """:func:`learn`'s outputs without a learner step: the carry, the priorities and
    zero metrics (before ``learning_starts``)."""
    _, _, out_shape = jax.eval_shape(functools.partial(learn, b), carry, buffer, key, hparams)
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), out_shape)
    return carry, (buffer.tree, buffer.max_priority), zeros


def group_metrics(ts: envs.Timestep, in_group: jax.Array, name: str, axis_name):
    """Episode return of the actors in one group (mask ``[N_local]``)."""
    masked = ts._replace(terminated=ts.terminated & in_group, truncated=ts.truncated & in_group)
    m = envs.episode_metrics(masked, axis_name)
    return {f"episode_return_{name}": m["episode_return"],
            f"num_episodes_{name}": m["num_episodes"]}


def act_part(b: Blocks, actor: ActorHalf, copy, key) -> tuple[ActorHalf, Acted, dict]:
    """One update's acting with the actors' parameter ``copy`` (online, target):
    ``num_steps`` steps of every actor, their n-step transitions and initial
    priorities. Returns the actors' half, the batch and the episode metrics."""
    cfg = b.cfg
    actor_params, actor_target_params = copy
    ids = b.actor_ids()
    ladder = jnp.asarray(cfg.epsilons)  # [N] global
    env_state, steps, ts = act_steps(envs.make(cfg.env, b.n_local()), b.q_fn, actor_params,
                                     actor.env_state, key, ladder[ids], cfg.num_steps,
                                     b.step_keys)
    hp = hyper.view(cfg, actor.hparams)
    carry, transitions = to_transitions(actor.nstep_carry, steps, hp.gamma, cfg.n_step,
                                        actor.env_steps)
    priorities = initial_priorities(b, actor_params, actor_target_params, transitions)
    env_steps = actor.env_steps + cfg.env_steps_per_update
    metrics = {"insert_priority": axes.pmean(
        jnp.sum(priorities) / jnp.maximum(jnp.sum(transitions.mask), 1), cfg.axis_name)}
    metrics.update(envs.episode_metrics(ts, cfg.axis_name))
    greedy = ids >= cfg.num_actors // 2  # the half of the ladder with the smallest eps
    metrics.update(group_metrics(ts, greedy, "greedy", cfg.axis_name))
    metrics.update(group_metrics(ts, ~greedy, "explore", cfg.axis_name))
    actor = actor.replace(env_state=env_state, nstep_carry=carry, env_steps=env_steps)
    return actor, Acted(transitions, priorities, env_steps), metrics


def learn_part(b: Blocks, learner: LearnerHalf, acted: Acted, key) -> tuple[LearnerHalf, dict]:
    """One update's learning: adds ``acted`` to the replay, runs the learner steps
    (once the replay can fill a batch past ``learning_starts``) and hands the actors
    a fresh parameter copy every ``actor_sync_period`` learner steps."""
    cfg, buf = b.cfg, b.buf
    policy_lag = learner.learner_steps - learner.actor_version  # of the copy acted with
    buffer = buf.add(learner.buffer, acted.transitions, acted.priorities)
    env_steps = acted.env_steps
    can_learn = (env_steps >= cfg.learning_starts) & buf.can_sample(buffer, cfg.batch_size)
    carry = (learner.params, learner.target_params, learner.opt_state,
             learner.learner_steps, env_steps)
    carry, (tree, max_priority), out = jax.lax.cond(
        can_learn, functools.partial(learn, b), functools.partial(skip_learning, b), carry,
        buffer, key, learner.hparams)
    params, target_params, opt_state, learner_steps, _ = carry
    buffer = buffer.replace(tree=tree, max_priority=max_priority)
    # -- actors pull the parameters every actor_sync_period learner steps ----------------
    sync = learner_steps - learner.actor_version >= cfg.actor_sync_period

    def pick(new, old):
        return jax.tree.map(lambda a, b: jnp.where(sync, a, b), new, old)

    size = jnp.maximum(buffer.size, 1).astype(jnp.float32)
    metrics = dict(out)
    metrics.update({
        "policy_lag": policy_lag.astype(jnp.float32),
        "mean_priority_mass": buf.total_priority(buffer) / size,  # mean p^alpha stored
        "learner_steps": learner_steps.astype(jnp.float32),
        "env_steps_per_sample": jnp.float32(cfg.env_steps_per_sample
                                            / axes.axis_size(cfg.axis_name)),
    })
    learner = LearnerHalf(
        params=params, target_params=target_params, opt_state=opt_state,
        actor_params=pick(params, learner.actor_params),
        actor_target_params=pick(target_params, learner.actor_target_params),
        actor_version=jnp.where(sync, learner_steps, learner.actor_version),
        buffer=buffer, key=learner.key, learner_steps=learner_steps,
        update_count=learner.update_count + 1, hparams=learner.hparams)
    return learner, axes.pmean(metrics, cfg.axis_name)


# -- the pipeline's four parts (see jaxrl_par.algos.base.pipelined_update) ---------------


def split(state: State):
    """The halves, each with the lane's swept values, and the actors' copy."""
    actor = state.actor.replace(hparams=state.hparams)
    learner = state.learner.replace(hparams=state.hparams)
    return actor, (learner.actor_params, learner.actor_target_params), learner, state.pending


def join(actor: ActorHalf, learner: LearnerHalf, pending: Acted | None) -> State:
    return State(actor.replace(hparams=None), learner.replace(hparams=None), pending,
                 learner.hparams)


def pipeline_actor(b: Blocks, actor: ActorHalf, copy):
    key, k_act = jax.random.split(actor.key)
    return act_part(b, actor.replace(key=key), copy, k_act)


def pipeline_learner(b: Blocks, learner: LearnerHalf, pending: Acted):
    key, k_learn = jax.random.split(learner.key)
    learner, metrics = learn_part(b, learner.replace(key=key), pending, k_learn)
    return learner, (learner.actor_params, learner.actor_target_params), metrics


def fused_update(b: Blocks, state: State) -> tuple[State, dict[str, jax.Array]]:
    """Act, add, learn, in that order, within one update."""
    key, k_act, k_learn = jax.random.split(state.learner.key, 3)
    actor, copy, learner, _ = split(state)
    actor, acted, actor_metrics = act_part(b, actor, copy, k_act)
    learner, learner_metrics = learn_part(b, learner.replace(key=key), acted, k_learn)
    return join(actor, learner, None), {**learner_metrics, **actor_metrics}


def make(config: Config) -> Algorithm:
    """Builds Ape-X's pure ``init`` and ``update`` for ``config``: acting with the
    exploration ladder, prioritized replay, and the learner, fused in one update or
    pipelined by one update (``pipeline``)."""
    cfg = config
    spec = envs.make(cfg.env, 1)
    b = Blocks(cfg, spec, make_q_network(spec, cfg.hidden_sizes, cfg.activation, cfg.dueling),
               replay.prioritized(cfg.buffer_size, alpha=cfg.per_alpha))
    pipeline = Pipeline(split=split, learner=functools.partial(pipeline_learner, b),
                        join=join, actor=functools.partial(pipeline_actor, b))

    def init(key: jax.Array) -> State:
        state = init_halves(b, key)
        if not cfg.pipeline:
            return state
        # The pipeline's first batch is acted here, so the first update has one to learn.
        k_run, k_actors = jax.random.split(state.learner.key)
        state = state.replace(actor=state.actor.replace(key=k_actors),
                              learner=state.learner.replace(key=k_run))
        actor, copy, learner, _ = split(state)
        actor, acted, _ = pipeline.actor(actor, copy)
        return join(actor, learner, acted)

    def act(state: State, obs: jax.Array, key: jax.Array) -> jax.Array:
        del key  # greedy with the learner's parameters
        return jnp.argmax(b.q_fn(state.params, obs), axis=-1).astype(jnp.int32)

    return Algorithm(
        config=cfg,
        init=init,
        update=(pipelined_update(pipeline) if cfg.pipeline
                else functools.partial(fused_update, b)),
        num_updates=cfg.num_updates,
        env_steps_per_update=cfg.env_steps_per_update,
        act=act,
        hyperparams=cfg.sweep,
        axis_name=cfg.axis_name,
        data_parallel=True,
        pipeline=pipeline if cfg.pipeline else None,
    )
