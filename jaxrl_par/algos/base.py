"""The protocol every algorithm follows: an :class:`Algorithm` of pure ``init`` and
``update``, with the pieces its actor-learner (:class:`Pipeline`) and asynchronous
(:class:`AsyncWorker`) runtimes call."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct


class Pipeline(NamedTuple):
    """An update split into an actors' half and a learner's half that can run at once
    (Ape-X's and IMPALA's ``pipeline=True``): see :func:`pipelined_update`, and
    :mod:`jaxrl_par.parallel.actor_learner`, which runs the halves on two devices.

    Attributes:
      split: ``split(state) -> (actor, copy, learner, pending)``: the actors' half of the
        state, the parameters they act with, the learner's half and the batch the actors
        made in the previous update.
      learner: ``learner(learner, pending) -> (learner, copy, metrics)``: one update's
        learning from ``pending``; ``copy`` is what the actors act with next.
      join: ``join(actor, learner, pending) -> state``.
      actor: ``actor(actor, copy) -> (actor, acted, metrics)``: one update's acting, or
        None when the actors step host environments (then :attr:`Algorithm.host` acts).
    """

    split: Callable
    learner: Callable
    join: Callable
    actor: Callable | None = None


class AsyncWorker(NamedTuple):
    """The pieces of an asynchronous (parameter-server) algorithm, A3C's and Gorila's:
    see :func:`round_robin_update`, and :mod:`jaxrl_par.parallel.async_workers`, which
    runs them from host threads.

    Attributes:
      num_workers: the workers ``K``; the state is an :class:`AsyncState`.
      apply: ``apply(server, push, hparams) -> (server, metrics)``: the server applies
        one push; ``metrics`` holds its staleness (:func:`staleness_metrics`).
      pull: ``pull(server, copy) -> copy``: the copy a worker holds after its push.
      worker: ``worker(worker, copy, hparams) -> (worker, push, metrics)``: one worker's
        acting and gradient with its copy, or None when the workers step host
        environments (then :attr:`Algorithm.host` computes it).

    A warm-up (every worker acts and stores but pushes nothing, a replay learner before
    ``learning_starts``) is the algorithm's ``warmup_update``.
    """

    num_workers: int
    apply: Callable
    pull: Callable
    worker: Callable | None = None


class HostActing(NamedTuple):
    """Acting on host environments (``gymnasium:<id>``, :mod:`jaxrl_par.envs.host`),
    stepped from Python by a runtime while compiled programs choose the actions.

    Attributes:
      make_envs: ``make_envs(keys [S], vector_env="sync") -> [S] HostVecEnv``: each
        lane's envs, seeded from its keys, stepped as ``vector_env`` says.
      step: for a :class:`Pipeline`, ``step(envs, actor, copy) -> (actor, acted,
        metrics)`` (the compiled ``actor``'s contract); for an :class:`AsyncWorker`,
        ``step(envs, worker, copy, hparams) -> (worker, push, metrics)`` (the compiled
        ``worker``'s).
      warmup: for an :class:`AsyncWorker` with a warm-up, ``warmup(envs, worker, copy,
        hparams) -> (worker, metrics)``, acting and storing without a push; else None.
    """

    make_envs: Callable
    step: Callable
    warmup: Callable | None = None


class HostSteps(NamedTuple):
    """An update split at the env step, so that a vector of host envs
    (``gymnasium:<id>``, :mod:`jaxrl_par.envs.host`) steps between compiled calls:
    :mod:`jaxrl_par.parallel.host_loop` calls ``act`` once per env step and ``learn``
    once per update, each jitted (and vmapped over seed lanes). Both are built from the
    blocks the on-device ``update`` uses, so the maths is the same.

    Attributes:
      act: ``act(state, obs [N, ...], t) -> HostAction``: step ``t`` (of the update's
        ``num_steps``) of every env; its randomness comes from ``state.key`` and ``t``.
      learn: ``learn(state, rollout) -> (state, metrics)``: the rest of an update from
        its :class:`~jaxrl_par.blocks.host_steps.Rollout` ``[T, N, ...]``, as
        ``update`` returns them.
      warmup_learn: ``learn`` without its learning branch, for the
        ``Algorithm.warmup_updates`` (as ``Algorithm.warmup_update``), or None.
      observe: ``observe(state, action, done [N]) -> state`` after each env step, for
        acting that carries state from step to step (the OU noise of DDPG and TD3,
        restarted at episode ends): ``action`` is the step's ``HostAction``. None: the
        state does not change while acting.
      off_policy: whether ``learn`` may learn from steps acted with older parameters
        than the state it gets (a replay learner: DQN, SAC, DDPG, TD3), so that the host
        loop may act with the state of one update before while the last update learns
        (``HostLoop(..., overlap=True)``). False for on-policy learners (PPO).
    """

    act: Callable
    learn: Callable
    warmup_learn: Callable | None = None
    observe: Callable | None = None
    off_policy: bool = False


class Algorithm(NamedTuple):
    """An algorithm as a pair of pure functions plus its config.

    Attributes:
      config: the frozen, validated config it was made from.
      init: ``init(key) -> state``: the whole training state as a pytree.
      update: ``update(state) -> (state, metrics)``: one iteration (act + learn). Pure,
        jit/vmap/scan-safe. ``metrics`` is a dict of scalar arrays and always holds
        ``episode_return`` (mean undiscounted return of episodes that finished during
        the iteration, NaN if none did) and ``num_episodes``.
      num_updates: iterations in a full run (``config.total_timesteps`` worth).
      env_steps_per_update: environment steps one iteration takes (over all envs).
      act: ``act(state, obs, key) -> action`` for evaluation with the current parameters.
      sample: ``sample(state, obs, key) -> action`` drawn from the policy's distribution
        (as ``act``, but not its mode), or None where the algorithm has none (Q-learners).
      hyperparams: config fields that ``update`` reads from ``state.hparams`` (a dict of
        float32 ``[]``, set to the config's values by ``init``) rather than from the
        config, so that each lane of a vmap can hold its own: the runner writes them
        (``train(..., hparams=...)``; see :mod:`jaxrl_par.algos.hyper`).
      warmup_updates: the first updates in which ``update`` cannot learn (a replay
        learner before ``learning_starts``).
      warmup_update: with ``warmup_updates``, an update that gives what ``update`` gives
        there without its learning branch; the runner runs it instead. (Inside
        ``update`` the choice depends on the state, so under the runner's vmap over
        lanes its ``lax.cond`` computes both branches; the runner chooses on the
        unbatched update index.)
      axis_name: the device axis ``update`` averages over (``config.axis_name``), or None
        on one device.
      data_parallel: whether the algorithm can run data parallel (its config takes an
        ``axis_name``).
      pipeline: the actor-learner halves of ``update``, or None (:class:`Pipeline`).
      async_worker: the parameter-server pieces, or None (:class:`AsyncWorker`).
      host: acting on host environments, or None (:class:`HostActing`).
      host_steps: the update split at the env step for host vector envs, or None
        (:class:`HostSteps`).
    """

    config: Any
    init: Callable[[jax.Array], Any]
    update: Callable[[Any], tuple[Any, dict[str, jax.Array]]]
    num_updates: int
    env_steps_per_update: int
    act: Callable[[Any, jax.Array, jax.Array], jax.Array] | None = None
    sample: Callable[[Any, jax.Array, jax.Array], jax.Array] | None = None
    hyperparams: tuple[str, ...] = ()
    warmup_updates: int = 0
    warmup_update: Callable | None = None
    axis_name: str | None = None
    data_parallel: bool = False
    pipeline: Pipeline | None = None
    async_worker: AsyncWorker | None = None
    host: HostActing | None = None
    host_steps: HostSteps | None = None


def scan_updates(algo: Algorithm, length: int) -> Callable:
    """``run(state, start) -> (state, metrics [length])``: updates ``start .. start+length-1``
    of one state in a ``lax.scan``.

    Updates at or past ``algo.num_updates`` are skipped (``lax.cond`` on the unbatched
    update index, so a vmap over seeds keeps it a real branch) and their metrics are
    zeros. The cond is only built when ``length`` does not divide ``algo.num_updates``.
    The first ``algo.warmup_updates`` run ``algo.warmup_update`` (chosen the same way).
    Shared by the single-device runner and the sharded one (``jaxrl_par.parallel``).
    """
    masked = algo.num_updates % length != 0
    warm = algo.warmup_updates > 0 and algo.warmup_update is not None

    def step(state, t):
        if not warm:
            return algo.update(state)
        return jax.lax.cond(t < algo.warmup_updates, algo.warmup_update, algo.update, state)

    def body(state, t):
        if not masked:
            return step(state, t)
        # The skipped branch returns zeros shaped like the update's metrics. They are
        # read off the update's own trace as the cond traces it (true branch first), so
        # the update is traced once, not a second time by `jax.eval_shape`; if the
        # branches were ever traced the other way round, `eval_shape` still gives them.
        traced = []

        def run(s):
            out = step(s, t)
            traced.append(jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype),
                                       out[1]))
            return out

        def skip(s):
            metrics = traced[-1] if traced else jax.eval_shape(lambda s: step(s, t), s)[1]
            return s, jax.tree.map(lambda m: jnp.zeros(m.shape, m.dtype), metrics)

        return jax.lax.cond(t < algo.num_updates, run, skip, state)

    def run(state, start):
        return jax.lax.scan(body, state, start + jnp.arange(length))

    return run


def pipelined_update(pipeline: Pipeline) -> Callable:
    """``update(state) -> (state, metrics)`` of an actor-learner :class:`Pipeline`, on one
    device.

    The actors' batch of update ``u`` is learned from in update ``u + 1``, so within an
    update neither half reads what the other writes and the two can run at once
    (:mod:`jaxrl_par.parallel.actor_learner` runs them on two devices).
    """

    def update(state):
        actor, copy, learner, pending = pipeline.split(state)
        actor, acted, actor_metrics = pipeline.actor(actor, copy)
        learner, _, learner_metrics = pipeline.learner(learner, pending)
        return pipeline.join(actor, learner, acted), {**actor_metrics, **learner_metrics}

    return update


@struct.dataclass
class AsyncState:
    """The state of an asynchronous (parameter-server) algorithm: A3C, Gorila.

    Attributes:
      server: the parameter server's: parameters, optimiser state, and ``version``
        (``[]`` int32, gradients applied so far).
      workers: each worker's own state (envs, key, a replay buffer...), leaves ``[K, ...]``.
      copies: the parameters each worker computes its next gradient with (pulled from
        the server, with the version they were pulled at), leaves ``[K, ...]``.
      hparams: the swept fields (see :mod:`jaxrl_par.algos.hyper`), or None.
    """

    server: Any
    workers: Any
    copies: Any
    hparams: dict | None = None


def worker_copies(copy: Any, num_workers: int) -> Any:
    """``copy`` (parameters and version) for each of ``num_workers`` workers, leaves
    ``[K, ...]``: every worker starts from the server's initial parameters."""
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_workers,) + jnp.shape(x)), copy)


def staleness_metrics(server_version: jax.Array, push_version: jax.Array
                      ) -> dict[str, jax.Array]:
    """An ``apply`` part's metrics of one push: its staleness, the pushes the server
    applied since the pushing worker pulled (``max_staleness`` too, which
    :func:`combine_worker_metrics` maximises over an update's pushes)."""
    staleness = (server_version - push_version).astype(jnp.float32)
    return {"staleness": staleness, "max_staleness": staleness}


def round_robin_update(parts: AsyncWorker) -> Callable:
    """``update(state) -> (state, metrics)`` of an asynchronous algorithm on one device:
    every worker pushes one gradient, in the round-robin order ``0 .. K-1``.

    The ``K`` workers compute their gradients at once (vmapped): each depends only on
    its own state and copy. The server then applies them one after another, and worker
    ``k`` pulls right after its own push, as a thread would. So after the first round
    every gradient is applied ``K - 1`` pushes after its copy was pulled: the
    staleness of ``K`` workers that run at the same speed in staggered phases. Metrics
    are combined over the workers (:func:`combine_worker_metrics`). The threaded
    runtime (:mod:`jaxrl_par.parallel.async_workers`) calls the same pieces from host
    threads in whatever order the workers finish.
    """

    def update(state: AsyncState):
        workers, pushes, worker_metrics = jax.vmap(parts.worker, in_axes=(0, 0, None))(
            state.workers, state.copies, state.hparams)

        def push(server, xs):
            one, copy = xs
            server, metrics = parts.apply(server, one, state.hparams)
            return server, (parts.pull(server, copy), metrics)

        server, (copies, server_metrics) = jax.lax.scan(push, state.server,
                                                         (pushes, state.copies))
        metrics = combine_worker_metrics({**worker_metrics, **server_metrics})
        return state.replace(server=server, workers=workers, copies=copies), metrics

    return update


def combine_worker_metrics(metrics: Mapping[str, jax.Array], xp=jnp) -> dict[str, jax.Array]:
    """One update's metrics from ``K`` pushes' (leading axis ``K``, any axes after):
    episode statistics weighted by the episodes each worker finished (NaN where none
    did), ``num_episodes`` summed, ``max_*`` maximised, everything else averaged.
    ``xp=numpy`` combines host arrays without compiling anything."""
    out = {}
    count = metrics.get("num_episodes")
    for name, values in metrics.items():
        if name == "num_episodes":
            out[name] = xp.sum(values, axis=0)
        elif name.startswith("max_"):
            out[name] = xp.max(values, axis=0)
        elif name.startswith("episode_") and count is not None:
            total = xp.sum(count, axis=0)
            weighted = xp.sum(xp.where(count > 0, values * count, 0.0), axis=0)
            out[name] = xp.where(total > 0, weighted / xp.maximum(total, 1.0), xp.nan)
        else:
            out[name] = xp.mean(values.astype(xp.float32), axis=0)
    return out


def clipped_adam(learning_rate, max_grad_norm: float, eps: float = 1e-8
                 ) -> optax.GradientTransformation:
    """Adam after global-norm gradient clipping; ``max_grad_norm = 0`` turns clipping off.

    (``optax.clip_by_global_norm(0)`` would scale every update to zero, so a 0 that means
    "off" in most RL code bases would silently stop training.) ``learning_rate`` and a
    ``max_grad_norm`` other than the Python number 0 may be arrays, traced too (a
    lane's value in a sweep; see :mod:`jaxrl_par.algos.hyper`).
    """
    adam = optax.adam(learning_rate, eps=eps)
    if isinstance(max_grad_norm, (int, float)) and max_grad_norm == 0:
        return adam
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), adam)


def annealed_adam(learning_rate, max_grad_norm: float, anneal_steps: int | None,
                  eps: float = 1e-8, final_learning_rate: float = 0.0
                  ) -> optax.GradientTransformation:
    """:func:`clipped_adam` whose learning rate decays linearly to ``final_learning_rate``
    over ``anneal_steps`` optimiser steps and stays there (PureJaxRL's and CleanRL's
    ``anneal_lr`` with the defaults; gymnax-blines' ``lr_begin -> lr_end`` otherwise), or
    stays constant with ``anneal_steps=None``."""
    if anneal_steps is not None:
        learning_rate = optax.linear_schedule(learning_rate, final_learning_rate,
                                              anneal_steps)
    return clipped_adam(learning_rate, max_grad_norm, eps=eps)
