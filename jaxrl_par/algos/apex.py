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

import dataclasses

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl_par import axes, envs, replay
from jaxrl_par.algos.base import Algorithm, clipped_adam
from jaxrl_par.algos.config import validate
from jaxrl_par.algos.dqn import make_q_network
from jaxrl_par.algos.q_common import (
    act_steps,
    check_q_config,
    example_transition,
    flat_params,
    scan_flat,
    to_transitions,
)
from jaxrl_par.exploration import apex_epsilons
from jaxrl_par.qlearning import NStepCarry, batch_td_error, init_nstep_carry, q_loss


@dataclasses.dataclass(frozen=True)
class Config:
    """Ape-X hyperparameters (paper values where they fit a small CPU run)."""

    env: str = "CartPole-v1"
    num_actors: int = 32  # global env lanes, one exploration rate each
    num_steps: int = 8  # env steps per actor in one update
    total_timesteps: int = 500_000
    buffer_size: int = 50_000  # per shard
    batch_size: int = 128  # per shard
    learner_steps_per_iteration: int = 2
    learning_starts: int = 5_000  # env steps (all actors) before the first learner step
    learning_rate: float = 2.5e-4
    max_grad_norm: float = 40.0  # global-norm clipping (0: off)
    gamma: float = 0.99
    n_step: int = 3
    dueling: bool = True
    loss: str = "huber"  # "huber" or "mse"
    huber_delta: float = 1.0
    target_period: int = 100  # learner steps between target copies
    actor_sync_period: int = 8  # learner steps between parameter pulls by the actors
    epsilon: float = 0.4  # Ape-X ladder base
    epsilon_alpha: float = 7.0  # Ape-X ladder exponent
    per_alpha: float = 0.6
    per_beta: float = 0.4
    priority_eps: float = 1e-6
    hidden_sizes: tuple[int, ...] = (120, 84)
    activation: str = "relu"
    axis_name: str | None = None  # one replay shard per device, one global batch
    # Rows each shard computes per learner step when sharded (None: 2 * batch_size, at
    # most the global batch D * batch_size, which never drops a row).
    max_per_shard: int | None = None

    def __post_init__(self):
        validate(self, positive=("num_actors", "num_steps", "total_timesteps", "buffer_size",
                                 "batch_size", "learner_steps_per_iteration", "learning_rate",
                                 "n_step", "target_period", "actor_sync_period",
                                 "huber_delta"),
                 non_negative=("learning_starts", "max_grad_norm", "per_alpha",
                               "priority_eps", "epsilon_alpha"),
                 unit_interval=("gamma", "epsilon", "per_beta"))
        check_q_config(self, "num_actors*num_steps")
        if self.max_per_shard is not None and (not isinstance(self.max_per_shard, int)
                                               or self.max_per_shard < 1):
            raise ValueError(f"apex.Config.max_per_shard={self.max_per_shard!r}: use None "
                             "(twice batch_size) or a positive int")

    @property
    def env_steps_per_update(self) -> int:
        return self.num_actors * self.num_steps

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
class State:
    params: dict  # learner
    target_params: dict  # learner's target network
    opt_state: optax.OptState
    actor_params: dict  # the actors' copy of params
    actor_target_params: dict  # the actors' copy of target_params (initial priorities)
    actor_version: jax.Array  # [] int32: learner step of the actors' copy
    env_state: envs.EnvState  # leaves [N_local, ...]
    nstep_carry: NStepCarry  # [n_step - 1, N_local, ...]
    buffer: replay.PrioritizedState
    key: jax.Array
    env_steps: jax.Array  # [] int32: env steps of all actors of all shards
    learner_steps: jax.Array  # [] int32
    update_count: jax.Array  # [] int32


def make(config: Config) -> Algorithm:
    """Builds Ape-X's pure ``init`` and ``update`` for ``config``."""
    cfg = config
    spec = envs.make(cfg.env, 1)
    network = make_q_network(spec, cfg.hidden_sizes, cfg.activation, cfg.dueling)
    q_fn = network.apply
    tx = clipped_adam(cfg.learning_rate, cfg.max_grad_norm)
    buf = replay.prioritized(cfg.buffer_size, alpha=cfg.per_alpha)
    ladder = jnp.asarray(cfg.epsilons)  # [N] global

    def n_local() -> int:
        return axes.local_size(cfg.num_actors, cfg.axis_name, "num_actors")

    def actor_ids() -> jax.Array:
        """int32 ``[N_local]`` global indices of this shard's actors."""
        return axes.axis_index(cfg.axis_name) * n_local() + jnp.arange(n_local())

    def env_keys(key):
        return axes.shard_keys(key, cfg.num_actors, cfg.axis_name)

    def step_keys(key):
        """``[num_steps, N_local]`` keys: one per (step, actor), by global actor index."""
        return axes.shard_keys(key, cfg.num_actors, cfg.axis_name, steps=cfg.num_steps)

    def global_batch() -> int:
        """The learner batch over all shards: ``batch_size`` per device."""
        return cfg.batch_size * axes.axis_size(cfg.axis_name)

    def max_per_shard() -> int | None:
        if cfg.axis_name is None:
            return None
        if cfg.max_per_shard is not None:
            return cfg.max_per_shard
        return min(2 * cfg.batch_size, global_batch())

    def init(key: jax.Array) -> State:
        k_params, k_env, k_run = jax.random.split(key, 3)
        params = network.init(k_params, jnp.zeros((1,) + spec.observation_shape))
        return State(
            params=params,
            target_params=params,
            opt_state=tx.init(flat_params(params)),  # the learner steps on flat vectors
            actor_params=params,
            actor_target_params=params,
            actor_version=jnp.int32(0),
            env_state=envs.make(cfg.env, n_local()).reset(env_keys(k_env)),
            nstep_carry=init_nstep_carry(cfg.n_step, n_local(), spec.observation_shape,
                                         spec.observation_dtype),
            buffer=buf.init(example_transition(spec.observation_shape,
                                                spec.observation_dtype)),
            key=k_run,
            env_steps=jnp.int32(0),
            learner_steps=jnp.int32(0),
            update_count=jnp.int32(0),
        )

    def initial_priorities(actor_params, actor_target_params, transitions) -> jax.Array:
        """float32 ``[B]``: ``|td_error| + priority_eps`` under the actors' copy, 0 for
        padding windows."""
        td, _ = batch_td_error(q_fn, actor_params, actor_target_params, transitions,
                               double=True)
        return (jnp.abs(td) + cfg.priority_eps) * transitions.mask

    def learner_step(carry, key, unravel):
        """One prioritized double-Q step on flat parameter vectors (see
        :func:`scan_flat`). Carry ``(params [P], target [P], (opt_state, buffer, step,
        env_steps))``; outputs per-step metrics."""
        params, target_params, (opt_state, buffer, step, env_steps) = carry
        batch = replay.weighted_batch(buf, buffer, key, global_batch(), cfg.per_beta,
                                      cfg.axis_name, max_per_shard())
        (loss, aux), grads = jax.value_and_grad(
            lambda p: q_loss(unravel(p), unravel(target_params), q_fn, batch.transitions,
                             batch.loss_weights, True, cfg.loss, cfg.huber_delta),
            has_aux=True)(params)
        grads = axes.psum(grads, cfg.axis_name)  # per-shard parts of the global mean
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        priorities = (jnp.abs(aux["td_error"]) + cfg.priority_eps) * batch.transitions.mask
        buffer = buf.update_priorities(buffer, batch.indices, priorities)  # skips index -1
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
            "dropped_fraction": sums["dropped"] / global_batch(),
        }
        return (params, target_params, (opt_state, buffer, step, env_steps)), out

    def learn(carry, buffer, key):
        """``learner_steps_per_iteration`` learner steps; returns the learner carry, the
        buffer's priorities (its storage is read-only here) and mean metrics."""
        params, target_params, opt_state, step, env_steps = carry
        keys = jax.random.split(key, cfg.learner_steps_per_iteration)
        params, target_params, (opt_state, buffer, step, env_steps), out = scan_flat(
            learner_step, params, target_params, (opt_state, buffer, step, env_steps), keys)
        return ((params, target_params, opt_state, step, env_steps),
                (buffer.tree, buffer.max_priority), jax.tree.map(jnp.mean, out))

    def skip(carry, buffer, key):
        _, _, out_shape = jax.eval_shape(learn, carry, buffer, key)
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), out_shape)
        return carry, (buffer.tree, buffer.max_priority), zeros

    def group_metrics(ts: envs.Timestep, in_group: jax.Array, name: str):
        """Episode return of the actors in one group (mask ``[N_local]``)."""
        masked = ts._replace(terminated=ts.terminated & in_group, truncated=ts.truncated & in_group)
        m = envs.episode_metrics(masked, cfg.axis_name)
        return {f"episode_return_{name}": m["episode_return"],
                f"num_episodes_{name}": m["num_episodes"]}

    def update(state: State) -> tuple[State, dict[str, jax.Array]]:
        key, k_act, k_learn = jax.random.split(state.key, 3)
        ids = actor_ids()
        # -- actors: act with their copy, compute initial priorities, add ----------------
        policy_lag = state.learner_steps - state.actor_version
        env_state, steps, ts = act_steps(envs.make(cfg.env, n_local()), q_fn,
                                         state.actor_params, state.env_state, k_act,
                                         ladder[ids], cfg.num_steps, step_keys)
        carry, transitions = to_transitions(state.nstep_carry, steps, cfg.gamma, cfg.n_step,
                                            state.env_steps)
        priorities = initial_priorities(state.actor_params, state.actor_target_params,
                                        transitions)
        buffer = buf.add(state.buffer, transitions, priorities)
        env_steps = state.env_steps + cfg.env_steps_per_update
        # -- learner --------------------------------------------------------------------
        can_learn = (env_steps >= cfg.learning_starts) & buf.can_sample(buffer, cfg.batch_size)
        learner = (state.params, state.target_params, state.opt_state, state.learner_steps,
                   env_steps)
        learner, (tree, max_priority), out = jax.lax.cond(can_learn, learn, skip, learner,
                                                          buffer, k_learn)
        params, target_params, opt_state, learner_steps, _ = learner
        buffer = buffer.replace(tree=tree, max_priority=max_priority)
        # -- actors pull the parameters every actor_sync_period learner steps ------------
        sync = learner_steps - state.actor_version >= cfg.actor_sync_period
        pick = lambda new, old: jax.tree.map(lambda a, b: jnp.where(sync, a, b), new, old)
        actor_params = pick(params, state.actor_params)
        actor_target_params = pick(target_params, state.actor_target_params)
        actor_version = jnp.where(sync, learner_steps, state.actor_version)

        size = jnp.maximum(buffer.size, 1).astype(jnp.float32)
        metrics = dict(out)
        metrics.update({
            "policy_lag": policy_lag.astype(jnp.float32),
            "insert_priority": jnp.sum(priorities) / jnp.maximum(jnp.sum(transitions.mask), 1),
            "mean_priority_mass": buf.total_priority(buffer) / size,  # mean p^alpha stored
            "learner_steps": learner_steps.astype(jnp.float32),
            "env_steps_per_sample": jnp.float32(cfg.env_steps_per_sample
                                                / axes.axis_size(cfg.axis_name)),
        })
        metrics = axes.pmean(metrics, cfg.axis_name)
        metrics.update(envs.episode_metrics(ts, cfg.axis_name))
        greedy = ids >= cfg.num_actors // 2  # the half of the ladder with the smallest eps
        metrics.update(group_metrics(ts, greedy, "greedy"))
        metrics.update(group_metrics(ts, ~greedy, "explore"))
        new_state = State(params, target_params, opt_state, actor_params, actor_target_params,
                          actor_version, env_state, carry, buffer, key, env_steps,
                          learner_steps, state.update_count + 1)
        return new_state, metrics

    def act(state: State, obs: jax.Array, key: jax.Array) -> jax.Array:
        del key  # greedy with the learner's parameters
        return jnp.argmax(q_fn(state.params, obs), axis=-1).astype(jnp.int32)

    return Algorithm(
        config=cfg,
        init=init,
        update=update,
        num_updates=cfg.num_updates,
        env_steps_per_update=cfg.env_steps_per_update,
        act=act,
    )
