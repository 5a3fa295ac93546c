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

from jaxrl_par import algos, checkpoint
from jaxrl_par.algos.base import Algorithm


class LoadedRun(NamedTuple):
    """What :func:`load_run` returns.

    Attributes:
      name: the algorithm's name in ``jaxrl_par.algos.ALGORITHMS`` (``"ppo"``...).
      algo: the algorithm rebuilt from the recorded config (``axis_name=None``: one device).
      state: the training state of every seed, leaves ``[S, ...]``, as checkpointed.
      seeds: the run's seeds (``S`` of them).
      updates_done: updates finished when the checkpoint was written.
    """

    name: str
    algo: Algorithm
    state: Any
    seeds: list[int]
    updates_done: int


def config_from_record(record: dict) -> tuple[str, Any]:
    """``(algorithm name, Config)`` from the ``config`` record a checkpoint holds.

    Lists become tuples where the field's default is a tuple (JSON has no tuples);
    ``axis_name`` is set to ``None`` (the state is rebuilt for one device).

    Raises:
      ValueError: the record names no known algorithm, or fields its Config lacks.
    """
    class_path = record.get("config_class", "")
    module_name, _, class_name = class_path.rpartition(".")
    names = {module: name for name, (module, _) in algos.ALGORITHMS.items()}
    if module_name not in names:
        raise ValueError(f"config_class {class_path!r} is not a jaxrl_par algorithm's Config "
                         f"(known: {sorted(m + '.Config' for m in names)})")
    cls = getattr(importlib.import_module(module_name), class_name)
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
    return names[module_name], cls(**values)


def load_run(log_dir: str) -> LoadedRun:
    """The algorithm and the checkpointed state of the run in ``log_dir``.

    Raises:
      FileNotFoundError: ``log_dir`` holds no checkpoint.
      ValueError: the checkpoint has no config record (written before checkpoints kept
        one), or was written on a device mesh (its state has a data-shard axis).
    """
    from jaxrl_par.train import CHECKPOINT, seed_keys

    path = os.path.join(log_dir, CHECKPOINT)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist: give the log dir of a run trained "
                                "with --log-dir (log_dir=...)")
    meta = checkpoint.read_meta(path)
    if "config" not in meta:
        raise ValueError(f"{path} records no config (an older checkpoint): rebuild the "
                         "algorithm with its settings and use checkpoint.load(path, template)")
    name, cfg = config_from_record(meta["config"])
    algo = algos.get(name).make(cfg)
    keys, seeds = seed_keys(meta["seeds"])
    template = jax.jit(jax.vmap(algo.init))(keys)
    if any(not checkpoint.is_key(t) and saved[:1] + saved[2:] == t.shape
           and len(saved) == t.ndim + 1
           for saved, t in zip(checkpoint.leaf_shapes(path), jax.tree.leaves(template))):
        raise ValueError(f"{path} was written by a run on a device mesh (its state has a "
                         "data-shard axis): load it with jaxrl_par.parallel on the same mesh, "
                         "or evaluate in that run (jaxrl-par train ... --eval-envs N)")
    state, meta = checkpoint.load(path, template)
    return LoadedRun(name=name, algo=algo, state=state, seeds=seeds,
                     updates_done=int(meta["updates_done"]))
