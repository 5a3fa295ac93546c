"""What DQN and Ape-X share above the building blocks: epsilon-greedy acting of a vector
of envs for ``T`` steps and turning those steps into stored n-step transitions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp

from jaxrl_par import envs
from jaxrl_par.algos.config import algorithm_name
from jaxrl_par.blocks.exploration import epsilon_greedy_from_draws, exploration_draws
from jaxrl_par.losses.qlearning import LOSSES, NStepCarry, QFn, Transition, nstep_with_carry
from jaxrl_par.networks import ACTIVATIONS


def check_q_config(cfg, lanes: str) -> None:
    """The checks DQN's and Ape-X's configs share, each a ``ValueError`` naming the fix:
    a known env id, an int ``n_step``, a known ``loss`` and ``activation``, at least one
    update in ``total_timesteps`` and ``batch_size <= buffer_size``. ``lanes`` names the
    fields whose product is ``cfg.env_steps_per_update`` (for the message)."""
    name = algorithm_name(cfg) + ".Config"
    envs.check_env_id(cfg.env)
    if not isinstance(cfg.n_step, int):
        raise ValueError(f"{name}.n_step must be an int, got {cfg.n_step!r}")  # noqa: TRY004
    if cfg.loss not in LOSSES:
        raise ValueError(f"{name}.loss={cfg.loss!r}; choose from {LOSSES}")
    if cfg.activation not in ACTIVATIONS:
        raise ValueError(f"{name}.activation={cfg.activation!r}; "
                         f"choose from {sorted(ACTIVATIONS)}")
    if cfg.num_updates < 1:
        raise ValueError(f"{name}.total_timesteps={cfg.total_timesteps} is less than one "
                         f"update of {lanes}={cfg.env_steps_per_update}")
    if cfg.batch_size > cfg.buffer_size:
        raise ValueError(f"{name}.batch_size={cfg.batch_size} exceeds buffer_size="
                         f"{cfg.buffer_size}; raise buffer_size")


def act_steps(
    env: envs.VecEnv,
    q_fn: QFn,
    params: Any,
    env_state: envs.EnvState,
    key: jax.Array,
    epsilon: jax.Array,
    num_steps: int,
    step_keys: Callable[[jax.Array], jax.Array],
) -> tuple[envs.EnvState, NStepCarry, envs.Timestep]:
    """Acts ``num_steps`` epsilon-greedy steps in every env with ``params``, with the
    randomness of all ``T`` steps drawn before the scan.

    The env keys, exploration coins and random actions of every (step, env) come from
    three batched draws, not from a few small draws per step (on one CPU core this
    halves the cost of acting). Each env's numbers depend only on its global index, so
    a sharded batch still acts exactly as on one device.

    Args:
      env: the local :class:`VecEnv` of ``N`` envs.
      q_fn: ``q_fn(params, obs [N, ...]) -> [N, A]``.
      epsilon: ``[]`` or ``[N]`` exploration rates.
      step_keys: ``key -> [T, N]`` keys of this shard's envs for ``T`` steps, e.g.
        ``lambda k: axes.shard_keys(k, num_envs, axis_name, steps=T)``.

    Returns:
      ``(env_state, steps, timesteps)``: the steps as an :class:`NStepCarry` and the
      :class:`Timestep` records, leaves ``[T, N, ...]``.
    """
    k_act, k_env = jax.random.split(key)
    env_keys = step_keys(k_env)
    chex.assert_shape(env_keys, (num_steps, env.num_envs) + env_keys.shape[2:])
    uniforms, random_actions = exploration_draws(step_keys(k_act), env.num_actions)

    def step(env_state, xs):
        """Carry: env state. Output: the step record and the timestep."""
        keys, u, random_action = xs
        obs = env_state.obs
        action = epsilon_greedy_from_draws(q_fn(params, obs), u, random_action, epsilon)
        env_state, ts = env.step(keys, env_state, action)
        record = NStepCarry(obs, action, ts.reward, ts.terminated, ts.truncated, ts.obs,
                            ts.final_obs, jnp.ones_like(ts.terminated))
        return env_state, (record, ts)

    env_state, (steps, timesteps) = jax.lax.scan(step, env_state,
                                                 (env_keys, uniforms, random_actions))
    return env_state, steps, timesteps


def to_transitions(carry: NStepCarry, steps: NStepCarry, gamma: float, n: int,
                   insert_step: jax.Array) -> tuple[NStepCarry, Transition]:
    """n-step transitions of ``T`` new steps (see :func:`nstep_with_carry`), flattened.

    Returns:
      ``(carry, transitions)`` with transition leaves ``[T * N, ...]``.
    """
    carry, (w, valid) = nstep_with_carry(carry, steps, gamma, n)
    t, n_envs = w.reward.shape
    flat = lambda x: x.reshape((t * n_envs,) + x.shape[2:])
    transitions = Transition(
        obs=flat(w.obs_tm1),
        action=flat(w.action).astype(jnp.int32),
        reward=flat(w.reward),
        discount=flat(w.discount),
        next_obs=flat(w.next_obs),
        mask=flat(valid).astype(jnp.float32),
        insert_step=jnp.full((t * n_envs,), insert_step, jnp.int32),
    )
    return carry, transitions


def example_transition(obs_shape: tuple[int, ...], obs_dtype=jnp.float32) -> Transition:
    """A zero :class:`Transition` (no batch axis) to shape a replay buffer; observations
    are stored in the env's ``obs_dtype`` (uint8 MinAtar grids: a quarter of float32)."""
    obs = jnp.zeros(obs_shape, obs_dtype)
    f = jnp.float32(0)
    return Transition(obs, jnp.int32(0), f, f, obs, f, jnp.int32(0))
