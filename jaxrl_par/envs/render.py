"""Frames of the JAX environments, drawn from their observations (gymnax envs do not render).

:func:`renderer` gives, for an env id, ``draw(obs, step) -> [H, W, 3] uint8``: the
classic-control envs (CartPole, Pendulum, Acrobot, MountainCar) drawn from the
quantities their observation holds (cart position and pole angle, link angles, car
position), MinAtar's ``[10, 10, C]`` grids as coloured cells (one colour per channel,
the last active channel on top). Each frame carries its step number in a corner. Drawing
uses Pillow (``pip install 'jaxrl_par[video]'``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

# One colour per MinAtar channel (matplotlib's tab10, then tab20's light ones).
PALETTE = np.array([
    [31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40], [148, 103, 189],
    [140, 86, 75], [227, 119, 194], [127, 127, 127], [188, 189, 34], [23, 190, 207],
    [174, 199, 232], [255, 187, 120], [152, 223, 138], [255, 152, 150], [197, 176, 213],
], np.uint8)
CELL = 16  # pixels per MinAtar cell
WIDTH, HEIGHT = 320, 224  # classic-control frames (multiples of 16, as video codecs want)


def pil():
    """Pillow's ``(Image, ImageDraw)``; a ``ValueError`` naming the install without it."""
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        raise ValueError("drawing frames needs Pillow: pip install 'jaxrl_par[video]'"
                         ) from None
    return Image, ImageDraw


def _canvas(width: int = WIDTH, height: int = HEIGHT):
    image_cls, draw_cls = pil()
    image = image_cls.new("RGB", (width, height), (255, 255, 255))
    return image, draw_cls.Draw(image)


def _finish(image, draw, step: int, ink=(0, 0, 0)) -> np.ndarray:
    draw.text((4, 2), f"t={step}", fill=ink)
    return np.asarray(image, np.uint8)


def cartpole(obs: np.ndarray, step: int) -> np.ndarray:
    """CartPole from ``obs = [x, x_dot, theta, theta_dot]``: the track spans
    ``x`` in [-2.4, 2.4], the pole (length 1 in the track's units, 0.5 half-length as
    gymnax's) leans by ``theta`` from upright."""
    image, draw = _canvas()
    scale = WIDTH / 4.8
    x, theta = float(obs[0]), float(obs[2])
    ground = HEIGHT - 50
    cx = WIDTH / 2 + x * scale
    draw.line([(0, ground), (WIDTH, ground)], fill=(0, 0, 0))
    draw.rectangle([cx - 20, ground - 12, cx + 20, ground + 4], fill=(40, 40, 40))
    length = 1.0 * scale
    tip = (cx + length * math.sin(theta), ground - 12 - length * math.cos(theta))
    draw.line([(cx, ground - 12), tip], fill=(202, 152, 101), width=6)
    return _finish(image, draw, step)


def pendulum(obs: np.ndarray, step: int) -> np.ndarray:
    """Pendulum from ``obs = [cos theta, sin theta, theta_dot]`` (theta 0: upright)."""
    image, draw = _canvas(HEIGHT, HEIGHT)
    c = HEIGHT / 2
    r = 0.4 * HEIGHT
    tip = (c + r * float(obs[1]), c - r * float(obs[0]))
    draw.line([(c, c), tip], fill=(204, 77, 77), width=8)
    draw.ellipse([c - 4, c - 4, c + 4, c + 4], fill=(0, 0, 0))
    return _finish(image, draw, step)


def acrobot(obs: np.ndarray, step: int) -> np.ndarray:
    """Acrobot from ``obs = [cos t1, sin t1, cos t2, sin t2, ...]`` (t1 = 0: hanging down;
    t2 relative to the first link); the line marks the height to swing above."""
    image, draw = _canvas(HEIGHT, HEIGHT)
    c = HEIGHT / 2
    r = 0.22 * HEIGHT
    t1 = math.atan2(float(obs[1]), float(obs[0]))
    t2 = math.atan2(float(obs[3]), float(obs[2]))
    p1 = (c + r * math.sin(t1), c + r * math.cos(t1))
    p2 = (p1[0] + r * math.sin(t1 + t2), p1[1] + r * math.cos(t1 + t2))
    draw.line([(0, c - r), (HEIGHT, c - r)], fill=(0, 0, 0))
    draw.line([(c, c), p1], fill=(0, 204, 204), width=6)
    draw.line([p1, p2], fill=(0, 153, 204), width=6)
    return _finish(image, draw, step)


def mountain_car(obs: np.ndarray, step: int) -> np.ndarray:
    """MountainCar from ``obs = [position, velocity]``: the hill ``0.45 sin(3x) + 0.55``
    over x in [-1.2, 0.6], the flag at 0.5."""
    image, draw = _canvas()
    lo, hi = -1.2, 0.6

    def point(x: float) -> tuple[float, float]:
        return ((x - lo) / (hi - lo) * WIDTH,
                HEIGHT - 10 - (0.45 * math.sin(3 * x) + 0.55) * (HEIGHT - 40))

    xs = np.linspace(lo, hi, 100)
    draw.line([point(float(x)) for x in xs], fill=(0, 0, 0), width=2)
    fx, fy = point(0.5)
    draw.line([(fx, fy), (fx, fy - 25)], fill=(0, 0, 0))
    draw.polygon([(fx, fy - 25), (fx + 12, fy - 20), (fx, fy - 15)], fill=(204, 204, 0))
    cx, cy = point(float(obs[0]))
    draw.ellipse([cx - 8, cy - 16, cx + 8, cy], fill=(40, 40, 40))
    return _finish(image, draw, step)


def minatar(obs: np.ndarray, step: int) -> np.ndarray:
    """A MinAtar grid ``[10, 10, C]`` as ``CELL``-pixel cells: each cell takes the colour
    of its last active channel, black where none is."""
    grid = np.asarray(obs) > 0.5
    height, width, channels = grid.shape
    colours = PALETTE[np.arange(channels) % len(PALETTE)]
    # the last active channel: argmax over the reversed channel axis
    top = channels - 1 - np.argmax(grid[..., ::-1], axis=-1)
    cells = np.where(grid.any(-1)[..., None], colours[top], 0).astype(np.uint8)
    pixels = np.repeat(np.repeat(cells, CELL, axis=0), CELL, axis=1)
    image_cls, draw_cls = pil()
    image = image_cls.fromarray(pixels)
    return _finish(image, draw_cls.Draw(image), step, ink=(255, 255, 255))


RENDERERS: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
    "CartPole-v1": cartpole,
    "Pendulum-v1": pendulum,
    "Acrobot-v1": acrobot,
    "MountainCar-v0": mountain_car,
    "MountainCarContinuous-v0": mountain_car,
}


def renderer(env_id: str) -> Callable[[np.ndarray, int], np.ndarray]:
    """``draw(obs, step) -> [H, W, 3] uint8``: a frame of ``env_id`` from one observation.

    Raises:
      ValueError: no renderer draws ``env_id`` (the message lists those that do).
    """
    if env_id.endswith("-MinAtar"):
        return minatar
    if env_id not in RENDERERS:
        raise ValueError(f"no frame renderer for {env_id}: videos of JAX envs are drawn for "
                         f"{', '.join(RENDERERS)} and the MinAtar games; for a gymnasium env "
                         "train on gymnasium:<id> (rendered by gymnasium)")
    return RENDERERS[env_id]


__all__ = ["renderer"]
