"""Loggers of a run's scalars: TensorBoard and Weights & Biases, as chunk-loop listeners.

Each writes, for every update, every metric of every seed (lane) as ``<metric>/seed_<s>``
and their mean over seeds as ``<metric>/mean`` (NaN values, e.g. no episode finished in
that update, are left out), against the environment steps of one seed as the x axis:
the scalars ``metrics.jsonl`` holds. Pass them to ``train(..., listeners=[...])`` or pick
them on the command line with ``--logger tensorboard`` / ``--logger wandb``.

Both are optional extras: ``pip install 'jaxrl_par[tensorboard]'`` (tensorboardX) and
``pip install 'jaxrl_par[wandb]'``; W&B runs without a network in its offline mode
(``WANDB_MODE=offline``, what :class:`WandbLogger` uses unless told otherwise).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from jaxrl_par.runner.listeners import Chunk, Listener

LOGGERS = ("tensorboard", "wandb")


def _need(module: str, extra: str):
    """Imports ``module``, or raises ``ImportError`` naming the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"--logger {extra} needs {module}: pip install "
                          f"'jaxrl_par[{extra}]'", name=module) from None


def scalars(chunk: Chunk) -> Iterator[tuple[int, dict[str, float]]]:
    """``(env_steps, {tag: value})`` for each update of ``chunk``: every metric per seed
    (``name/seed_<s>``) and its mean over the seeds with a value (``name/mean``)."""
    n = chunk.end - chunk.start
    for u in range(n):
        step = (chunk.start + u + 1) * chunk.env_steps_per_update
        values: dict[str, float] = {}
        for name, rows in sorted(chunk.rows.items()):
            column = np.asarray(rows[:, u], np.float64)
            finite = np.isfinite(column)
            for s in np.flatnonzero(finite):
                values[f"{name}/seed_{s}"] = float(column[s])
            if finite.any():
                values[f"{name}/mean"] = float(column[finite].mean())
        yield step, values


class TensorBoardLogger(Listener):
    """Writes every chunk's scalars (:func:`scalars`) to a TensorBoard event file in
    ``directory`` (tensorboardX; created at the first chunk); ``tensorboard --logdir
    DIRECTORY`` shows them.

    Raises:
      ImportError: tensorboardX is not installed (naming the extra that installs it).
    """

    def __init__(self, directory: str):
        self._module = _need("tensorboardX", "tensorboard")
        self.directory = directory
        self.writer = None

    def on_chunk(self, chunk: Chunk) -> None:
        if self.writer is None:
            os.makedirs(self.directory, exist_ok=True)
            self.writer = self._module.SummaryWriter(self.directory)
        for step, values in scalars(chunk):
            for tag, value in values.items():
                self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class WandbLogger(Listener):
    """Logs every chunk's scalars (:func:`scalars`) to a Weights & Biases run (started at
    the first chunk), with ``env_steps`` as each scalar's x axis.

    Args:
      directory: where W&B keeps its files (its ``wandb/`` folder goes there).
      config: the run's config record (shown with the run).
      mode: W&B's mode; by default ``$WANDB_MODE``, else ``"offline"`` (no network
        needed; ``wandb sync`` uploads it later).
      project: the W&B project (``$WANDB_PROJECT``, else ``"jaxrl_par"``).

    Raises:
      ImportError: wandb is not installed (naming the extra that installs it).
    """

    def __init__(self, directory: str, config: dict | None = None, mode: str | None = None,
                 project: str | None = None):
        self._module = _need("wandb", "wandb")
        self.directory, self.config = directory, config or {}
        self.mode = mode or os.environ.get("WANDB_MODE", "offline")
        self.project = project or os.environ.get("WANDB_PROJECT", "jaxrl_par")
        self.run = None

    def on_chunk(self, chunk: Chunk) -> None:
        if self.run is None:
            os.makedirs(self.directory, exist_ok=True)
            self.run = self._module.init(dir=self.directory, config=self.config,
                                         mode=self.mode, project=self.project)
            self.run.define_metric("env_steps")
            self.run.define_metric("*", step_metric="env_steps")
        for step, values in scalars(chunk):
            self.run.log({"env_steps": step, **values})

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()


def from_names(names: list[str], log_dir: str | None, config: dict | None = None
               ) -> list[Listener]:
    """The loggers the command line's ``--logger NAME`` options ask for: TensorBoard in
    ``<log_dir>/tensorboard``, W&B in ``<log_dir>`` (``.`` without a log dir).

    Raises:
      ValueError: an unknown name, or TensorBoard without a log dir.
      ImportError: a logger's package is not installed (naming the extra).
    """
    out: list[Listener] = []
    for name in dict.fromkeys(names):
        if name == "tensorboard":
            if not log_dir:
                raise ValueError("--logger tensorboard writes into the run's log dir: give "
                                 "--log-dir DIR")
            out.append(TensorBoardLogger(os.path.join(log_dir, "tensorboard")))
        elif name == "wandb":
            out.append(WandbLogger(log_dir or ".", config))
        else:
            raise ValueError(f"--logger {name}: give one of {', '.join(LOGGERS)}")
    return out
