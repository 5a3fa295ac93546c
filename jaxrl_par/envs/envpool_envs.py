"""EnvPool's C++ thread pool as host envs: ``"envpool:<id>"`` (e.g.
``"envpool:CartPole-v1"``, ``"envpool:Pong-v5"``), an optional extra
(``pip install 'jaxrl_par[envpool]'``).

:class:`EnvPoolVecEnv` has :class:`jaxrl_par.envs.host.HostVecEnv`'s interface and
semantics. EnvPool resets an env on the step after its episode ended (gymnasium's
``NEXT_STEP`` mode: that step ignores its action and returns the reset observation with
reward 0); the adapter takes that reset step at once for the envs that ended, so each
step it returns is a real step and ``obs`` is the next episode's first observation, as
with gymnasium's ``SAME_STEP`` mode.
"""

from __future__ import annotations

import numpy as np

from jaxrl_par.envs import episodes

PREFIX = "envpool:"
INSTALL = "pip install 'jaxrl_par[envpool]'"


def is_envpool(env_id: str) -> bool:
    """Whether ``env_id`` names EnvPool envs (``"envpool:..."``)."""
    return isinstance(env_id, str) and env_id.startswith(PREFIX)


def _envpool():
    try:
        import envpool
    except ImportError:
        raise ValueError(f"envpool: ids need EnvPool, which is not installed: "
                         f"{INSTALL}") from None
    return envpool


def check_env_id(env_id: str) -> None:
    """``ValueError`` naming close ids unless EnvPool knows ``env_id``'s id."""
    import difflib

    known = _envpool().list_all_envs()
    name = env_id[len(PREFIX):]
    if name not in known:
        close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
        raise ValueError(f"unknown EnvPool environment {name!r} in {env_id!r}; closest "
                         f"EnvPool ids: {', '.join(close) or 'none close'}")


def make_pool(env_id: str, num_envs: int, seed: int):
    """EnvPool's gymnasium-API pool of ``num_envs`` envs (env ``i`` seeded ``seed + i``)."""
    return _envpool().make_gymnasium(env_id[len(PREFIX):], num_envs=num_envs, seed=seed)


class EnvPoolVecEnv:
    """``num_envs`` EnvPool envs with :class:`~jaxrl_par.envs.host.HostVecEnv`'s interface.

    Args:
      env_id: ``"envpool:<id>"``.
      num_envs: copies, stepped by EnvPool's threads.
      seed: env ``i`` is seeded ``seed + i``.
      spec: its :class:`~jaxrl_par.envs.host.HostSpec`.
    """

    def __init__(self, env_id: str, num_envs: int, seed: int, spec):
        self.spec = spec
        self.pool = make_pool(env_id, num_envs, seed)
        obs, _ = self.pool.reset()
        self.obs = np.asarray(obs, np.float32)
        self.episode_return = np.zeros(num_envs, np.float32)
        self.episode_length = np.zeros(num_envs, np.int32)
        self._ids = np.arange(num_envs, dtype=np.int32)

    @property
    def num_envs(self) -> int:
        return len(self._ids)

    def _action(self, actions):
        actions = np.asarray(actions)
        return actions.astype(np.int32) if self.spec.discrete else actions.astype(np.float32)

    def step_async(self, actions: np.ndarray) -> None:
        """Starts stepping every env (EnvPool's threads step while this returns)."""
        self.pool.send(self._action(actions), self._ids)

    def step_wait(self) -> dict[str, np.ndarray]:
        """The step's results, as :meth:`HostVecEnv.step` gives them."""
        obs, reward, terminated, truncated, info = self.pool.recv()
        order = np.argsort(info["env_id"])
        obs = np.asarray(obs, np.float32)[order]
        terminated = np.asarray(terminated, bool)[order]
        truncated = np.asarray(truncated, bool)[order] & ~terminated
        out = {"reward": np.asarray(reward, np.float32)[order], "terminated": terminated,
               "truncated": truncated, "final_obs": obs.copy()}
        done = terminated | truncated
        next_obs = obs
        if done.any():  # EnvPool's reset step for those envs, taken now
            ids = self._ids[done]
            dummy = np.zeros((len(ids),) + tuple(self.spec.action_shape))
            self.pool.send(self._action(dummy), ids)
            reset_obs, *_, reset_info = self.pool.recv()
            next_obs = obs.copy()
            next_obs[np.asarray(reset_info["env_id"])] = np.asarray(reset_obs, np.float32)
        episodes.close_episodes(self, out, done)
        self.obs = next_obs
        return out

    def step(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        self.step_async(actions)
        return self.step_wait()

    def close(self) -> None:
        close = getattr(self.pool, "close", None)
        if close is not None:
            close()
