"""Running episode totals of host vector envs (gymnasium's and EnvPool's), kept by the
env objects as numpy arrays."""

from __future__ import annotations

import numpy as np


def close_episodes(env, out: dict[str, np.ndarray], done: np.ndarray) -> None:
    """Adds a step's ``out["reward"]`` to ``env``'s running ``episode_return`` and
    ``episode_length`` ``[N]``, writes ``done`` and the totals of the episodes that
    ended (0 elsewhere) into ``out``, and starts those envs' totals anew."""
    env.episode_return += out["reward"]
    env.episode_length += 1
    out["done"] = done
    out["episode_return"] = np.where(done, env.episode_return, 0.0).astype(np.float32)
    out["episode_length"] = np.where(done, env.episode_length, 0).astype(np.int32)
    env.episode_return[done] = 0.0
    env.episode_length[done] = 0
