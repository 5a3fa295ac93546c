"""Environments stepped on the host: gymnasium, for simulators that are not JAX.

An id ``"gymnasium:<id>"`` (e.g. ``"gymnasium:CartPole-v1"``, or any id registered with
``gymnasium.register``) names ``num_envs`` copies of ``gymnasium.make(<id>)`` that
:class:`HostVecEnv` steps in a Python loop, with the semantics of the JAX envs
(:class:`jaxrl_par.envs.VecEnv`): auto-reset, ``terminated`` and ``truncated`` apart,
the observation an episode ended on kept as ``final_obs`` (the bootstrap of a truncated
episode), and each finished episode's return and length. They cannot run inside a
compiled program, so only runtimes that act from Python take them: A3C's and Gorila's
threaded workers (``a3c.Config(env="gymnasium:CartPole-v1")`` with
``train(..., async_workers=True)``), where each worker steps its own envs in its thread
between the compiled policy and gradient calls, and IMPALA's actors in the actor-learner
runtime (``train(..., actor_learner=True)``), stepped while the learner's program runs.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from jaxrl_par.envs import envpool_envs, episodes, grouped

PREFIX = "gymnasium:"


def is_host(env_id: str) -> bool:
    """Whether ``env_id`` names host envs (``"gymnasium:..."`` or ``"envpool:..."``)."""
    return isinstance(env_id, str) and (env_id.startswith(PREFIX)
                                        or envpool_envs.is_envpool(env_id))


def _gymnasium():
    try:
        import gymnasium
    except ImportError as e:  # pragma: no cover - gymnax depends on gymnasium
        raise ImportError("host envs need gymnasium: pip install gymnasium") from e
    return gymnasium


def check_env_id(env_id: str) -> None:
    """``ValueError`` naming close ids unless gymnasium knows ``env_id``'s id."""
    import difflib

    if envpool_envs.is_envpool(env_id):
        envpool_envs.check_env_id(env_id)
        return
    gym = _gymnasium()
    name = env_id[len(PREFIX):]
    if name in gym.registry:
        return
    close = difflib.get_close_matches(name, list(gym.registry), n=5, cutoff=0.5)
    raise ValueError(f"unknown gymnasium environment {name!r} in {env_id!r}; closest "
                     f"gymnasium ids: {', '.join(close) or 'none close'}")


@dataclasses.dataclass(frozen=True)
class HostSpec:
    """What networks and action clipping need to know of a host env (the attributes of
    :class:`jaxrl_par.envs.VecEnv` they read)."""

    env_id: str
    observation_shape: tuple[int, ...]
    observation_dtype: Any
    discrete: bool
    num_actions: int
    action_bounds: tuple[np.ndarray, np.ndarray] | None

    @property
    def action_shape(self) -> tuple[int, ...]:
        return () if self.discrete else (self.num_actions,)


def spec(env_id: str) -> HostSpec:
    """The :class:`HostSpec` of ``"gymnasium:<id>"`` (or ``"envpool:<id>"``), from one
    env's spaces: a Box of observations, Discrete or 1-d Box actions."""
    check_env_id(env_id)
    gym = _gymnasium()
    if envpool_envs.is_envpool(env_id):
        env = envpool_envs.make_pool(env_id, 1, 0)
    else:
        env = gym.make(env_id[len(PREFIX):])
    try:
        obs_space, act_space = env.observation_space, env.action_space
    finally:
        env.close()
    if not isinstance(obs_space, gym.spaces.Box):
        raise ValueError(  # noqa: TRY004 (a config error, as every other)
            f"{env_id}: observations must be a Box (an array), got {obs_space}")
    if isinstance(act_space, gym.spaces.Discrete):
        return HostSpec(env_id, tuple(obs_space.shape), np.dtype(np.float32), True,
                        int(act_space.n), None)
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        bounds = (act_space.low.astype(np.float32), act_space.high.astype(np.float32))
        return HostSpec(env_id, tuple(obs_space.shape), np.dtype(np.float32), False,
                        int(act_space.shape[0]), bounds)
    raise ValueError(f"{env_id}: actions must be Discrete or a 1-d Box, got {act_space}")


#: How a vector of gymnasium envs steps: ``"async"`` gymnasium's ``AsyncVectorEnv`` (a
#: subprocess per env), ``"grouped"`` a subprocess per core each stepping a group of envs
#: (:mod:`jaxrl_par.envs.grouped`), ``"sync"`` gymnasium's ``SyncVectorEnv`` (in this
#: process).
VECTOR_ENVS = ("async", "grouped", "sync")


def check_vector_env(vector_env: str) -> None:
    """``ValueError`` unless ``vector_env`` is one of :data:`VECTOR_ENVS`."""
    if vector_env not in VECTOR_ENVS:
        raise ValueError(f"vector_env={vector_env!r}; choose from {VECTOR_ENVS} (async: "
                         "each env in a subprocess, grouped: a subprocess per core, each "
                         "stepping a group of envs, sync: all in this process)")


def _make_in_subprocess(name: str):
    """``gymnasium.make(name)`` in an ``AsyncVectorEnv`` worker, which first drops the
    signal handlers it inherited from the trainer (:func:`grouped.drop_trainer_signals`)."""
    grouped.drop_trainer_signals()
    return _gymnasium().make(name)


class HostVecEnv:
    """``num_envs`` gymnasium envs as one gymnasium vector env, auto-resetting.

    ``vector_env="async"`` is gymnasium's ``AsyncVectorEnv``: each env in a subprocess,
    observations through shared memory (the SubprocVecEnv paradigm), so the envs step at
    once and :meth:`step_async` returns while they do; ``"sync"`` is its
    ``SyncVectorEnv``, stepping them one after another in this process; ``"grouped"``
    is :class:`~jaxrl_par.envs.grouped.GroupedVecEnv`: a subprocess per core, each
    stepping a group of the envs one after another (fewer processes and round trips than
    envs). All three run with
    gymnasium 1.x's ``AutoresetMode.SAME_STEP``: the step that ends an episode returns
    the next episode's first observation, and the observation it reached in
    ``info["final_obs"]`` (the default ``NEXT_STEP`` mode would spend one step per
    episode on the reset). Each step then has the semantics of the JAX envs
    (:class:`jaxrl_par.envs.VecEnv`): ``terminated`` and ``truncated`` apart, ``final_obs``
    the bootstrap of a truncated episode, each finished episode's return and length.

    Args:
      env_id: ``"gymnasium:<id>"``.
      num_envs: copies; env ``i`` is first reset with seed ``seed + i``.
      vector_env: ``"async"``, ``"grouped"`` or ``"sync"`` (:data:`VECTOR_ENVS`).
    """

    def __init__(self, env_id: str, num_envs: int, seed: int, vector_env: str = "sync"):
        check_vector_env(vector_env)
        self.spec = spec(env_id)
        gym = _gymnasium()
        name, mode = env_id[len(PREFIX):], gym.vector.AutoresetMode.SAME_STEP
        if vector_env == "async":
            makers = [functools.partial(_make_in_subprocess, name)] * num_envs
            self.vector = gym.vector.AsyncVectorEnv(makers, autoreset_mode=mode)
        elif vector_env == "grouped":
            self.vector = grouped.GroupedVecEnv(name, num_envs)
        else:
            makers = [functools.partial(gym.make, name)] * num_envs
            self.vector = gym.vector.SyncVectorEnv(makers, autoreset_mode=mode)
        obs, _ = self.vector.reset(seed=seed)
        self.obs = np.asarray(obs, np.float32)
        self.episode_return = np.zeros(num_envs, np.float32)
        self.episode_length = np.zeros(num_envs, np.int32)
        self._actions = None

    @property
    def num_envs(self) -> int:
        return self.vector.num_envs

    def step_async(self, actions: np.ndarray) -> None:
        """Starts stepping every env with its action (``[N]`` ints or ``[N, D]``)."""
        actions = np.asarray(actions)
        actions = actions.astype(np.int64) if self.spec.discrete else actions
        if isinstance(self.vector, (_gymnasium().vector.AsyncVectorEnv,
                                    grouped.GroupedVecEnv)):
            self.vector.step_async(actions)
        else:
            self._actions = actions

    def step_wait(self) -> dict[str, np.ndarray]:
        """Waits for the step :meth:`step_async` started; returns what :meth:`step` does."""
        if self._actions is None:
            obs, reward, terminated, truncated, info = self.vector.step_wait()
        else:
            actions, self._actions = self._actions, None
            obs, reward, terminated, truncated, info = self.vector.step(actions)
        obs = np.asarray(obs, np.float32)
        final_obs = obs.copy()
        ended = info.get("_final_obs")
        if ended is not None and ended.any():
            final_obs[ended] = np.stack([np.asarray(o, np.float32)
                                         for o in info["final_obs"][ended]])
        out = {"reward": np.asarray(reward, np.float32),
               "terminated": np.asarray(terminated, bool),
               "truncated": np.asarray(truncated, bool) & ~np.asarray(terminated, bool),
               "final_obs": final_obs}
        episodes.close_episodes(self, out, out["terminated"] | out["truncated"])
        self.obs = obs
        return out

    def step(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        """Steps every env with its action and resets those whose episode ended.

        Returns ``[N]`` arrays ``reward``, ``terminated``, ``truncated``, ``done`` and, for
        the episodes that ended, ``episode_return`` and ``episode_length`` (0 elsewhere),
        and ``final_obs [N, ...]`` (the observation the step reached, before a reset);
        ``self.obs`` is then what each env observes next.
        """
        self.step_async(actions)
        return self.step_wait()

    def close(self) -> None:
        self.vector.close()


# Who can step host envs, and how: the fix named wherever one reaches a compiled program.
RUNTIMES = ("train it with jaxrl_par.train (ppo, a2c, dqn, sac step a host vector env: "
            "vector_env='async'|'sync', CLI --vector-env), a3c or gorila with "
            "async_workers=True (CLI: --async-workers), or impala with actor_learner=True "
            "(--actor-learner)")


def lane_envs(env_id: str, num_envs: int, keys, vector_env: str = "sync"
              ) -> list[HostVecEnv]:
    """A worker's (or the actors') host envs for each seed lane, ``[S]``
    :class:`HostVecEnv` of ``num_envs`` each, seeded from the lanes' ``[S]`` keys."""
    return [make_vector(env_id, num_envs, seed, vector_env) for seed in lane_seeds(keys)]


def make_vector(env_id: str, num_envs: int, seed: int, vector_env: str = "sync"):
    """``num_envs`` host envs of ``env_id``: a :class:`HostVecEnv` (gymnasium), or for
    ``"envpool:<id>"`` an :class:`~jaxrl_par.envs.envpool_envs.EnvPoolVecEnv` (EnvPool's
    own threads; ``vector_env`` does not apply)."""
    if envpool_envs.is_envpool(env_id):
        check_vector_env(vector_env)
        return envpool_envs.EnvPoolVecEnv(env_id, num_envs, seed, spec(env_id))
    return HostVecEnv(env_id, num_envs, seed, vector_env)


def lane_seeds(keys) -> list[int]:
    """A gymnasium seed per seed lane from its ``[S]`` JAX keys (a worker's), so a lane's
    host envs are seeded by the run's seed."""
    import jax

    data = np.asarray(jax.random.key_data(keys)).reshape(len(keys), -1)
    return [int(x) & 0x7FFFFFFF for x in data[:, -1]]


class EpisodeTotals:
    """The episodes that finished during a worker's steps, per seed lane: what
    :func:`jaxrl_par.envs.episode_metrics` reports for JAX envs."""

    def __init__(self, lanes: int):
        self.returns = np.zeros(lanes)
        self.lengths = np.zeros(lanes)
        self.count = np.zeros(lanes)

    def add(self, steps: list[dict[str, np.ndarray]]) -> None:
        """One :meth:`HostVecEnv.step` result per lane."""
        self.returns += [st["episode_return"].sum() for st in steps]
        self.lengths += [st["episode_length"].sum() for st in steps]
        self.count += [st["done"].sum() for st in steps]

    def metrics(self) -> dict[str, np.ndarray]:
        """float32 ``[S]`` ``episode_return``, ``episode_length`` (NaN where none
        finished) and ``num_episodes``."""
        safe = np.maximum(self.count, 1.0)
        finished = self.count > 0
        out = {"episode_return": np.where(finished, self.returns / safe, np.nan),
               "episode_length": np.where(finished, self.lengths / safe, np.nan),
               "num_episodes": self.count}
        return {k: v.astype(np.float32) for k, v in out.items()}


def compiled_update(state):
    """The ``update`` of an algorithm on host envs: they cannot step inside a compiled
    program, so this raises (when the runner traces it, before anything compiles) with
    the fix."""
    raise ValueError(f"this gymnasium env steps on the host, outside compiled programs: "
                     f"{RUNTIMES}")
