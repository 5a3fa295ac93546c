"""Population based training (Jaderberg et al. 2017, arXiv:1711.09846) over a sweep's lanes.

A sweep (``Config.sweep``, ``train(..., hparams=...)``) trains its lanes apart. With
``train(..., pbt=PBT(interval=K))`` the runner also, every ``K`` updates, ranks the lanes
by their mean episode return over those updates and lets the worst ``fraction`` of them
*exploit* and *explore* (truncation selection): each copies the whole training state of
a lane drawn from the best ``fraction`` (parameters, optimiser state, env state, replay,
all of it), then multiplies each swept value of its parent by a factor drawn from
``factors``. A copy's PRNG keys are folded with its own lane index, so it does not replay
its parent's future. Where the Config would reject a new value (a ``gamma`` above 1), the
copy keeps its parent's.

The decisions are numpy on the host between chunks, drawn from a generator seeded by the
first seed and the update count, so a run resumed from its checkpoint makes the same
ones as a run that never stopped. Each decision is appended to ``pbt.jsonl`` in the log
dir, and every swept value's schedule is logged as a metric (``hparams/<name>``, per lane
and update).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par.algos import hyper
from jaxrl_par.parallel.packing import is_key


@dataclasses.dataclass(frozen=True)
class PBT:
    """How the population exploits and explores.

    Attributes:
      interval: updates between two exploit/explore steps (also the runner's chunk).
      fraction: share of the lanes replaced each step (the worst), and share they copy
        from (the best); at least one lane each.
      factors: a copied lane's swept values are its parent's times one of these, drawn
        per field.
      metric: the per-update metric to rank by, averaged over the interval (NaN
        updates, with no finished episode, are skipped; a lane with none ranks last).
    """

    interval: int
    fraction: float = 0.25
    factors: tuple[float, ...] = (0.8, 1.25)
    metric: str = "episode_return"

    def __post_init__(self):
        if isinstance(self.interval, bool) or not isinstance(
                self.interval, (int, np.integer)) or self.interval < 1:
            raise ValueError(f"PBT.interval={self.interval!r}: give the updates between "
                             "exploit/explore steps, an int >= 1")
        if not 0 < self.fraction <= 0.5:
            raise ValueError(f"PBT.fraction={self.fraction!r}: give the share of lanes "
                             "replaced each step, in (0, 0.5]")
        if not self.factors or any(not (isinstance(f, (int, float)) and f > 0)
                                   for f in self.factors):
            raise ValueError(f"PBT.factors={self.factors!r}: give positive multipliers")


def check(pbt: PBT, lanes: dict[str, np.ndarray], num_updates: int) -> None:
    """Before compiling: PBT needs a sweep of at least two lanes and a step to take."""
    if not lanes:
        raise ValueError("pbt needs swept hyperparameters to explore: make the algorithm "
                         "with Config(sweep=(...)) and give hparams (CLI: --sweep)")
    if len(next(iter(lanes.values()))) < 2:
        raise ValueError("pbt needs a population of at least two lanes (seeds x points)")
    if pbt.interval >= num_updates:
        raise ValueError(f"PBT.interval={pbt.interval} is not below the run's {num_updates} "
                         "updates: it would never exploit; give a shorter interval")


def scores(rows: dict[str, np.ndarray], metric: str) -> np.ndarray:
    """``[S]`` mean of ``rows[metric]`` ``[S, n]`` over its finite entries (-inf where none)."""
    if metric not in rows:
        raise ValueError(f"PBT.metric={metric!r} is not a metric of this algorithm; it "
                         f"reports {sorted(rows)}")
    x = np.asarray(rows[metric], np.float64)
    ok = np.isfinite(x)
    total = np.where(ok, x, 0.0).sum(axis=1)
    return np.where(ok.any(axis=1), total / np.maximum(ok.sum(axis=1), 1), -np.inf)


def exploit_explore(pbt: PBT, score: np.ndarray, lanes: dict[str, np.ndarray],
                    rng: np.random.Generator, cfg: Any = None
                    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(source [S], lanes)``: lane ``i`` takes lane ``source[i]``'s state (itself when it
    is kept), and the new swept values per lane (float32; with ``cfg``, a value the
    Config rejects is the parent's). Ties in ``score`` rank the lower lane index higher;
    when no lane has a score (no episode finished), nothing changes."""
    n = len(score)
    if not np.isfinite(score).any():  # no lane finished an episode: nothing to rank by
        return np.arange(n), {name: v.astype(np.float32) for name, v in lanes.items()}
    k = max(1, round(pbt.fraction * n))
    order = np.lexsort((np.arange(n), -score))  # best first
    top, bottom = order[:k], order[n - k:]
    source = np.arange(n)
    source[bottom] = rng.choice(top, size=k)
    new = {}
    for name, values in lanes.items():
        v = values.astype(np.float64).copy()
        v[bottom] = values[source[bottom]] * rng.choice(np.asarray(pbt.factors), size=k)
        v = v.astype(np.float32)
        if cfg is not None:
            for i in bottom:
                try:
                    dataclasses.replace(cfg, **{name: float(v[i])})
                except ValueError:
                    v[i] = values[source[i]]
        new[name] = v
    return source, new


def _gather(state: Any, source: jax.Array, lane: jax.Array) -> Any:
    def take(x):
        y = x[source]
        if is_key(x):
            copied = (source != lane).reshape((-1,) + (1,) * (x.ndim - 1))
            folded = jax.vmap(lambda k, i: jax.vmap(jax.random.fold_in, (0, None))(
                k.reshape(-1), i).reshape(k.shape))(y, lane)
            y = jnp.where(copied, folded, y)
        return y

    return jax.tree.map(take, state)


_gather_jit = jax.jit(_gather, donate_argnums=0)


def apply(state: Any, source: np.ndarray, lanes: dict[str, np.ndarray]) -> Any:
    """``state`` (leaves ``[S, ...]``, or ``[S, D, ...]`` on a mesh) with lane ``i`` copied
    from ``source[i]`` (keys of copied lanes folded with ``i``) and ``state.hparams`` set
    to ``lanes``, each leaf placed as it was."""
    n = len(source)
    shardings = jax.tree.map(lambda x: x.sharding, state)
    state = _gather_jit(state, jnp.asarray(source, jnp.int32), jnp.arange(n, dtype=jnp.int32))
    # Back to the layout the compiled chunk takes (on a mesh the gather's output may differ).
    return hyper.write(jax.device_put(state, shardings), lanes)


def truncate_log(path: str, updates_done: int) -> None:
    """Keeps the steps of ``path`` (``pbt.jsonl``) taken at or before ``updates_done``:
    a run killed between logging a step and checkpointing it takes that step again when
    it resumes, and logs it again."""
    if not os.path.exists(path):
        return
    kept = []
    with open(path) as f:
        for line in f:
            try:
                if json.loads(line)["update"] <= updates_done:
                    kept.append(line)
            except (json.JSONDecodeError, KeyError):
                break  # a line cut short by the kill
    with open(path, "w") as f:
        f.writelines(kept)


def rng_for(seeds: Sequence[int], update: int) -> np.random.Generator:
    """The generator of the step after ``update`` updates: the same on a resumed run."""
    return np.random.default_rng([abs(int(seeds[0])), int(update), 0x9B7])
