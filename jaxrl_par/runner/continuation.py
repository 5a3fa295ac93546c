"""Continuing a run from its log dir: the checks made before anything compiles, and the
state (:mod:`jaxrl_par.runner.checkpoints`) and metrics read back after.

A run resumes with the seeds, config and sweep values it was written with; on another
device layout (one device, or a mesh of another number of data shards) its state is read
through one device's layout (:mod:`jaxrl_par.runner.layouts`).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxrl_par.algos.base import Algorithm
from jaxrl_par.runner import checkpoints, layouts, records, runs


class Saved(NamedTuple):
    """A run to continue.

    Attributes:
      path: its checkpoints' directory.
      step: the newest checkpoint whose meta record reads (updates done).
      meta: that checkpoint's meta record (``updates_done``, ``seeds``, ``data_shards``,
        ``config``, ``hparams``).
      lanes: the run's swept values, ``name -> [S]`` float32 ({} without a sweep).
      reshape: the :meth:`~jaxrl_par.runner.checkpoints.Checkpoints.restore` reshape from
        the saved layout to this run's, or None when they are the same.
    """

    path: str
    step: int
    meta: dict
    lanes: dict[str, np.ndarray]
    reshape: Callable | None

    @property
    def updates_done(self) -> int:
        """Updates done when the checkpoint was written."""
        return int(self.meta.get("updates_done", 0))


def _layout(data_shards: int | None) -> str:
    return ("one device (no mesh)" if data_shards is None
            else f"a mesh with {data_shards} data shard(s)")


def _relayout(path: str, saved: int | None, now: int | None, record: dict, keys: jax.Array,
              say: bool) -> Callable:
    """The checkpoint reshape that resumes a run saved on ``saved`` data shards on
    ``now`` (``None``: one device), through one device's layout. Data parallelism gives
    the one-device run's state, so that is exact; per-shard state (replay buffers) cannot
    be split or merged, so a warning says that every new shard starts from shard 0's.

    Raises:
      ValueError: the algorithm is not one of ``jaxrl_par.algos`` (its one-device layout
        is unknown), naming both layouts.
    """
    try:
        name, cfg = runs.config_from_record(record)
    except ValueError:
        raise ValueError(f"{path} was written on {_layout(saved)}, this run is on "
                         f"{_layout(now)}, and only jaxrl_par.algos' algorithms can change "
                         "layout: resume with the run's devices=...") from None
    what = f"resuming {path} (written on {_layout(saved)}) on {_layout(now)}"
    if say:
        print(f"jaxrl_par: {what}", file=sys.stderr)

    def warn(message: str) -> None:
        warnings.warn(f"{what}: {message}", stacklevel=6)  # at the caller of train

    return layouts.relayout(runs.one_device_shapes(name, cfg, keys), saved, warn)


def find(log_dir: str, algo: Algorithm, record: dict, seeds: list[int], keys: jax.Array,
         lanes: dict[str, np.ndarray], *, lanes_given: bool, data_shards: int | None,
         say: bool) -> Saved:
    """The run in ``log_dir`` to continue, checked against this one before anything
    compiles.

    Args:
      log_dir: the run's directory.
      algo: this call's algorithm; ``record`` its :func:`~jaxrl_par.runner.records.config_record`.
      seeds: this call's seeds; ``keys`` their PRNG keys.
      lanes: this call's swept values; ``lanes_given`` whether the caller gave them.
      data_shards: this call's layout (None: one device).
      say: print a change of layout (to stderr).

    Raises:
      checkpoints.Unreadable: ``log_dir`` holds no readable checkpoint (resuming is
        not a fresh start).
      ValueError: the run was written with other seeds, settings or sweep values, or on
        a layout this algorithm cannot change from.
    """
    path = os.path.join(log_dir, checkpoints.DIRECTORY)
    latest = checkpoints.Checkpoints(path).latest_meta()
    if latest is None:
        raise checkpoints.Unreadable(
            f"{log_dir} holds no checkpoint to resume: give the log dir of a run trained "
            "with --log-dir, or leave out --resume to start a fresh run")
    step, meta = latest
    records.check_resumable(path, meta, seeds, record, records.field_defaults(algo))
    lanes = records.resumed_lanes(path, meta, lanes, given=lanes_given)
    reshape = None
    if "data_shards" in meta and meta["data_shards"] != data_shards:
        reshape = _relayout(path, meta["data_shards"], data_shards, record, keys, say)
    return Saved(path, step, meta, lanes, reshape)


def restore(saved: Saved, template: Any, place: Callable[[Any], Any], log_dir: str,
            rewrite: bool) -> tuple[Any, int, dict[str, list[np.ndarray]]]:
    """``(state, updates_done, history)``: the saved state read into ``template``'s
    structure and placed with ``place``, and its logged metrics
    (:func:`~jaxrl_par.runner.records.read_history`; with ``rewrite``, ``metrics.jsonl``
    is cut back to the checkpoint's updates). A damaged checkpoint is reported in one line
    and the one before it is read (with ``rewrite``, the damaged one is moved aside)."""
    state, meta, done = checkpoints.Checkpoints(saved.path).restore(
        template, newest=saved.step, reshape=saved.reshape, set_aside=rewrite)
    history = records.read_history(os.path.join(log_dir, records.METRICS), done, rewrite)
    return place(state), done, history
