"""What DQN, Ape-X and Gorila share above the building blocks: the Q-network of an env
(:func:`make_q_network`), its optimiser (:func:`optimizer`) and greedy acting
(:func:`greedy`), the stored n-step :class:`Transition`, the batched TD errors and
importance-weighted loss of a Q-network (:func:`batch_td_error`, :func:`q_loss`, over
the unbatched maths of :mod:`jaxrl_par.losses.qlearning`), epsilon-greedy acting of a
vector of envs for ``T`` steps, and turning those steps into stored n-step transitions,
with the last ``n - 1`` steps of each env carried between updates (:class:`NStepCarry`)
so that every window is a full n-step window even when an update acts for fewer than
``n`` steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax

from jaxrl_par import algos, envs
from jaxrl_par.algos.base import clipped_adam
from jaxrl_par.algos.config import algorithm_name
from jaxrl_par.blocks.exploration import epsilon_greedy_from_draws, exploration_draws
from jaxrl_par.blocks.rollouts import env_steps
from jaxrl_par.losses.qlearning import LOSSES, double_q_learning, q_learning, td_loss
from jaxrl_par.networks import ACTIVATIONS, QNetwork
from jaxrl_par.replay import nstep_transitions


class Transition(NamedTuple):
    """One stored n-step transition (no batch axis in the buffer's example).

    Attributes:
      obs: ``[*obs_shape]`` observation acted in (s_tm1), in the env's dtype.
      action: int32 ``[]`` action taken (a_tm1).
      reward: float32 ``[]`` discounted reward sum over the window.
      discount: float32 ``[]`` ``gamma ** n'``, 0 if the episode terminated in the window.
      next_obs: ``[*obs_shape]`` observation to bootstrap from (``final_obs`` after
        a truncation).
      mask: float32 ``[]`` 1 for a real window, 0 for one that starts in the zero padding
        of the first update (never learned from: weight 0, priority 0).
      insert_step: int32 ``[]`` env steps (all envs) taken when the transition was stored,
        so the learner can report the age (staleness) of what it samples.
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    discount: jax.Array
    next_obs: jax.Array
    mask: jax.Array
    insert_step: jax.Array


QFn = Callable[[Any, jax.Array], jax.Array]  # (params, obs [B, ...]) -> q [B, A]


# -- the network, its optimiser and greedy acting -------------------------------------
def make_q_network(env_spec: envs.VecEnv, hidden_sizes, activation, dueling) -> QNetwork:
    """The Q-network for an env: MLP for flat observations, MinAtar CNN for images."""
    if not env_spec.discrete:
        q_learners = ", ".join(sorted(set(algos.for_actions(True)) - set(algos.for_actions(False))))
        continuous = algos.for_actions(False)
        example = "ppo" if "ppo" in continuous else continuous[0]
        raise ValueError(f"{env_spec.env_id} has continuous actions; Q-learning ({q_learners}) "
                         f"needs a discrete action space: train {', '.join(continuous[:-1])} or "
                         f"{continuous[-1]} for "
                         f"continuous control (jaxrl-par train {example} --env "
                         f"{env_spec.env_id})")
    return QNetwork(num_actions=env_spec.num_actions, obs_shape=env_spec.observation_shape,
                    hidden_sizes=tuple(hidden_sizes), activation=activation, dueling=dueling)


def optimizer(hp) -> optax.GradientTransformation:
    """Adam after global-norm clipping (:func:`~jaxrl_par.algos.base.clipped_adam`) for
    the values ``hp`` (the config, or :func:`jaxrl_par.algos.hyper.view` of a lane)."""
    return clipped_adam(hp.learning_rate, hp.max_grad_norm)


def greedy(q_fn: QFn, state: Any, obs: jax.Array, key: jax.Array) -> jax.Array:
    """int32 ``[N]``: the argmax of ``q_fn(state.params, obs [N, ...])``, an
    ``Algorithm.act`` (``key`` is unused: greedy acting draws nothing)."""
    del key
    return jnp.argmax(q_fn(state.params, obs), axis=-1).astype(jnp.int32)


# -- batched TD errors and loss ------------------------------------------------------
def batch_td_error(q_fn: QFn, params: Any, target_params: Any, batch: Transition,
                   double: bool = True) -> tuple[jax.Array, jax.Array]:
    """TD errors of a batch of transitions.

    Args:
      q_fn: ``q_fn(params, obs [B, ...]) -> [B, A]``.
      params: online parameters (differentiated through ``q_tm1`` only).
      target_params: target-network parameters.
      batch: a :class:`Transition` with leaves ``[B, ...]``.
      double: double Q-learning (online network selects the bootstrap action).

    Returns:
      ``(td_error [B], q_tm1 [B, A])``.
    """
    # Separate passes over s_tm1 and s_t: one pass over both concatenated would make the
    # backward pass run over 2B rows, half of them with zero cotangents.
    q_tm1 = q_fn(params, batch.obs)
    if double:
        q_selector = q_fn(jax.lax.stop_gradient(params), batch.next_obs)
    q_t = jax.lax.stop_gradient(q_fn(target_params, batch.next_obs))
    action = batch.action.astype(jnp.int32)
    if double:
        td = jax.vmap(double_q_learning)(q_tm1, action, batch.reward, batch.discount, q_t,
                                         q_selector)
    else:
        td = jax.vmap(q_learning)(q_tm1, action, batch.reward, batch.discount, q_t)
    return td, q_tm1


def q_loss(params: Any, target_params: Any, q_fn: QFn, batch: Transition,
           importance_weights: jax.Array, double: bool = True, kind: str = "huber",
           delta: float = 1.0) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Importance-weighted TD loss, ``mean(w * mask * loss(td_error))``.

    Args:
      importance_weights: float32 ``[B]`` (ones for uniform replay).

    Returns:
      ``(loss [], aux)`` with ``td_error [B]`` and ``q_mean []`` in ``aux``.
    """
    td, q_tm1 = batch_td_error(q_fn, params, target_params, batch, double)
    chex.assert_equal_shape([td, importance_weights])
    w = importance_weights * batch.mask
    loss = jnp.mean(w * td_loss(td, kind, delta))
    return loss, {"td_error": td, "q_mean": jnp.mean(q_tm1)}


# -- n-step windows across updates -------------------------------------------------------
class NStepCarry(NamedTuple):
    """The last ``n - 1`` steps of every env, time-major ``[n - 1, N, ...]``.

    ``valid`` is False for the zero padding before the first real step.
    """

    obs_tm1: jax.Array  # [n-1, N, *obs_shape]
    action: jax.Array  # [n-1, N] int32
    reward: jax.Array  # [n-1, N] float32
    terminated: jax.Array  # [n-1, N] bool
    truncated: jax.Array  # [n-1, N] bool
    obs_t: jax.Array  # [n-1, N, *obs_shape]: after the step (after auto-reset)
    final_obs: jax.Array  # [n-1, N, *obs_shape]: reached by the step (before reset)
    valid: jax.Array  # [n-1, N] bool


def init_nstep_carry(n: int, num_envs: int, obs_shape: tuple[int, ...],
                     obs_dtype=jnp.float32) -> NStepCarry:
    """Zero padding (``valid`` False) for ``n - 1`` steps of ``num_envs`` envs whose
    observations have ``obs_shape`` and ``obs_dtype``."""
    k = n - 1
    obs = jnp.zeros((k, num_envs) + tuple(obs_shape), obs_dtype)
    zeros_b = jnp.zeros((k, num_envs), bool)
    return NStepCarry(obs, jnp.zeros((k, num_envs), jnp.int32),
                      jnp.zeros((k, num_envs), jnp.float32), zeros_b, zeros_b, obs, obs, zeros_b)


def nstep_with_carry(carry: NStepCarry, steps: NStepCarry, gamma: float | jax.Array,
                     n: int) -> tuple[NStepCarry, Any]:
    """Full n-step windows from ``T`` new steps and the ``n - 1`` carried ones.

    Windows start at the carried steps and the first ``T - n + 1`` new ones, so every
    window spans ``n`` real steps (or ends earlier at an episode end): none is cut at the
    update boundary. The last ``n - 1`` steps become the next carry.

    Args:
      carry: :class:`NStepCarry` ``[n - 1, N, ...]``.
      steps: the new rollout as an :class:`NStepCarry` ``[T, N, ...]`` (``valid`` True).
      gamma: discount. n: static window length.

    Returns:
      ``(carry, (windows, valid))``: :class:`jaxrl_par.replay.NStepTransitions`
      ``[T, N, ...]`` and bool ``[T, N]`` (False where a window starts in the padding).
    """
    full = jax.tree.map(lambda c, s: jnp.concatenate([c, s], axis=0), carry, steps)
    t = steps.reward.shape[0]
    windows = nstep_transitions(full.obs_tm1, full.action, full.reward, full.terminated,
                                full.truncated, full.obs_t, full.final_obs, gamma, n)
    windows = jax.tree.map(lambda x: x[:t], windows)
    new_carry = jax.tree.map(lambda x: x[t:], full)
    return new_carry, (windows, full.valid[:t])


# -- config checks, acting and storing -------------------------------------------------


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
    three batched draws, not from a few small draws per step: a few large kernels
    instead of many small ones inside the scan. Each env's numbers depend only on its
    global index, so a sharded batch still acts exactly as on one device.

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

    env_xs, env_step = env_steps(env, env_keys)

    def step(env_state, xs):
        """Carry: env state. Output: the step record and the timestep."""
        env_x, u, random_action = xs
        obs = env_state.obs
        action = epsilon_greedy_from_draws(q_fn(params, obs), u, random_action, epsilon)
        env_state, ts = env_step(env_x, env_state, action)
        record = NStepCarry(obs, action, ts.reward, ts.terminated, ts.truncated, ts.obs,
                            ts.final_obs, jnp.ones_like(ts.terminated))
        return env_state, (record, ts)

    env_state, (steps, timesteps) = jax.lax.scan(step, env_state,
                                                 (env_xs, uniforms, random_actions))
    return env_state, steps, timesteps


def to_transitions(carry: NStepCarry, steps: NStepCarry, gamma: float, n: int,
                   insert_step: jax.Array) -> tuple[NStepCarry, Transition]:
    """n-step transitions of ``T`` new steps (see :func:`nstep_with_carry`), flattened.

    Returns:
      ``(carry, transitions)`` with transition leaves ``[T * N, ...]``.
    """
    carry, (w, valid) = nstep_with_carry(carry, steps, gamma, n)
    t, n_envs = w.reward.shape

    def flat(x):
        return x.reshape((t * n_envs,) + x.shape[2:])

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
