"""Greedy evaluation of trained states: the return of whole episodes under ``algo.act``.

Training returns (``TrainResult.final_returns``) are those of the exploring policy
(epsilon-greedy for DQN and Ape-X, sampled actions for PPO); :func:`greedy_returns` plays
``num_envs`` fresh episodes per seed with the algorithm's evaluation policy
(``Algorithm.act``: argmax Q, or the distribution's mode) and reports the mean
undiscounted return of the first episode of each env. Each seed (lane) and each env draws
its own start state: seed ``s`` of an evaluation with ``seed`` resets from
``fold_in(key(seed), s)``, so no two seeds replay the same episodes. Every seed of a
``TrainResult.state`` is evaluated in one vmapped call, and the program is compiled once
per algorithm and shape: evaluating again (other states, a later checkpoint) does not
compile again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par import envs
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.blocks import rollouts
from jaxrl_par.envs import host
from jaxrl_par.runner import interrupt
from jaxrl_par.runner.precision import float32


@functools.lru_cache(maxsize=16)
def _evaluator(act: Callable, env_id: str, num_envs: int, max_steps: int) -> Callable:
    """``run(states [S, ...], keys [S]) -> [S]`` mean first-episode return, jitted (one
    entry per ``act`` function, so per algorithm)."""
    env = envs.make(env_id, num_envs)

    def one_seed(state, key):
        k_reset, k_run = jax.random.split(key)
        env_state = env.reset(jax.random.split(k_reset, num_envs))
        # Step t acts with k_act and steps the envs with split(k_env, num_envs), where
        # (k_act, k_env) = split(split(k_run, max_steps)[t]); the env keys are drawn
        # before the scan (`env_steps`), the same keys either way.
        k_act, k_env = jnp.moveaxis(
            jax.vmap(jax.random.split)(jax.random.split(k_run, max_steps)), 1, 0)
        xs, env_step = rollouts.env_steps(
            env, jax.vmap(lambda k: jax.random.split(k, num_envs))(k_env))

        def step(carry, inputs):
            env_state, total, alive = carry
            x, k = inputs
            action = act(state, env_state.obs, k)
            env_state, ts = env_step(x, env_state, action)
            return (env_state, total + ts.reward * alive, alive & ~ts.done), None

        init = (env_state, jnp.zeros(num_envs), jnp.ones(num_envs, bool))
        (_, total, alive), _ = jax.lax.scan(step, init, (xs, k_act))
        return jnp.mean(total), jnp.any(alive)

    return jax.jit(jax.vmap(one_seed))


def lane_keys(seed: int, lanes: int) -> jax.Array:
    """``[lanes]`` evaluation keys, ``fold_in(key(seed), s)`` for lane ``s``: every seed of a
    run gets its own start states, and a lane's start states do not depend on how many
    lanes are evaluated with it."""
    base = jax.random.key(seed)
    return jax.vmap(lambda s: jax.random.fold_in(base, s))(jnp.arange(lanes))


@float32
def greedy_returns(algo: Algorithm, states, *, num_envs: int = 8, max_steps: int | None = None,
                   seed: int = 0) -> np.ndarray:
    """Mean return of one greedy episode in each of ``num_envs`` envs, per seed.

    Args:
      algo: the algorithm the states belong to (its ``act`` and ``config.env``).
      states: training states with a leading seed axis ``[S, ...]``, as in
        ``TrainResult.state`` (for one unbatched state, add the axis:
        ``jax.tree.map(lambda x: x[None], state)``; for a sharded run, pass
        ``jaxrl_par.parallel.unreplicate(result.state)``).
      num_envs: episodes per seed, one per env, each from its own start state; seed
        ``s`` resets from ``fold_in(key(seed), s)`` (:func:`lane_keys`), so seeds do not
        share start states.
      max_steps: steps played; defaults to the env's episode limit
        (``max_steps_in_episode``), so that every episode ends.
      seed: the evaluation's random stream (env resets, and ``act``'s key).

    Returns:
      float64 ``[S]``: the mean over the envs of each env's first-episode return.

    Raises:
      ValueError: ``algo`` has no ``act``, the states have no seed axis, or an episode
        was still running after ``max_steps`` (its return would be cut short; give a
        larger ``max_steps``).
    """
    if algo.act is None:
        raise ValueError("this algorithm defines no act(state, obs, key) to evaluate with")
    env_id = algo.config.env
    if host.is_host(env_id):
        return _host_greedy_returns(algo, states, num_envs, max_steps, seed)
    if max_steps is None:
        max_steps = getattr(envs.make(env_id, 1).params, "max_steps_in_episode", None)
        if max_steps is None:
            raise ValueError(f"{env_id} has no max_steps_in_episode: give max_steps")
    leaves = jax.tree.leaves(states)
    if not leaves or any(np.ndim(x) == 0 for x in leaves):
        raise ValueError("states need a leading seed axis [S, ...] (TrainResult.state); for "
                         "one state use jax.tree.map(lambda x: x[None], state)")
    run = _evaluator(algo.act, env_id, int(num_envs), int(max_steps))
    returns, unfinished = run(states, lane_keys(seed, len(leaves[0])))
    interrupt.raise_pending()  # a Ctrl-C or SIGTERM during the compile, if Python lost it
    if np.any(np.asarray(unfinished)):
        raise ValueError(f"an episode of {env_id} was still running after max_steps="
                         f"{max_steps}; give a larger max_steps")
    return np.asarray(returns, np.float64)


def _host_greedy_returns(algo: Algorithm, states, num_envs: int, max_steps: int | None,
                         seed: int) -> np.ndarray:
    """:func:`greedy_returns` on host envs (:mod:`jaxrl_par.envs.host`): ``num_envs``
    gymnasium envs per seed, lane ``s`` reset from ``seed + s * num_envs`` onwards (one
    gymnasium seed per env, none shared between lanes), played on the
    host with one compiled ``act`` call per step for all seeds, until every env's first
    episode ends (gymnasium's own time limit ends it; ``max_steps``, default 100,000, is
    a guard)."""
    max_steps = 100_000 if max_steps is None else int(max_steps)
    lanes = len(jax.tree.leaves(states)[0])
    act = jax.jit(jax.vmap(algo.act, in_axes=(0, 0, None)))
    envs_ = [host.HostVecEnv(algo.config.env, int(num_envs), seed + s * int(num_envs))
             for s in range(lanes)]
    returns = np.zeros((lanes, num_envs))
    finished = np.zeros((lanes, num_envs), bool)
    key = jax.random.key(seed)
    for _ in range(max_steps):
        key, k = jax.random.split(key)
        actions = np.asarray(act(states, np.stack([e.obs for e in envs_]), k))
        for s, e in enumerate(envs_):
            out = e.step(actions[s])
            first = out["done"] & ~finished[s]
            returns[s][first] = out["episode_return"][first]
            finished[s] |= out["done"]
        if finished.all():
            break
    for e in envs_:
        e.close()
    if not finished.all():
        raise ValueError(f"an episode of {algo.config.env} was still running after "
                         f"max_steps={max_steps}; give a larger max_steps")
    return returns.mean(axis=1)


class Spread(NamedTuple):
    """Mean and spread of one figure over seeds.

    Attributes:
      mean: the mean over seeds.
      std: their standard deviation (population form, ``np.std``).
      ci95: ``(low, high)``, the 95% confidence interval of the mean (Student's t with
        ``S - 1`` degrees of freedom on the standard error ``std(ddof=1) / sqrt(S)``);
        None for fewer than two seeds.
      count: ``S``, the seeds that have the figure (NaN entries are left out).
    """

    mean: float | None
    std: float | None
    ci95: tuple[float, float] | None
    count: int


def spread(values) -> Spread:
    """:class:`Spread` of ``values`` ``[S]`` (one figure per seed; NaNs, seeds without the
    figure, are left out; an empty set gives None fields). For example ``[1, 2, 3]``:
    mean 2, ``ci95`` = 2 -+ t(0.975, 2) * 1 / sqrt(3) = 2 -+ 2.4841."""
    from scipy import stats

    x = np.asarray(values, np.float64).ravel()
    x = x[~np.isnan(x)]
    if x.size == 0:
        return Spread(None, None, None, 0)
    mean, std = float(np.mean(x)), float(np.std(x))
    ci95 = None
    if x.size > 1:
        half = float(stats.t.ppf(0.975, x.size - 1) * np.std(x, ddof=1) / np.sqrt(x.size))
        ci95 = (mean - half, mean + half)
    return Spread(mean, std, ci95, int(x.size))


__all__ = ["Spread", "greedy_returns", "lane_keys", "spread"]
