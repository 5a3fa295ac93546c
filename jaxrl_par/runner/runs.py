"""Reading back a run that ``train(..., log_dir=D)`` wrote: its algorithm and trained state.

The checkpoint records the config class and every field, the seeds and the updates done,
so a log dir is enough to rebuild the ``Algorithm`` and the ``[S, ...]`` state, e.g. to
evaluate the policy (``jaxrl-par eval D``) or to use its parameters elsewhere::

    run = load_run("runs/breakout")
    greedy_returns(run.algo, run.state)        # [S]
    run.state.params                           # the trained parameters, [S, ...] leaves
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxrl_par import algos, envs
from jaxrl_par.algos import hyper
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.runner import checkpoints, memory
from jaxrl_par.runner.layouts import one_device_leaf
from jaxrl_par.runner.precision import float32
from jaxrl_par.runner.programs import seed_keys
from jaxrl_par.runner.records import (
    CHECKPOINTS,
    METRICS,
    metrics_columns,
    metrics_rows,
)


class LoadedRun(NamedTuple):
    """What :func:`load_run` returns.

    Attributes:
      name: the algorithm's name in ``jaxrl_par.algos.ALGORITHMS`` (``"ppo"``...).
      algo: the algorithm rebuilt from the recorded config (``axis_name=None``: one device).
      state: the training state of every seed, leaves ``[S, ...]`` (one device's layout).
      seeds: the run's seeds (``S`` of them).
      updates_done: updates finished when the checkpoint was written.
      data_shards: the data-parallel devices the run was trained on (1: one device).
      hparams: a sweep's values, ``name -> [S]`` float32 per lane ({} for no sweep).
    """

    name: str
    algo: Algorithm
    state: Any
    seeds: list[int]
    updates_done: int
    data_shards: int
    hparams: dict = {}  # noqa: RUF012 (a NamedTuple default, never mutated)


def config_class(record: dict) -> tuple[str, type]:
    """``(algorithm name, Config class)`` that a config record names in its
    ``config_class`` field.

    Raises:
      ValueError: the record names no jaxrl_par algorithm's Config.
    """
    class_path = record.get("config_class", "")
    module_name, _, class_name = class_path.rpartition(".")
    names = {module: name for name, (module, _) in algos.ALGORITHMS.items()}
    if module_name not in names:
        raise ValueError(f"config_class {class_path!r} is not a jaxrl_par algorithm's Config "
                         f"(known: {sorted(m + '.Config' for m in names)})")
    return names[module_name], getattr(importlib.import_module(module_name), class_name)


def config_from_record(record: dict) -> tuple[str, Any]:
    """``(algorithm name, Config)`` from the ``config`` record a checkpoint holds.

    Lists become tuples where the field's default is a tuple (JSON has no tuples);
    ``axis_name`` is set to ``None`` (the state is rebuilt for one device). A field the
    record lacks takes its default.

    Raises:
      ValueError: the record names no known algorithm, or fields its Config lacks.
    """
    name, cls = config_class(record)
    class_path = record["config_class"]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {k: v for k, v in record.items() if k != "config_class"}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"the run's config has fields {unknown} that {class_path} lacks: it "
                         "was written by another version of jaxrl_par")
    for k, v in values.items():
        if isinstance(fields[k].default, tuple) and isinstance(v, list):
            values[k] = tuple(v)
    if "axis_name" in fields:
        values["axis_name"] = None
    return name, cls(**values)


def read_metrics(log_dir: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(env_steps [U], {metric: [S, U]})``: the learning curves a run logged to
    ``log_dir/metrics.jsonl`` (a CLI run's ``--log-dir`` too), e.g. to plot
    ``env_steps`` against ``metrics["episode_return"].T``. Reads only; a run still
    training may be read as it goes.

    Raises:
      FileNotFoundError: ``log_dir`` holds no ``metrics.jsonl``.
    """
    path = os.path.join(log_dir, METRICS)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist: give the log dir of a run trained "
                                "with --log-dir (log_dir=...)")
    rows = metrics_rows(path)
    env_steps = np.asarray([rec["env_steps"] for _, rec in rows], np.int64)
    return env_steps, metrics_columns(rows)


def one_device_shapes(name: str, cfg: Any, keys: jax.Array) -> list[tuple[int, ...]]:
    """Leaf shapes of algorithm ``name``'s ``[S, ...]`` state for ``cfg``, a one-device
    config as :func:`config_from_record` gives (PRNG keys as their key data), computed
    abstractly: nothing runs or compiles."""
    algo = algos.get(name).make(cfg)

    def data(state):
        return [jax.random.key_data(x) if checkpoints.is_key(x) else x
                for x in jax.tree.leaves(state)]

    return [tuple(x.shape) for x in jax.eval_shape(lambda k: data(jax.vmap(algo.init)(k)), keys)]


@float32
def load_run(log_dir: str) -> LoadedRun:
    """The algorithm and the state of the newest readable checkpoint of the run in
    ``log_dir`` (a damaged one is reported in one line and the one before it read).

    A run trained on a device mesh (``--devices``) is read as one device's state (see
    :func:`~jaxrl_par.runner.layouts.one_device_leaf`): for PPO that is the one-device
    run's state (the envs of all shards, parameters from shard 0, which equal every
    shard's); for DQN and Ape-X, whose replay is per shard, the buffer is shard 0's.
    Parameters and evaluation are exact; resuming a mesh run goes through
    ``train(..., devices=D, resume=True)``.

    Raises:
      FileNotFoundError: ``log_dir`` holds no checkpoint.
      ValueError: no checkpoint could be read, the checkpoint has no config record, or
        its arrays do not fit the algorithm the record describes.
    """
    path = os.path.join(log_dir, CHECKPOINTS)
    store = checkpoints.Checkpoints(path)
    latest = store.latest_meta()
    if latest is None:
        raise FileNotFoundError(f"{path} holds no checkpoint: give the log dir of a run "
                                "trained with --log-dir (log_dir=...)")
    step, meta = latest
    if "config" not in meta:
        raise ValueError(f"{path} records no config: rebuild the algorithm with its "
                         "settings and use checkpoints.Checkpoints(path).restore(template)")
    record_env = meta["config"].get("env")
    if isinstance(record_env, str):  # a user's own env: its module registers it again
        envs.import_source(record_env, meta)
    name, cfg = config_from_record(meta["config"])
    algo = algos.get(name).make(cfg)
    keys, seeds = seed_keys(meta["seeds"])
    # Shapes only: the state is allocated once, as it is read (a large replay would
    # otherwise be built by init and then replaced), after checking it fits.
    template = jax.eval_shape(jax.vmap(algo.init), keys)
    memory.check_fits(template, [jax.devices()[0]], f"the state saved in {path}",
                      fixes="Load it where more memory is free (a larger machine, or fewer "
                            "other jobs here)")
    shards = set()  # D of every [S, D, ...] leaf read

    def reshape(i: int, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        if x.ndim == len(shape) + 1:
            shards.add(x.shape[1])
        return one_device_leaf(x, shape)

    state, meta, _ = store.restore(template, newest=step, reshape=reshape)
    return LoadedRun(name=name, algo=algo, state=state, seeds=seeds,
                     updates_done=int(meta["updates_done"]),
                     data_shards=max(shards) if shards else 1,
                     hparams=hyper.from_record(meta.get("hparams")))
