"""Videos of greedy episodes: ``record_video(policy_or_run_dir, "out.gif")``.

A JAX env is stepped one env at a time by its jitted ``step`` and drawn from its
observations by :mod:`jaxrl_par.envs.render`; a ``gymnasium:<id>`` env is made with
``render_mode="rgb_array"`` and drawn by gymnasium (classic control needs pygame). The
policy acts greedily (:class:`~jaxrl_par.runner.policy.Policy`). A ``.gif`` is written
with Pillow, anything else (``.mp4``) with imageio and its ffmpeg plugin
(``pip install 'jaxrl_par[video]'``).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import jax
import numpy as np

from jaxrl_par import envs
from jaxrl_par.envs import host, render
from jaxrl_par.runner.policy import Policy, load_policy


class Video(NamedTuple):
    """What :func:`record_video` returns.

    Attributes:
      path: the file written.
      frames: frames in it (each episode's steps, plus its last observation).
      returns: each episode's undiscounted return.
    """

    path: str
    frames: int
    returns: list[float]


def jax_episode(policy: Policy, seed: int, max_steps: int | None) -> tuple[list, float]:
    """``(frames, return)`` of one greedy episode of the policy's JAX env, reset from
    ``seed``: a frame of every observation acted on, and of the last one reached."""
    env = envs.make(policy.env, 1)
    draw = render.renderer(policy.env)
    if max_steps is None:
        max_steps = int(getattr(env.params, "max_steps_in_episode", 1000))
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    key = jax.random.key(seed)
    key, k = jax.random.split(key)
    state = reset(k[None])
    frames, total = [], 0.0
    for t in range(max_steps):
        obs = np.asarray(state.obs[0])
        frames.append(draw(obs, t))
        key, k = jax.random.split(key)
        state, ts = step(k[None], state, policy(obs)[None])
        total += float(ts.reward[0])
        if bool(ts.done[0]):
            frames.append(draw(np.asarray(ts.final_obs[0]), t + 1))
            break
    return frames, total


def host_episode(policy: Policy, seed: int, max_steps: int | None) -> tuple[list, float]:
    """``(frames, return)`` of one greedy episode of the policy's ``gymnasium:<id>`` env,
    reset with ``seed`` and rendered by gymnasium."""
    import gymnasium

    # pygame (classic control's renderer) opens an audio device unless told otherwise,
    # which prints ALSA errors on machines without one; rendering needs no sound.
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    env = gymnasium.make(policy.env[len(host.PREFIX):], render_mode="rgb_array")
    try:
        obs, _ = env.reset(seed=seed)
        frames, total = [np.asarray(env.render())], 0.0
        for _ in range(100_000 if max_steps is None else max_steps):
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            frames.append(np.asarray(env.render()))
            total += float(reward)
            if terminated or truncated:
                break
    except gymnasium.error.DependencyNotInstalled as e:
        raise ValueError(f"rendering {policy.env} needs a package: {e}") from None
    finally:
        env.close()
    return frames, total


def write_frames(path: str, frames: list[np.ndarray], fps: int) -> None:
    """Writes ``frames`` (``[H, W, 3]`` uint8) to ``path``: a GIF with Pillow, else with
    imageio (e.g. ``.mp4`` through imageio-ffmpeg)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if path.lower().endswith(".gif"):
        image_cls, _ = render.pil()  # a one-line error without Pillow
        images = [image_cls.fromarray(f) for f in frames]
        images[0].save(path, save_all=True, append_images=images[1:],
                       duration=max(1, round(1000 / fps)), loop=0)
        return
    try:
        import imageio.v2 as imageio
    except ImportError:
        raise ValueError(f"writing {path} needs imageio and imageio-ffmpeg: pip install "
                         "'jaxrl_par[video]' (or write a .gif)") from None
    try:
        imageio.mimwrite(path, frames, fps=fps)
    except (ImportError, ValueError, RuntimeError) as e:
        raise ValueError(f"writing {path} failed ({e}): pip install 'jaxrl_par[video]' "
                         "for mp4, or write a .gif") from None


def record_video(policy: Policy | str, path: str, *, episodes: int = 1, seed: int = 0,
                 fps: int = 30, max_steps: int | None = None) -> Video:
    """Records ``episodes`` greedy episodes of a policy, one after another, to ``path``.

    Args:
      policy: a :class:`~jaxrl_par.runner.policy.Policy`, or what
        :func:`~jaxrl_par.runner.policy.load_policy` takes (a run's log dir, an exported
        ``.msgpack``).
      path: ``.gif`` (Pillow), or ``.mp4`` and other formats imageio writes.
      episodes: episodes recorded; episode ``i`` is reset from ``seed + i``.
      seed: the first episode's reset seed.
      fps: frames per second of the file.
      max_steps: steps at most per episode (default: the env's time limit).

    Returns:
      a :class:`Video`: the path, the number of frames and each episode's return.

    Raises:
      ValueError: ``episodes`` < 1, no renderer for the env, or no writer for the format.
    """
    if episodes < 1:
        raise ValueError(f"episodes={episodes}: record at least 1")
    if not isinstance(policy, Policy):
        policy = load_policy(policy)
    episode = host_episode if host.is_host(policy.env) else jax_episode
    frames, returns = [], []
    for i in range(episodes):
        f, total = episode(policy, seed + i, max_steps)
        frames += f
        returns.append(total)
    write_frames(path, frames, fps)
    return Video(path, len(frames), returns)


__all__ = ["Video", "record_video"]
