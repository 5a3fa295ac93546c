"""Learning curves of logged runs: ``plot_runs(["runs/a", "runs/b"], "curves.png")``.

Two panels: the return against env steps (per seed) and against the run's training
seconds (``seconds`` in ``metrics.jsonl``: compile and evaluations left out), one line
per run for the mean over its seeds of a trailing mean of each seed's returns, shaded
between the lowest and the highest seed.
Needs matplotlib.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from jaxrl_par.runner.records import CONFIG, METRICS, SECONDS, metrics_rows
from jaxrl_par.runner.runs import read_metrics


class Curve(NamedTuple):
    """One run's learning curve, as :func:`read_curve` gives it.

    Attributes:
      label: ``DIR (algo on env)``.
      env_steps: ``[U]`` env steps per seed after each update.
      seconds: ``[U]`` training seconds after each update (None when not recorded).
      returns: ``[S, U]`` each seed's mean return of the episodes that ended in the update
        (NaN where none did).
    """

    label: str
    env_steps: np.ndarray
    seconds: np.ndarray | None
    returns: np.ndarray


def read_curve(log_dir: str, metric: str = "episode_return") -> Curve:
    """The learning curve ``metric`` of the run in ``log_dir``.

    Raises:
      FileNotFoundError: no ``metrics.jsonl`` in ``log_dir``.
      ValueError: the run logged no ``metric`` (the message lists what it logged).
    """
    env_steps, metrics = read_metrics(log_dir)
    if metric not in metrics:
        raise ValueError(f"{log_dir} logged no {metric!r}: it logged {sorted(metrics)}")
    rows = [rec for _, rec in metrics_rows(os.path.join(log_dir, METRICS))]
    seconds = (np.asarray([rec[SECONDS] for rec in rows], np.float64)
               if rows and all(SECONDS in rec for rec in rows) else None)
    label = os.path.basename(os.path.normpath(log_dir))
    try:
        with open(os.path.join(log_dir, CONFIG)) as f:
            cfg = json.load(f)["config"]
        label += f" ({cfg['config_class'].split('.')[-2]} on {cfg['env']})"
    except (OSError, KeyError, ValueError):
        pass
    return Curve(label, env_steps, seconds, metrics[metric])


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """``[S, U]`` per-update values, each seed's NaN (no episode ended in the update)
    filled with its last value, then averaged over a trailing window of ``window``
    updates (NaN before a seed's first value)."""
    filled = np.array(values, np.float64)
    for row in filled:
        seen = np.isfinite(row)
        last = np.maximum.accumulate(np.where(seen, np.arange(len(row)), -1))
        row[:] = np.where(last >= 0, row[np.maximum(last, 0)], np.nan)
    if window <= 1:
        return filled
    csum = np.nancumsum(filled, axis=1)
    count = np.cumsum(np.isfinite(filled), axis=1)
    lag = lambda a: np.pad(a, ((0, 0), (window, 0)))[:, :-window]  # noqa: E731
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > lag(count), (csum - lag(csum)) / (count - lag(count)),
                        np.nan)


def _band(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean, low, high)`` over the seeds of ``[S, U]`` (NaN-aware; NaN where no seed
    has a value)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        return np.nanmean(values, 0), np.nanmin(values, 0), np.nanmax(values, 0)


def plot_runs(log_dirs: Sequence[str] | str, path: str | None = None, *,
              labels: Sequence[str] | None = None, metric: str = "episode_return",
              smoothing: int = 100):
    """Plots the runs' learning curves: ``metric`` against env steps and against training
    seconds, the mean over each run's seeds with the range of its seeds shaded.

    Args:
      log_dirs: run log dirs (or one).
      path: where to save the figure (``.png``, ``.pdf``, ``.svg``); None: not saved.
      labels: the runs' legend labels (default: the dir's name, algorithm and env).
      metric: the logged metric to plot (``greedy_return`` for a run trained with
        ``--eval-every``: the evaluated updates are marked).
      smoothing: each seed's values are averaged over a trailing window of
        ``updates // smoothing`` updates (updates in which no episode ended take the
        seed's last value), so a curve has about ``smoothing`` independent points.

    Returns:
      the matplotlib ``Figure``.

    Raises:
      ValueError: no run given, labels not one per run, a run without ``metric``, or
        matplotlib not installed.
      FileNotFoundError: a log dir without ``metrics.jsonl``.
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("plotting needs matplotlib: pip install matplotlib") from None
    log_dirs = [log_dirs] if isinstance(log_dirs, (str, os.PathLike)) else list(log_dirs)
    if not log_dirs:
        raise ValueError("no run to plot: give at least one log dir")
    if labels is not None and len(labels) != len(log_dirs):
        raise ValueError(f"{len(labels)} labels for {len(log_dirs)} runs: give one per run")
    curves = [read_curve(str(d), metric) for d in log_dirs]
    fig, (ax_steps, ax_secs) = plt.subplots(1, 2, figsize=(11, 4))
    for i, c in enumerate(curves):
        label = labels[i] if labels is not None else c.label
        if metric == "greedy_return":  # evaluated every few updates: the points alone
            values, style = c.returns, {"marker": "o", "ms": 4}
        else:
            values, style = smooth(c.returns, max(1, len(c.env_steps) // smoothing)), {}
        mean, low, high = _band(values)
        seen = np.isfinite(mean)
        for ax, xs in ((ax_steps, c.env_steps), (ax_secs, c.seconds)):
            if xs is None:
                continue
            line, = ax.plot(xs[seen], mean[seen], lw=1.5, label=label, **style)
            ax.fill_between(xs[seen], low[seen], high[seen], color=line.get_color(),
                            alpha=0.2, lw=0)
    name = metric.replace("_", " ")
    spread = "mean over seeds (trailing window), shaded: lowest to highest seed"
    fig.suptitle(f"{name}: {spread}", fontsize=10)
    ax_steps.set(xlabel="env steps (per seed)", ylabel=name)
    ax_secs.set(xlabel="training seconds (compile left out)", ylabel=name)
    if all(c.seconds is None for c in curves):
        ax_secs.text(0.5, 0.5, "no training seconds recorded in these runs",
                     ha="center", va="center", transform=ax_secs.transAxes)
    ax_steps.legend(fontsize=8, loc="lower right")
    for ax in (ax_steps, ax_secs):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    if path is not None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=110)
    return fig


__all__ = ["Curve", "plot_runs", "read_curve"]
