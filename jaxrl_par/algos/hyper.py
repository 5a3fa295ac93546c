"""Hyperparameters held in the training state, so one compiled program trains a sweep.

The runner vmaps *lanes*: each lane is a seed and, with a sweep, its own values of some
hyperparameters (PureJaxRL's "vmap over the learning rate"). An algorithm lists in
``Config.SWEEPABLE`` the float fields that change no shape and no branch of its program
(learning rate, discount, loss coefficients...). The fields named in ``Config.sweep``
are held as float32 scalars in ``state.hparams``: ``init`` sets them to the config's
values, the runner writes each lane's own (``train(..., hparams=...)``), and ``update``
reads them through :func:`view`. Every other field stays a compile-time constant, and
with ``sweep=()`` (the default) the state and the program are what they were without
this module.

A lane of a sweep equals, bit for bit, a run of the same seed with its values in the
config: ``update`` computes with every sweepable field as a float32 scalar, swept or not.
"""

from __future__ import annotations

import dataclasses
import itertools
import types
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def sweepable(config_or_class: Any) -> tuple[str, ...]:
    """The fields of an algorithm's Config that can be swept (``()`` if none)."""
    cls = config_or_class if isinstance(config_or_class, type) else type(config_or_class)
    return tuple(getattr(cls, "SWEEPABLE", ()))


def check_sweep(cfg: Any) -> None:
    """Raises ``ValueError`` unless ``cfg.sweep`` is a tuple of distinct sweepable fields
    (and fields that must stay > 0 in a sweep, ``Config.SWEEP_POSITIVE``, are > 0)."""
    names = cfg.sweep
    where = f"{type(cfg).__module__}.Config.sweep"
    if isinstance(names, str) or not isinstance(names, (tuple, list)):
        # A ValueError, as every config error (the CLI reports those as usage errors).
        raise ValueError(f"{where}={names!r}: give a tuple of field names, e.g. "  # noqa: TRY004
                         "sweep=('learning_rate',)")
    allowed = sweepable(cfg)
    for name in names:
        if name not in allowed:
            raise ValueError(f"{where}: {name!r} cannot be swept (it changes the program's "
                             f"shapes or branches); sweepable fields: {', '.join(allowed)}")
    if len(set(names)) != len(names):
        raise ValueError(f"{where}={tuple(names)!r} names a field twice")
    for name in set(names) & set(getattr(type(cfg), "SWEEP_POSITIVE", ())):
        if not getattr(cfg, name) > 0:
            raise ValueError(f"{where}: {name}={getattr(cfg, name)!r} switches its part off, "
                             f"which is fixed in the program; to sweep {name}, start from a "
                             "value > 0")


def init(cfg: Any) -> dict[str, Any] | None:
    """``state.hparams`` at init: float32 ``[]`` per swept field, the config's value;
    None when nothing is swept (no leaves, so the state is as without sweeps)."""
    return {name: jnp.float32(getattr(cfg, name)) for name in cfg.sweep} or None


def view(cfg: Any, hparams: Mapping[str, Any] | None) -> types.SimpleNamespace:
    """Every sweepable field by attribute, as float32 ``[]``: the state's (traced) value
    where it is swept, the config's value as a constant where not. So arithmetic on
    them (``1 - clip_eps``, ``gamma * lambda``) is float32 either way, and a lane of a
    sweep equals, bit for bit, a run with its values in the config. A field whose 0
    switches its part off (``Config.SWEEP_POSITIVE``, e.g. ``max_grad_norm``) stays the
    Python number 0 where it is 0, so the program can still leave that part out (it
    cannot be swept then). Fields that cannot be swept are not on the view: code that
    reads one through it fails at once."""
    hparams = hparams or {}
    off = set(getattr(type(cfg), "SWEEP_POSITIVE", ()))

    def value(name):
        if name in hparams:
            return hparams[name]
        v = getattr(cfg, name)
        return v if name in off and v == 0 else jnp.float32(v)

    return types.SimpleNamespace(**{name: value(name) for name in sweepable(cfg)})


def write(state: Any, lanes: Mapping[str, np.ndarray]) -> Any:
    """``state`` with each lane's values written into ``state.hparams`` (leaves ``[S]``,
    or ``[S, D]`` on a mesh: the lane's value in every copy), placed as the leaves they
    replace (across processes too). ``lanes``: float32 ``[S]`` per swept field."""
    new = dict(state.hparams)
    for name, values in lanes.items():
        leaf = new[name]
        full = np.broadcast_to(np.asarray(values, np.float32).reshape(
            (-1,) + (1,) * (leaf.ndim - 1)), leaf.shape)
        new[name] = jax.make_array_from_callback(leaf.shape, leaf.sharding,
                                                 lambda index, full=full: full[index])
    return state.replace(hparams=new)


def lane_values(cfg: Any, swept: Sequence[str], hparams: Mapping[str, Any] | None,
                num_lanes: int) -> dict[str, np.ndarray]:
    """float32 ``[S]`` values of every swept field (``swept``, the algorithm's
    ``hyperparams``), one per lane, checked before anything compiles. ``hparams`` maps
    swept fields to ``S`` values (a scalar applies to every lane); a swept field it omits
    keeps the config's value in every lane.

    Raises:
      ValueError: a field that ``swept`` does not name, a length other than ``S``, or a
        value the Config itself rejects (named as Config's validation names it).
    """
    hparams = dict(hparams or {})
    swept = tuple(swept)
    where = f"{type(cfg).__module__}.Config"
    extra = [name for name in hparams if name not in swept]
    if extra:
        fix = (f"make the algorithm with {where}(sweep={tuple(swept) + tuple(extra)!r}) "
               "so that update reads them from the state" if set(extra) <= set(sweepable(cfg))
               else f"sweepable fields: {', '.join(sweepable(cfg)) or 'none'}")
        raise ValueError(f"hparams gives {extra}, which {where}.sweep={swept!r} does not "
                         f"hold; {fix}")
    values = {}
    for name in swept:
        v = np.asarray(hparams.get(name, getattr(cfg, name)), np.float64)
        if v.ndim == 0:
            v = np.full(num_lanes, v)
        if v.shape != (num_lanes,):
            raise ValueError(f"hparams[{name!r}] has {v.size} values for {num_lanes} lanes "
                             "(seeds); give one per seed, or use hyper.grid(seeds, ...) "
                             "for every seed at every value")
        for x in sorted(set(v.tolist())):
            probe = dataclasses.replace(cfg, **{name: float(x)})  # Config's own checks
            check_sweep(probe)
        values[name] = v.astype(np.float32)
    return values


def to_floats(values: Any) -> list[float]:
    """float32 values as the shortest Python floats that read back as the same float32
    (``1e-3``, not ``0.0010000000474974513``): for JSON records and printing."""
    return [float(str(np.float32(v))) for v in np.asarray(values, np.float32).reshape(-1)]


def to_record(lanes: Mapping[str, Any]) -> dict[str, list[float]]:
    """Each field's lane values as :func:`to_floats` gives them: the JSON form of a
    sweep's values in config.json, checkpoints, ``pbt.jsonl`` and ``--json``."""
    return {name: to_floats(values) for name, values in lanes.items()}


def from_record(record: Mapping[str, Sequence[float]] | None) -> dict[str, np.ndarray]:
    """float32 ``[S]`` per field from :func:`to_record`'s form (None: no sweep, {})."""
    return {name: np.asarray(values, np.float32) for name, values in (record or {}).items()}


def at_seeds(points: Sequence[Mapping[str, float]], seeds: int | Sequence[int]
             ) -> tuple[list[int], dict[str, list[float]]]:
    """Every seed at each of ``points`` (dicts of the same fields): ``(seeds [S],
    hparams)`` for ``train(algo, seeds, hparams=hparams)``. Lanes are point-major, so the
    seeds of one point are adjacent."""
    seeds = [int(seeds)] if isinstance(seeds, (int, np.integer)) else [int(s) for s in seeds]
    lanes = [(point, seed) for point in points for seed in seeds]
    names = list(points[0]) if points else []
    return ([seed for _, seed in lanes],
            {name: [float(point[name]) for point, _ in lanes] for name in names})


def grid_points(**values: Sequence[float]) -> list[dict[str, float]]:
    """Every point of the grid of ``values`` (the last field varies fastest)."""
    names = list(values)
    for name in names:
        if not isinstance(values[name], Sequence | np.ndarray) or isinstance(
                values[name], (str, bytes)) or not len(values[name]):
            raise ValueError(f"grid: {name}={values[name]!r}; give a list of values")
    return [dict(zip(names, point, strict=True)) for point in itertools.product(*values.values())]


def grid(seeds: int | Sequence[int], **values: Sequence[float]
         ) -> tuple[list[int], dict[str, list[float]]]:
    """Every seed at every point of the grid of ``values``, laid out by :func:`at_seeds`::

        seeds, hp = grid([0, 1], learning_rate=[1e-3, 3e-4])
        # seeds == [0, 1, 0, 1]; hp == {"learning_rate": [1e-3, 1e-3, 3e-4, 3e-4]}
    """
    return at_seeds(grid_points(**values), seeds)


def sample_points(num_points: int, seed: int = 0, **ranges: tuple) -> list[dict[str, float]]:
    """``num_points`` points drawn at random from ``ranges`` (see :func:`sample`)."""
    if isinstance(num_points, bool) or not isinstance(num_points, (int, np.integer)) \
            or num_points < 1:
        raise ValueError(f"sample: num_points={num_points!r}; give a number of points >= 1")
    rng = np.random.default_rng(seed)
    drawn = {}
    for name, spec in ranges.items():
        if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3) or (
                len(spec) == 3 and spec[2] != "log"):
            raise ValueError(f"sample: {name}={spec!r}; give (low, high) or (low, high, 'log')")
        low, high = float(spec[0]), float(spec[1])
        log = len(spec) == 3
        if not low < high or (log and low <= 0):
            raise ValueError(f"sample: {name}={spec!r}; need low < high"
                             + (" and low > 0 for a log range" if log else ""))
        u = rng.uniform(size=num_points)
        drawn[name] = (np.exp(np.log(low) + u * (np.log(high) - np.log(low))) if log
                       else low + u * (high - low))
    return [{name: float(v[p]) for name, v in drawn.items()} for p in range(num_points)]


def sample(seeds: int | Sequence[int], num_points: int, seed: int = 0,
           **ranges: tuple) -> tuple[list[int], dict[str, list[float]]]:
    """Random search (Bergstra and Bengio 2012): ``num_points`` points drawn at random,
    every seed at each, laid out by :func:`at_seeds`. Each range is ``(low, high)``
    (uniform) or ``(low, high, "log")`` (log-uniform, for learning rates and other scales;
    ``low > 0``). ``seed`` fixes the draw, so the same call gives the same points::

        seeds, hp = sample([0, 1], 8, learning_rate=(1e-4, 1e-2, "log"), ent_coef=(0, 0.02))
    """
    return at_seeds(sample_points(num_points, seed, **ranges), seeds)


def points(hparams: Mapping[str, Any], num_lanes: int
           ) -> list[tuple[dict[str, float], np.ndarray]]:
    """The distinct points of a sweep, in order of first appearance, each with the
    indices of its lanes: ``[(values, lane_indices)]`` with values as :func:`to_floats`
    gives them (one point of all ``num_lanes`` lanes when ``hparams`` is empty)."""
    names = list(hparams)
    if not names:
        return [({}, np.arange(num_lanes))]
    rows = list(zip(*(to_floats(hparams[n]) for n in names), strict=True))
    order: dict[tuple, list[int]] = {}
    for lane, row in enumerate(rows):
        order.setdefault(row, []).append(lane)
    return [(dict(zip(names, row, strict=True)), np.asarray(lanes)) for row, lanes in order.items()]


def summarize(hparams: Mapping[str, Any], final_returns: Any, seeds: Sequence[int]
              ) -> list[dict]:
    """One row per point of a sweep (as :func:`points` orders them): ``{"hparams":
    {name: value}, "seeds": [...], "final_return": mean, "final_return_std": std}``
    over the point's lanes that finished an episode (None where none did). With a
    :class:`~jaxrl_par.runner.training.TrainResult` ``r``: ``summarize(r.hparams,
    r.final_returns(), r.seeds)``."""
    final_returns = np.asarray(final_returns, np.float64)
    rows = []
    for values, lanes in points(hparams, len(final_returns)):
        finished = final_returns[lanes][~np.isnan(final_returns[lanes])]
        rows.append({"hparams": values, "seeds": [int(seeds[i]) for i in lanes],
                     "final_return": float(np.mean(finished)) if finished.size else None,
                     "final_return_std": float(np.std(finished)) if finished.size else None})
    return rows
