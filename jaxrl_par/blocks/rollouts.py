"""Acting with a stochastic policy in vectorised environments: the rollout that PPO's
synchronous actors and IMPALA's lagged actors share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par import axes, envs
from jaxrl_par.envs import host
from jaxrl_par.networks import ActorCritic, action_noise

ROLLOUT_UNROLL = 1  # env steps per rollout-loop iteration (unrolling costs compile time)


def zero_bootstrap(terminated: jax.Array, truncated: jax.Array,
                   bootstrap_truncation: bool = True) -> jax.Array:
    """Bool, the shape of ``terminated``: the steps whose value target takes no bootstrap,
    the ``terminated`` argument of :func:`~jaxrl_par.losses.returns.gae_advantages` and
    ``vtrace_targets``, from a rollout's ``terminated`` and ``truncated`` flags.

    Terminations always; with ``bootstrap_truncation=False`` also the steps a time limit
    cut, which then count as terminal, as in gymnax-blines', PureJaxRL's and CleanRL's
    PPO. Bootstrapping them is the correct target (Pardo et al. 2018, arXiv:1712.00378);
    the biased one can still explore better on a sparse-reward task (the MountainCar-v0
    preset uses it).
    """
    if bootstrap_truncation:
        return terminated
    return terminated | truncated


def env_action(env: envs.VecEnv, action: jax.Array) -> jax.Array:
    """What the env is stepped with: continuous actions clipped to the action space; the
    policy's own action is what is learned from (and discrete actions pass as they are)."""
    if env.discrete:
        return action
    low, high = env.action_bounds
    return jnp.clip(action, low, high)


def policy_rollout(
    env: envs.VecEnv,
    actor: Callable[[jax.Array], object],
    env_state: envs.EnvState,
    key: jax.Array,
    num_envs: int,
    num_steps: int,
    axis_name: str | None = None,
    prepare: Callable[[jax.Array], jax.Array] | None = None,
):
    """Acts ``num_steps`` times in every env with ``dist = actor(obs)``.

    Args:
      env: this shard's envs (``num_envs / axis_size`` of them).
      actor: ``obs [N_local, ...] -> dist`` with ``sample_with_noise`` and ``log_prob``
        (:class:`~jaxrl_par.networks.Categorical` or ``DiagGaussian``).
      env_state: their state, leaves ``[N_local, ...]``.
      key: one key for the whole global batch. The rollout's action noise ``[T, N, A]``
        is drawn at once from it, and the per-env env keys ``[T, N]`` from one batched
        split (with the resets they start, by :func:`env_steps`), each sliced per shard
        (:func:`jaxrl_par.axes.shard_draw`), so that a shard acts exactly as its envs
        would on one device.
      num_envs: the global number of envs. num_steps: ``T``.
      axis_name: the data axis, or None on one device.
      prepare: applied to each observation before the actor sees it (normalisation);
        the prepared observation is what is recorded.

    Returns:
      ``(env_state, (obs, action, log_prob, timestep))``, the records time-major
      ``[T, N_local, ...]``: the observations acted on, the policy's actions (before
      :func:`env_action`), their log-probabilities under the acting policy, and the
      env's :class:`~jaxrl_par.envs.Timestep` of each step.
    """
    k_act, k_env = jax.random.split(key)
    noise = axes.shard_draw(
        lambda k, shape: action_noise(k, shape + (env.num_actions,), env.discrete),
        k_act, num_envs, axis_name, steps=num_steps)
    env_xs, env_step = env_steps(env, axes.shard_keys(k_env, num_envs, axis_name,
                                                      steps=num_steps))

    def step(env_state, xs):
        step_noise, env_x = xs
        obs = env_state.obs if prepare is None else prepare(env_state.obs)
        dist = actor(obs)
        action = dist.sample_with_noise(step_noise)
        log_prob = dist.log_prob(action)
        env_state, ts = env_step(env_x, env_state, env_action(env, action))
        return env_state, (obs, action, log_prob, ts)

    return jax.lax.scan(step, env_state, (noise, env_xs), unroll=ROLLOUT_UNROLL)


#: The most bytes :func:`draw_ahead` holds for one rollout's draws (keys, reset
#: observations and states for ``[T, N]`` steps; a program that vmaps seeds or sweep
#: lanes holds that many times as much). Beyond it (a large env state, such as a physics
#: simulator's, times many steps and envs) each step draws its own. About as much as the
#: rollout's own records for small states: 22 MiB for 4,096 CartPole envs over 128 steps,
#: 26 MiB for 256 Breakout-MinAtar envs.
DRAW_AHEAD_BYTES = 32 * 2**20


def draw_ahead(env: envs.VecEnv, keys: jax.Array) -> envs.StepDraws | None:
    """The randomness of a rollout's steps, ``env.draw_steps(keys)`` for keys ``[T, N]``,
    drawn before the rollout starts (one batched draw instead of one per step), or None
    when that would hold more than :data:`DRAW_AHEAD_BYTES`."""
    shapes = jax.eval_shape(env.draw_steps, keys)
    size = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))
    return env.draw_steps(keys) if size <= DRAW_AHEAD_BYTES else None


def env_steps(env: envs.VecEnv, keys: jax.Array) -> tuple[Any, Callable]:
    """``(xs, step)`` for a scan over ``T`` steps of ``env`` with keys ``[T, N]``: ``xs``
    the per-step inputs (:func:`draw_ahead`'s draws, or the keys where it declines) and
    ``step(x, env_state, action) -> (env_state, timestep)`` taking one step's slice
    ``x``. Either way a step gives what ``env.step`` gives with that step's keys."""
    draws = draw_ahead(env, keys)
    if draws is None:
        return keys, env.step
    return draws, env.step_drawn


def host_policy(network, spec) -> Callable:
    """``act(params, obs [N, ...], key) -> (action, log_prob, env_action, key)``: one step
    of a stochastic actor-critic policy for host envs (:mod:`jaxrl_par.envs.host`), the
    action sampled as :func:`policy_rollout` samples it; vmap and jit it over seed lanes."""
    def act(params, obs, key):
        key, k_noise = jax.random.split(key)
        dist = network.apply(params, obs, method=ActorCritic.actor)
        action = dist.sample_with_noise(
            action_noise(k_noise, (obs.shape[0], spec.num_actions), spec.discrete))
        return action, dist.log_prob(action), env_action(spec, action), key

    return act


def host_policy_rollout(lanes: list, act_lanes: Callable, params, key, num_steps: int,
                        bootstrap_truncation: bool = True):
    """``num_steps`` steps of every host env of every seed lane (``lanes``: ``[S]``
    :class:`~jaxrl_par.envs.host.HostVecEnv`), each action from one call of
    ``act_lanes`` (:func:`host_policy`, vmapped over lanes) for all lanes.

    Returns ``(key, records, episode_metrics)``: ``records`` holds ``obs``, ``action``,
    ``log_prob``, ``reward``, ``terminated``, ``truncated`` and ``final_obs`` as arrays
    ``[S, T, N, ...]`` (the fields of an unroll), and the metrics those of
    :func:`jaxrl_par.envs.episode_metrics`, ``[S]`` each. ``terminated`` is
    :func:`zero_bootstrap`'s: with ``bootstrap_truncation=False`` it holds the time
    limits too.
    """
    rows = {name: [] for name in ("obs", "action", "log_prob", "reward", "terminated",
                                  "truncated", "final_obs")}
    episodes = host.EpisodeTotals(len(lanes))
    for _ in range(num_steps):
        obs = np.stack([lane.obs for lane in lanes])  # [S, N, ...]
        action, log_prob, to_env, key = act_lanes(params, obs, key)
        to_env = np.asarray(to_env)
        steps = [lane.step(to_env[s]) for s, lane in enumerate(lanes)]
        episodes.add(steps)
        rows["obs"].append(obs)
        rows["action"].append(action)
        rows["log_prob"].append(log_prob)
        for name in ("reward", "terminated", "truncated", "final_obs"):
            rows[name].append(np.stack([st[name] for st in steps]))
    records = {k: jnp.stack([jnp.asarray(x) for x in v], axis=1) for k, v in rows.items()}
    records["terminated"] = zero_bootstrap(records["terminated"], records["truncated"],
                                           bootstrap_truncation)
    return key, records, episodes.metrics()
