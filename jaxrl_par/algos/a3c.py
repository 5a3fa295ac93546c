"""A3C (Mnih et al. 2016, https://arxiv.org/abs/1602.01783): asynchronous workers pushing
gradients to a shared model.

``num_workers`` workers, each with ``num_envs`` envs of its own, repeat: pull the
parameters from the server, act ``num_steps`` steps (``t_max``) with them, compute the
gradient of the n-step advantage actor-critic loss at the parameters they acted with
(:func:`jaxrl_par.algos.actor_critic.vtrace_loss` with every importance weight 1 and
``vtrace_lambda=1``: n-step returns bootstrapped from the last state), and push it. The
server applies each push with its optimiser (Adam over the flat parameters, one shared
state, as the paper's shared RMSProp statistics) as it arrives. A push is applied to
parameters that other workers have moved since it was pulled: its *staleness* (pushes
applied in between) is computed per push, from the versions the server and the copies
carry, and reported (``staleness``).

Two ways to run it, from the same pure parts (``worker``, ``apply``, ``pull``; see
:class:`jaxrl_par.algos.base.AsyncState`):

* ``train(algo, seeds)``: the runner's scan of ``update``, one round per update in which
  the workers compute their gradients at once and the server applies them in the order
  ``0 .. K-1`` (:func:`jaxrl_par.algos.base.round_robin_update`): deterministic,
  vmappable over seeds and sweeps, every push ``K - 1`` stale after the first round.
* ``train(algo, seeds, async_workers=True)``: each worker in a host thread of its own,
  on its own device where there are several, pushing whenever its gradient is done
  (:mod:`jaxrl_par.parallel.async_workers`). The order, and so the staleness, is then
  whatever the machine makes it, as in the paper.

Host environments: with ``env="gymnasium:<id>"`` (:mod:`jaxrl_par.envs.host`) each
threaded worker steps gymnasium envs of its own from Python, between one compiled
policy call per step and one compiled gradient call per push, for simulators that are
not JAX (only with ``async_workers``; the round-robin program cannot step them).

``num_workers=1`` is A2C (:mod:`jaxrl_par.algos.a2c`): one synchronous gradient per
rollout of all envs, staleness 0.

Data parallel (``axis_name`` set, ``train(..., devices=D)``): each device steps
``num_envs / D`` of every worker's envs, and every push is the mean of the devices'
gradients (the gradient of the worker's whole batch), so the server, replicated on each
device, applies what it would on one. With A2C this is synchronous data-parallel A2C.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ClassVar

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl_par import axes, envs
from jaxrl_par.algos import hyper
from jaxrl_par.algos.actor_critic import ActorCriticBlocks, Trajectory, vtrace_loss
from jaxrl_par.algos.base import (
    Algorithm,
    AsyncState,
    AsyncWorker,
    HostActing,
    annealed_adam,
    round_robin_update,
    staleness_metrics,
    worker_copies,
)
from jaxrl_par.algos.config import RolloutSchedule
from jaxrl_par.algos.fields import (
    ActorCriticLoss,
    ActorCriticNetwork,
    Annealing,
    DataParallel,
    Optimizer,
    RolloutLength,
    Run,
    Vectorized,
    Workers,
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
class Config(RolloutSchedule, DataParallel, ActorCriticNetwork, ActorCriticLoss, Annealing,
             Optimizer, RolloutLength, Vectorized, Workers, Run):
    """A3C hyperparameters. The defaults solve CartPole-v1 within 5e5 env steps. With
    ``axis_name`` set, each worker's envs are split over the devices of that axis and
    its pushes averaged over them."""

    SWEEPABLE: ClassVar[tuple] = ("learning_rate", "gamma", "vf_coef", "ent_coef",
                                  "max_grad_norm")
    SWEEP_POSITIVE: ClassVar[tuple] = ("max_grad_norm",)  # 0 turns clipping off

    num_envs: int = 4  # of each worker
    num_steps: int = 16  # t_max: steps each worker acts per gradient
    learning_rate: float = 1e-3
    ent_coef: float = 0.0  # SB3's A2C default; 0.01 keeps some CartPole seeds from solving
    returns_method: str = field("auto", "the n-step returns' backward recursion (see "
                                "returns.gae_advantages)")

    @property
    def batch_size(self) -> int:
        """Env steps per update: one push of every worker."""
        return self.num_workers * self.num_envs * self.num_steps

    def __post_init__(self):
        hyper.check_sweep(self)
        envs.check_env_id(self.env)
        if self.returns_method not in GAE_METHODS:
            raise ValueError(f"returns_method={self.returns_method!r}; choose from "
                             f"{GAE_METHODS}")
        self.check_actor_critic()
        if self.axis_name is not None and host.is_host(self.env):
            raise ValueError(f"{self.env} steps on the host, from each threaded worker "
                             "(train(..., async_workers=True)); data parallelism over "
                             "devices (axis_name) needs JAX envs: use a gymnax or Brax id")


@struct.dataclass
class Server:
    params: dict
    opt_state: optax.OptState  # over the flat parameter vector
    version: jax.Array  # [] int32: pushes applied


@struct.dataclass
class Worker:
    env_state: envs.EnvState  # leaves [num_envs, ...]
    key: jax.Array
    # With reward normalisation (else None): this worker's statistics of its envs'
    # discounted returns, and each env's running return [num_envs].
    reward_stats: RunningStats | None = None
    discounted_return: jax.Array | None = None


@struct.dataclass
class Copy:
    params: dict
    version: jax.Array  # [] int32: the server's version when pulled


@struct.dataclass
class Push:
    gradient: jax.Array  # flat, over the copy's parameters
    version: jax.Array  # [] int32: the copy's version


class Blocks(ActorCriticBlocks):
    """What A3C's parts share: the config, the env spec and the actor-critic."""


def optimizer(cfg: Config, hp) -> optax.GradientTransformation:
    """The server's Adam (after global-norm clipping) for the values ``hp`` (the config,
    or :func:`hyper.view` of a lane), its learning rate annealed over the run's pushes
    with ``anneal_lr``."""
    return annealed_adam(hp.learning_rate, hp.max_grad_norm,
                         cfg.anneal_steps(cfg.num_updates * cfg.num_workers),
                         final_learning_rate=cfg.final_learning_rate)


def init_worker(b: Blocks, key: jax.Array) -> Worker:
    """A worker's fresh envs (none on host envs), its key and, with reward
    normalisation, empty return statistics (``[N_local]`` running returns)."""
    cfg = b.cfg
    k_env, k_act = jax.random.split(key)
    reward_stats, discounted_return = init_reward_scaling(b.normalize_rewards, b.n_local())
    env_state = None if b.on_host else b.local_env().reset(
        axes.shard_keys(k_env, cfg.num_envs, cfg.axis_name))
    return Worker(env_state, k_act, reward_stats, discounted_return)


def init_state(b: Blocks, key: jax.Array) -> AsyncState:
    """The server's initial parameters (version 0), ``K`` fresh workers (leaves
    ``[K, ...]``), each with a copy of the parameters."""
    cfg = b.cfg
    k_params, k_workers = jax.random.split(key)
    params = b.network.init(k_params, jnp.zeros((1,) + b.spec.observation_shape))
    return AsyncState(
        server=Server(params, optimizer(cfg, cfg).init(params), jnp.int32(0)),
        workers=jax.vmap(functools.partial(init_worker, b))(
            jax.random.split(k_workers, cfg.num_workers)),
        copies=worker_copies(Copy(params, jnp.int32(0)), cfg.num_workers),
        hparams=hyper.init(cfg),
    )


def learn(b: Blocks, w: Worker, copy: Copy, traj: Trajectory, hparams
          ) -> tuple[Worker, Push, dict]:
    """The gradient of a worker's unrolls ``traj`` (``[T, N_local, ...]``) at the
    parameters that acted them: the n-step actor-critic loss
    (:func:`~jaxrl_par.algos.actor_critic.vtrace_loss` with every importance weight 1),
    on rewards scaled by the worker's return statistics with reward normalisation.
    Returns the worker (its statistics moved on), the push (gradient and the copy's
    version) and the loss metrics, all averaged over the data axis."""
    cfg = b.cfg
    hp = hyper.view(cfg, hparams)
    reward_stats, discounted_return = w.reward_stats, w.discounted_return
    if b.normalize_rewards:
        reward, reward_stats, discounted_return = scale_rewards(
            reward_stats, discounted_return, traj.reward,
            traj.terminated | traj.truncated, hp.gamma, cfg.axis_name)
        traj = traj.replace(reward=reward)
    # On-policy: every importance weight is 1 (off_policy_correction=False), so the
    # targets are n-step returns whatever rounding the recomputed log-probs carry.
    gradient, info = jax.grad(
        lambda p: vtrace_loss(b.network, p, traj, LossConstants(hp),
                              method=cfg.returns_method, off_policy_correction=False),
        has_aux=True)(copy.params)
    del info["importance_weight"], info["clipped_rho_fraction"]  # 1 and 0 here
    # Data parallel: the worker's batch is the union of the devices' shares, its
    # loss the mean over them (check_vma=False: pmap's local gradients, averaged).
    gradient, info = axes.pmean((gradient, info), cfg.axis_name)
    return (w.replace(reward_stats=reward_stats, discounted_return=discounted_return),
            Push(gradient, copy.version), info)


def worker(b: Blocks, w: Worker, copy: Copy, hparams) -> tuple[Worker, Push, dict]:
    """One worker's rollout (``num_steps`` steps of its envs with the copy's policy)
    and its gradient at the parameters it acted with (:func:`learn`); the metrics add
    the rollout's episode statistics."""
    cfg = b.cfg
    key, k_roll = jax.random.split(w.key)
    env_state, (obs, action, log_prob, ts) = policy_rollout(
        b.local_env(), lambda o: b.network.apply(copy.params, o, method=ActorCritic.actor),
        w.env_state, k_roll, cfg.num_envs, cfg.num_steps, cfg.axis_name)
    traj = Trajectory(obs, action, log_prob, ts.reward,
                      zero_bootstrap(ts.terminated, ts.truncated, cfg.bootstrap_truncation),
                      ts.truncated, ts.final_obs, copy.version)
    w, push, info = learn(b, w.replace(env_state=env_state, key=key), copy, traj, hparams)
    return w, push, {**info, **envs.episode_metrics(ts, cfg.axis_name)}


def apply(b: Blocks, server: Server, push: Push, hparams) -> tuple[Server, dict]:
    """The server's optimiser step with one push (version + 1), and the push's
    staleness (:func:`~jaxrl_par.algos.base.staleness_metrics`)."""
    hp = hyper.view(b.cfg, hparams)
    updates, opt_state = optimizer(b.cfg, hp).update(push.gradient, server.opt_state,
                                                     server.params)
    return (Server(optax.apply_updates(server.params, updates), opt_state,
                   server.version + 1),
            staleness_metrics(server.version, push.version))


def pull(server: Server, copy: Copy) -> Copy:
    """The server's parameters and version: A3C pulls after every push."""
    del copy
    return Copy(server.params, server.version)


def act(b: Blocks, state: AsyncState, obs: jax.Array, key: jax.Array) -> jax.Array:
    """The server's distribution's mode for ``obs [B, ...]``, as the env gets it."""
    action, _ = make_policy(b.network, deterministic=True)(state.server.params, obs, key)
    return env_action(b.spec, action)


def sample(b: Blocks, state: AsyncState, obs: jax.Array, key: jax.Array) -> jax.Array:
    """An action drawn from the server's distribution for ``obs [B, ...]``, as the env
    gets it."""
    action, _ = make_policy(b.network)(state.server.params, obs, key)
    return env_action(b.spec, action)


def make(config: Config) -> Algorithm:
    """Builds A3C's pure parts and its round-robin ``init``/``update`` for ``config``."""
    cfg = config
    on_host = host.is_host(cfg.env)  # gymnasium envs, stepped by the threaded workers
    spec = host.spec(cfg.env) if on_host else envs.make(cfg.env, 1)
    b = Blocks(cfg, spec, cfg.actor_critic(spec), on_host)
    pieces = AsyncWorker(num_workers=cfg.num_workers, apply=functools.partial(apply, b),
                         pull=pull, worker=None if on_host else functools.partial(worker, b))
    return Algorithm(
        config=cfg,
        init=functools.partial(init_state, b),
        update=host.compiled_update if on_host else round_robin_update(pieces),
        num_updates=cfg.num_updates,
        env_steps_per_update=cfg.batch_size,
        act=functools.partial(act, b),
        sample=functools.partial(sample, b),
        hyperparams=cfg.sweep,
        axis_name=cfg.axis_name,
        data_parallel=True,
        async_worker=pieces,
        host=host_worker(b) if on_host else None,
    )


class LossConstants:
    """The loss coefficients of a view ``hp`` with V-trace's constants of n-step returns
    (lambda 1, no truncation: only read where importance weights are 1)."""

    def __init__(self, hp):
        self.gamma, self.vf_coef, self.ent_coef = hp.gamma, hp.vf_coef, hp.ent_coef
        self.vtrace_lambda, self.rho_bar, self.c_bar = 1.0, 1.0, 1.0


def host_step(b: Blocks, act_lanes: Callable, learn_lanes: Callable, lanes: list,
              w: Worker, copy: Copy, hparams) -> tuple[Worker, Push, dict]:
    """A worker's step on host envs, for ``S`` seed lanes (leaves ``[S, ...]``):
    ``num_steps`` steps of every env of every lane (``lanes``, ``[S]`` host vector
    envs), each action from one compiled call ``act_lanes`` for all lanes, then one
    compiled gradient call ``learn_lanes`` (:func:`learn`, vmapped), as the compiled
    :func:`worker` does with JAX envs. The trajectory is ``[S, T, N, ...]``."""
    key, records, episodes = host_policy_rollout(lanes, act_lanes, copy.params, w.key,
                                                 b.cfg.num_steps, b.cfg.bootstrap_truncation)
    traj = Trajectory(**records, version=copy.version)  # [S, T, N, ...]
    w, push, info = learn_lanes(w.replace(key=key), copy, traj, hparams)
    return w, push, {**info, **episodes}


def host_worker(b: Blocks) -> HostActing:
    """A3C's workers on host envs (:mod:`jaxrl_par.envs.host`), for the threaded runtime
    (:mod:`jaxrl_par.parallel.async_workers`): a worker's envs for each seed lane, seeded
    from the lane's worker key, and its step ``(envs, worker, copy, hparams) -> (worker,
    push, metrics)`` (:func:`host_step`, with its two compiled calls)."""
    act_lanes = jax.jit(jax.vmap(host_policy(b.network, b.spec)))
    learn_lanes = jax.jit(jax.vmap(functools.partial(learn, b)))
    return HostActing(make_envs=functools.partial(host.lane_envs, b.cfg.env, b.cfg.num_envs),
                      step=functools.partial(host_step, b, act_lanes, learn_lanes))
