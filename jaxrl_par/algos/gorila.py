"""Gorila (Nair et al. 2015, https://arxiv.org/abs/1507.04296): DQN with a parameter server.

The paper's bundled layout: ``num_workers`` bundles, each an actor with ``num_envs`` envs,
a replay memory of its own and a learner. Every push, a bundle acts ``num_steps``
epsilon-greedy steps in each env with its *copy* of the Q-network, stores the n-step
transitions in its replay, samples a batch and computes the gradient of the
(double-)Q loss at its copy against its copy of the target network, and pushes the
gradient to the parameter server. The server applies pushes with Adam as they arrive
and updates the target network every ``target_update_period`` pushes; a bundle re-pulls
both networks once the server is ``actor_sync_period`` pushes past its copy. Each push's
staleness (pushes applied between the pull and its own application) is computed from the
versions and reported, as for A3C (:mod:`jaxrl_par.algos.a3c`).

The same pure parts run in one compiled round-robin ``update`` (``train(algo, seeds)``:
deterministic, vmappable) or as host threads (``train(..., async_workers=True)``; see
:mod:`jaxrl_par.parallel.async_workers`). Before ``learning_starts`` env steps (all
bundles together) the bundles only act (``Algorithm.warmup_updates``), so every bundle's
replay holds a batch when the first gradient is taken.

With ``env="gymnasium:<id>"`` (:mod:`jaxrl_par.envs.host`) each threaded bundle steps
gymnasium envs of its own from Python (warm-up included), between one compiled
epsilon-greedy call per step and one compiled call that stores the steps and takes the
gradient; only with ``async_workers``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax import struct

from jaxrl_par import envs, replay
from jaxrl_par.algos import hyper
from jaxrl_par.algos.base import (
    Algorithm,
    AsyncState,
    AsyncWorker,
    HostActing,
    combine_worker_metrics,
    round_robin_update,
    staleness_metrics,
    worker_copies,
)
from jaxrl_par.algos.config import ReplaySchedule
from jaxrl_par.algos.fields import (
    ActorLearner,
    EpsilonDecay,
    Network,
    Optimizer,
    Polyak,
    QLearning,
    Replay,
    RolloutLength,
    Run,
    TargetNetwork,
    Vectorized,
    Workers,
    configclass,
)
from jaxrl_par.algos.q_common import (
    NStepCarry,
    act_steps,
    check_q_config,
    example_transition,
    init_nstep_carry,
    make_q_network,
    optimizer,
    q_loss,
    to_transitions,
)
from jaxrl_par.blocks.exploration import epsilon_greedy_from_draws, linear_epsilon
from jaxrl_par.envs import host


@configclass
class Config(ReplaySchedule, Network, ActorLearner, EpsilonDecay, Polyak, TargetNetwork,
             QLearning, Replay, Optimizer, RolloutLength, Vectorized, Workers, Run):
    """Gorila hyperparameters. Defaults: DQN's (PureJaxRL's CartPole settings: a gradient
    of 128 per 10 env steps, target copy every 50 gradients), over 4 bundles of 2 envs.
    They solve CartPole-v1 within 5e5 env steps. The server's gradient steps are the
    bundles' pushes."""

    SWEEPABLE: ClassVar[tuple] = ("learning_rate", "gamma", "max_grad_norm", "tau",
                                  "epsilon_start", "epsilon_end", "huber_delta")
    SWEEP_POSITIVE: ClassVar[tuple] = ("max_grad_norm",)

    buffer_size: int = 2_500  # each bundle's replay (10,000 over the 4: DQN's)
    max_grad_norm: float = 10.0  # of each push
    hidden_sizes: tuple[int, ...] = (120, 84)
    activation: str = "relu"
    num_envs: int = 2  # of each bundle
    num_steps: int = 5  # per env between a bundle's pushes

    @property
    def env_steps_per_push(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def env_steps_per_update(self) -> int:
        """One push of every bundle (``num_updates`` and ``warmup_updates``, the updates
        in which the bundles only act, follow from it as for DQN)."""
        return self.num_workers * self.env_steps_per_push

    def __post_init__(self):
        hyper.check_sweep(self)
        if self.tau <= 0:
            raise ValueError("gorila.Config.tau must be in (0, 1]: 1 for a hard target copy")
        check_q_config(self, "num_workers*num_envs*num_steps")
        stored = self.warmup_updates * self.env_steps_per_push
        if stored < self.batch_size:
            # the warm-up updates are those that end before learning_starts
            need = -(-self.batch_size // self.env_steps_per_push) \
                * self.env_steps_per_update + 1
            raise ValueError(
                f"gorila.Config.learning_starts={self.learning_starts}: each bundle's replay "
                f"would hold {stored} transitions at its first gradient, fewer than "
                f"batch_size={self.batch_size}; set learning_starts >= {need}")


@struct.dataclass
class Server:
    params: dict
    target_params: dict
    opt_state: optax.OptState  # over the flat parameter vector
    version: jax.Array  # [] int32: pushes applied


@struct.dataclass
class Bundle:
    env_state: envs.EnvState  # leaves [num_envs, ...]
    nstep_carry: NStepCarry
    buffer: object  # this bundle's uniform replay
    key: jax.Array
    env_steps: jax.Array  # [] int32: this bundle's env steps


@struct.dataclass
class Copy:
    params: dict
    target_params: dict
    version: jax.Array  # [] int32


@struct.dataclass
class Push:
    gradient: jax.Array
    version: jax.Array


class Blocks(NamedTuple):
    """What Gorila's parts share: the config, the env spec, the Q-network, each bundle's
    envs (None on host envs) and its replay."""
    cfg: Config
    spec: Any  # envs.VecEnv of one env, or host.HostSpec for gymnasium envs
    network: nn.Module  # the Q-network (make_q_network)
    env: envs.VecEnv | None  # one bundle's num_envs envs; None on host envs
    buf: replay.Buffer  # each bundle's uniform replay

    @property
    def q_fn(self) -> Callable:
        return self.network.apply

    @property
    def decay_steps(self) -> int:
        """Each bundle decays epsilon over its share of the run's steps."""
        return int(self.cfg.exploration_fraction * self.cfg.total_timesteps) \
            // self.cfg.num_workers


def init_bundle(blk: Blocks, key: jax.Array) -> Bundle:
    """A bundle's fresh envs, empty replay and key."""
    cfg, spec = blk.cfg, blk.spec
    k_env, k_run = jax.random.split(key)
    return Bundle(
        env_state=None if blk.env is None else blk.env.reset(
            jax.random.split(k_env, cfg.num_envs)),
        nstep_carry=init_nstep_carry(cfg.n_step, cfg.num_envs, spec.observation_shape,
                                     spec.observation_dtype),
        buffer=blk.buf.init(example_transition(spec.observation_shape,
                                               spec.observation_dtype)),
        key=k_run, env_steps=jnp.int32(0))


def init_state(blk: Blocks, key: jax.Array) -> AsyncState:
    """The server's initial parameters, every bundle fresh, each with a copy of them."""
    cfg = blk.cfg
    k_params, k_bundles = jax.random.split(key)
    params = blk.network.init(k_params, jnp.zeros((1,) + blk.spec.observation_shape))
    return AsyncState(
        server=Server(params, params, optimizer(cfg).init(params), jnp.int32(0)),
        workers=jax.vmap(functools.partial(init_bundle, blk))(
            jax.random.split(k_bundles, cfg.num_workers)),
        copies=worker_copies(Copy(params, params, jnp.int32(0)), cfg.num_workers),
        hparams=hyper.init(cfg))


def store(blk: Blocks, b: Bundle, key, env_state, steps: NStepCarry, hp) -> Bundle:
    """The bundle after its steps ``steps`` (``[T, N]``): their n-step transitions in
    its replay, its key and env-step count moved on."""
    cfg = blk.cfg
    carry, transitions = to_transitions(b.nstep_carry, steps, hp.gamma, cfg.n_step,
                                        b.env_steps)
    return Bundle(env_state, carry, blk.buf.add(b.buffer, transitions), key,
                  b.env_steps + cfg.env_steps_per_push)


def epsilon_of(blk: Blocks, b: Bundle, hp) -> jax.Array:
    """The bundle's exploration rate, decayed linearly over its env steps."""
    return linear_epsilon(b.env_steps, hp.epsilon_start, hp.epsilon_end, blk.decay_steps)


def act(blk: Blocks, b: Bundle, copy: Copy, hp) -> tuple[Bundle, jax.Array, dict]:
    """A bundle's acting and storing; returns its sampling key too."""
    cfg = blk.cfg
    key, k_act, k_sample = jax.random.split(b.key, 3)
    epsilon = epsilon_of(blk, b, hp)
    env_state, steps, ts = act_steps(
        blk.env, blk.q_fn, copy.params, b.env_state, k_act, epsilon, cfg.num_steps,
        lambda k: jax.random.split(k, (cfg.num_steps, cfg.num_envs)))
    bundle = store(blk, b, key, env_state, steps, hp)
    return bundle, k_sample, {"epsilon": epsilon, **envs.episode_metrics(ts)}


def gradient(blk: Blocks, b: Bundle, copy: Copy, k_sample, hp) -> tuple[Push, dict]:
    """The Q-learning gradient of a batch of the bundle's replay at its copy."""
    cfg = blk.cfg
    sample = blk.buf.sample(b.buffer, k_sample, cfg.batch_size)
    (loss, aux), grad = jax.value_and_grad(
        lambda p: q_loss(p, copy.target_params, blk.q_fn, sample.transitions,
                         jnp.ones((cfg.batch_size,)), cfg.double_q, cfg.loss,
                         hp.huber_delta), has_aux=True)(copy.params)
    return Push(grad, copy.version), {"loss": loss, "q_mean": aux["q_mean"]}


def worker(blk: Blocks, b: Bundle, copy: Copy, hparams) -> tuple[Bundle, Push, dict]:
    """One bundle's acting, storing, and gradient at its copy."""
    hp = hyper.view(blk.cfg, hparams)
    b, k_sample, metrics = act(blk, b, copy, hp)
    push, info = gradient(blk, b, copy, k_sample, hp)
    return b, push, {**info, **metrics}


def apply(cfg: Config, server: Server, push: Push, hparams) -> tuple[Server, dict]:
    """The server's Adam step with one push; the target network every
    ``target_update_period`` pushes."""
    hp = hyper.view(cfg, hparams)
    updates, opt_state = optimizer(hp).update(push.gradient, server.opt_state, server.params)
    params = optax.apply_updates(server.params, updates)
    version = server.version + 1
    target = optax.periodic_update(
        optax.incremental_update(params, server.target_params, hp.tau),
        server.target_params, version, cfg.target_update_period)
    return (Server(params, target, opt_state, version),
            staleness_metrics(server.version, push.version))


def pull(cfg: Config, server: Server, copy: Copy) -> Copy:
    """The server's parameters once they are ``actor_sync_period`` pushes past the
    copy, else the copy."""
    fresh = server.version - copy.version >= cfg.actor_sync_period
    return jax.tree.map(lambda new, old: jnp.where(fresh, new, old),
                        Copy(server.params, server.target_params, server.version), copy)


def warmup(blk: Blocks, state: AsyncState) -> tuple[AsyncState, dict]:
    """An update before ``learning_starts``: every bundle acts and stores, nothing is
    pushed (the same metrics, losses and staleness zero)."""
    hp = hyper.view(blk.cfg, state.hparams)
    workers, _, metrics = jax.vmap(lambda b, c: act(blk, b, c, hp))(state.workers,
                                                                    state.copies)
    return state.replace(workers=workers), combine_worker_metrics(
        without_push(metrics, jnp.zeros((blk.cfg.num_workers,), jnp.float32)))


def make(config: Config) -> Algorithm:
    """Builds Gorila's pure parts and its round-robin ``init``/``update``: bundles of
    actor, replay and learner pushing gradients to a parameter server."""
    cfg = config
    on_host = host.is_host(cfg.env)  # gymnasium envs, stepped by the threaded workers
    spec = host.spec(cfg.env) if on_host else envs.make(cfg.env, 1)
    blk = Blocks(cfg, spec, make_q_network(spec, cfg.hidden_sizes, cfg.activation, cfg.dueling),
                 None if on_host else envs.make(cfg.env, cfg.num_envs),
                 replay.uniform(cfg.buffer_size))
    pieces = AsyncWorker(num_workers=cfg.num_workers, apply=functools.partial(apply, cfg),
                         pull=functools.partial(pull, cfg),
                         worker=None if on_host else functools.partial(worker, blk))

    def greedy(state: AsyncState, obs: jax.Array, key: jax.Array) -> jax.Array:
        del key
        return jnp.argmax(blk.q_fn(state.server.params, obs), axis=-1).astype(jnp.int32)

    return Algorithm(
        config=cfg,
        init=functools.partial(init_state, blk),
        update=host.compiled_update if on_host else round_robin_update(pieces),
        num_updates=cfg.num_updates,
        env_steps_per_update=cfg.env_steps_per_update,
        act=greedy,
        hyperparams=cfg.sweep,
        warmup_updates=cfg.warmup_updates,
        warmup_update=None if on_host else functools.partial(warmup, blk),
        async_worker=pieces,
        host=_host_worker(blk) if on_host else None,
    )


def without_push(metrics: dict, zero) -> dict:
    """The metrics of a warm-up step, in which a bundle acts and stores but pushes
    nothing: the push's (loss, Q-values, staleness) as ``zero``, so warm-up and learning
    updates report the same names."""
    return {"loss": zero, "q_mean": zero, **metrics, "staleness": zero, "max_staleness": zero}


def _host_worker(blk: Blocks) -> HostActing:
    """Gorila's bundles on host envs (:mod:`jaxrl_par.envs.host`), for the threaded
    runtime: each lane's envs, a step as A3C's (``num_steps`` host steps of every env,
    each action from one compiled call for all lanes, then one compiled call that stores
    and takes the gradient) and a warm-up ``(envs, bundle, copy, hparams) -> (bundle,
    metrics)``, the same acting and storing without a push."""
    cfg, spec, q_fn = blk.cfg, blk.spec, blk.q_fn

    def begin(b, hparams):
        hp = hyper.view(cfg, hparams)
        key, k_act, k_sample = jax.random.split(b.key, 3)
        return key, k_act, k_sample, epsilon_of(blk, b, hp)

    def act(params, obs, key, epsilon):
        key, k_u, k_a = jax.random.split(key, 3)
        n = obs.shape[0]
        action = epsilon_greedy_from_draws(
            q_fn(params, obs), jax.random.uniform(k_u, (n,)),
            jax.random.randint(k_a, (n,), 0, spec.num_actions), epsilon)
        return action, key

    def learn(b, key, k_sample, steps, copy, hparams):
        hp = hyper.view(cfg, hparams)
        b = store(blk, b, key, None, steps, hp)
        push, info = gradient(blk, b, copy, k_sample, hp)
        return b, push, info

    begin_lanes, act_lanes = jax.jit(jax.vmap(begin)), jax.jit(jax.vmap(act))
    learn_lanes = jax.jit(jax.vmap(learn))
    store_lanes = jax.jit(jax.vmap(
        lambda b, key, steps, hparams: store(blk, b, key, None, steps, hyper.view(cfg, hparams))))

    def play(lanes, b, copy, hparams):
        key, k_act, k_sample, epsilon = begin_lanes(b, hparams)
        rows = {f: [] for f in NStepCarry._fields if f != "valid"}
        episodes = host.EpisodeTotals(len(lanes))
        for _ in range(cfg.num_steps):
            obs = np.stack([lane.obs for lane in lanes])
            action, k_act = act_lanes(copy.params, obs, k_act, epsilon)
            action_np = np.asarray(action)
            steps = [lane.step(action_np[s]) for s, lane in enumerate(lanes)]
            episodes.add(steps)
            rows["obs_tm1"].append(obs)
            rows["action"].append(action_np)
            rows["obs_t"].append(np.stack([lane.obs for lane in lanes]))
            for f in ("reward", "terminated", "truncated", "final_obs"):
                rows[f].append(np.stack([st[f] for st in steps]))
        steps = NStepCarry(**{f: jnp.stack([jnp.asarray(x) for x in v], axis=1)
                              for f, v in rows.items()},
                           valid=jnp.ones((len(lanes), cfg.num_steps, cfg.num_envs), bool))
        return key, k_sample, steps, {"epsilon": np.asarray(epsilon), **episodes.metrics()}

    def host_worker(lanes, b, copy, hparams):
        key, k_sample, steps, metrics = play(lanes, b, copy, hparams)
        b, push, info = learn_lanes(b, key, k_sample, steps, copy, hparams)
        return b, push, {**info, **metrics}

    def host_warmup(lanes, b, copy, hparams):
        key, _, steps, metrics = play(lanes, b, copy, hparams)
        return store_lanes(b, key, steps, hparams), without_push(
            metrics, np.zeros(len(lanes), np.float32))

    return HostActing(make_envs=functools.partial(host.lane_envs, cfg.env, cfg.num_envs),
                      step=host_worker, warmup=host_warmup)

