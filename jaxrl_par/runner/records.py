"""The files of a run directory and the records they hold.

``train(..., log_dir=D)`` writes ``D/config.json`` (the config record, seeds, updates,
layout), ``D/metrics.jsonl`` (one row per update, every seed's value in a list),
``D/checkpoints/`` (orbax checkpoints of the state,
:mod:`jaxrl_par.runner.checkpoints`) and, with PBT, ``D/pbt.jsonl``. This
module names those files, makes and reads their records, and holds the checks that a
log dir may be trained into or resumed. It imports nothing of the runner above it, so
the training loop and the readers of finished runs (:mod:`jaxrl_par.runner.runs`) share it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxrl_par.algos import hyper
from jaxrl_par.algos.base import Algorithm

CHECKPOINTS = "checkpoints"  # a directory of orbax checkpoints
METRICS = "metrics.jsonl"
SECONDS = "seconds"  # metrics.jsonl: training seconds at each update (one value, all seeds)
PBT_LOG = "pbt.jsonl"
CONFIG = "config.json"

# Config fields that may differ between a run and its resumption: the data axis's name,
# which follows the device layout (a run can resume on another one).
RESUMABLE_CHANGES = frozenset({"axis_name"})
# Config fields that a resumed run may raise: a longer run continues the recorded one.
# Schedules (learning-rate annealing, epsilon decay, PER's beta) are functions of the
# config, so they are re-stretched over the new total: from the resumed update on, each
# follows the schedule of a run started with the new total (a linearly annealed
# learning rate steps up where the run resumes).
GROWABLE = frozenset({"total_timesteps"})


def jsonable(x: Any) -> Any:
    """``x`` with tuples as lists and anything but JSON scalars, lists and dicts as its
    ``repr``."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (int, float, str, bool)) or x is None:
        return x
    return repr(x)


def config_record(algo: Algorithm) -> dict:
    """The algorithm's config class and fields as JSON values (tuples become lists)."""
    cfg = algo.config
    fields = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else {}
    record = {"config_class": f"{type(cfg).__module__}.{type(cfg).__qualname__}", **fields}
    return json.loads(json.dumps(jsonable(record)))


def field_defaults(algo: Algorithm) -> dict:
    """Each config field's default as a JSON value like :func:`config_record`'s (for
    fields a saved record lacks)."""
    cfg = algo.config
    if not dataclasses.is_dataclass(cfg):
        return {}
    fields = {f.name: f.default for f in dataclasses.fields(cfg)
              if f.default is not dataclasses.MISSING}
    return json.loads(json.dumps(jsonable(fields)))


def check_resumable(path: str, meta: dict, seeds: list[int], record: dict,
                    defaults: dict | None = None) -> None:
    """Raises ``ValueError`` unless the checkpoint at ``path`` was written by a run with
    these seeds and config (checkpoints without a config record are not compared); a
    ``GROWABLE`` field may be larger now (a longer run continues the recorded one).

    A field that the saved record lacks (one added to the config class since) counts as
    unchanged while this run leaves it at its default ``defaults[field]``.
    """
    defaults = defaults or {}
    missing = object()
    if meta.get("seeds") != seeds:
        raise ValueError(f"{path} holds seeds {meta.get('seeds')}, this run asks for {seeds}: "
                         "resume with the same seeds, or give a new log dir")
    saved = meta.get("config")
    if saved is None:
        return
    changed = [f"{k}={saved.get(k)!r} there, {record.get(k)!r} now"
               for k in sorted(set(saved) | set(record))
               if k not in RESUMABLE_CHANGES and saved.get(k) != record.get(k)
               and not _grown(k, saved.get(k), record.get(k))
               and not (k not in saved and record.get(k) == defaults.get(k, missing))]
    if changed:
        config_json = os.path.join(os.path.dirname(path), CONFIG)
        raise ValueError(f"{path} was written with other settings ({'; '.join(changed)}): "
                         f"resume with the run's settings ({config_json}; the CLI takes "
                         f"them as --config {config_json}), or give a new log dir")


def _grown(field: str, before: Any, now: Any) -> bool:
    """Whether ``field`` went from ``before`` to a larger ``now`` and may (``GROWABLE``)."""
    return (field in GROWABLE and isinstance(before, int) and isinstance(now, int)
            and now > before)


def check_log_dir(log_dir: str | None, resume: bool) -> None:
    """Raises ``ValueError`` when ``resume`` has no log dir, or when a fresh run would
    overwrite a log dir that holds a run (a checkpoint). A log dir whose run was killed
    before its first checkpoint holds nothing to continue: a fresh run starts there anew
    (its ``metrics.jsonl`` rows, which a resume would drop too, are rewritten)."""
    if resume and not log_dir:
        raise ValueError("resume=True needs the log_dir of the run to continue "
                         "(--resume with --log-dir DIR)")
    if not log_dir or resume:
        return
    saved = os.path.join(log_dir, CHECKPOINTS)
    if os.path.isdir(saved) and any(d.isdigit() for d in os.listdir(saved)):
        raise ValueError(f"log dir {log_dir} already holds a run ({CHECKPOINTS}/, {METRICS}); "
                         "continue it with resume=True (--resume), or give another log dir "
                         "(or delete this one) to start anew")


def lanes_record(lanes: Mapping[str, np.ndarray]) -> dict:
    """``{"hparams": {name: [S] floats}}`` for a run's records ({} without a sweep)."""
    return {"hparams": hyper.to_record(lanes)} if lanes else {}


def resumed_lanes(path: str, meta: dict, lanes: dict[str, np.ndarray], given: bool
                  ) -> dict[str, np.ndarray]:
    """The swept values of the run saved at ``path``: its own, which ``lanes`` (the
    values this call asks for, when ``given``) must equal."""
    saved = hyper.from_record(meta.get("hparams"))
    if given and (saved.keys() != lanes.keys()
                  or any(not np.array_equal(saved[k], lanes[k]) for k in saved)):
        raise ValueError(f"{path} was trained with hparams {hyper.to_record(saved)}, this "
                         f"run asks for {hyper.to_record(lanes)}: resume with the run's values "
                         "(or leave hparams out to take them), or give a new log dir")
    return saved or lanes


def write_config(log_dir: str, record: dict) -> None:
    """Writes ``record`` (the config record, seeds, updates, layout, sweep) as
    ``log_dir/config.json``."""
    with open(os.path.join(log_dir, CONFIG), "w") as f:
        json.dump(record, f, indent=1)


def append_rows(path: str, rows: Mapping[str, np.ndarray], first_update: int,
                steps_per_update: int, seconds: np.ndarray | None = None) -> None:
    """Appends one ``metrics.jsonl`` line per update of ``rows`` (``name -> [S, n]``):
    updates ``first_update + 1 .. first_update + n``, their env steps, the run's training
    seconds at each (``seconds [n]``, one value for all seeds, if given), and every seed's
    value of each metric (null for NaN or inf)."""
    names = sorted(rows)
    with open(path, "a") as f:
        for u in range(next(iter(rows.values())).shape[1]):
            rec = {"update": first_update + u + 1,
                   "env_steps": (first_update + u + 1) * steps_per_update}
            if seconds is not None:
                rec[SECONDS] = round(float(seconds[u]), 4)
            for k in names:
                rec[k] = [None if not np.isfinite(x) else float(x) for x in rows[k][:, u]]
            f.write(json.dumps(rec) + "\n")


def metrics_rows(path: str, n_updates: int | None = None) -> list[tuple[str, dict]]:
    """``(line, record)`` of each row of a ``metrics.jsonl`` (one row per update, every
    seed's value in a list), up to update ``n_updates`` (all if None). It stops at a line
    cut short (a process killed while writing it: rows are appended before the checkpoint
    is saved, so such a line is past the checkpoint's updates)."""
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                break
            if n_updates is not None and rec["update"] > n_updates:
                break
            rows.append((line, rec))
    return rows


def last_seconds(path: str) -> float:
    """The training seconds of the last row of the ``metrics.jsonl`` at ``path`` (0 when
    it has no rows, or rows without seconds)."""
    rows = metrics_rows(path)
    return float(rows[-1][1].get(SECONDS, 0.0)) if rows else 0.0


def metrics_columns(rows: list[tuple[str, dict]]) -> dict[str, np.ndarray]:
    """``{metric: [S, U] float32}`` from :func:`metrics_rows` (NaN where a row has null,
    e.g. no episode finished in that update)."""
    names = list(dict.fromkeys(k for _, rec in rows for k in rec
                               if k not in ("update", "env_steps", SECONDS)))
    lanes = max((len(rec[k]) for _, rec in rows for k in names if k in rec), default=0)
    # A metric some rows lack (one that began on a resume, e.g. greedy_return) is NaN there.
    return {k: np.asarray([[np.nan if x is None else x for x in rec[k]] if k in rec
                           else [np.nan] * lanes for _, rec in rows], np.float32).T
            for k in names}


def read_history(path: str, n_updates: int, rewrite: bool = True
                 ) -> dict[str, list[np.ndarray]]:
    """The first ``n_updates`` rows of the ``metrics.jsonl`` at ``path`` as one ``[S, U]``
    array per metric (in a list, to which a run appends its chunks); with ``rewrite``, the
    file is cut to those rows (dropping the rows written after the checkpoint)."""
    if not os.path.exists(path):
        return {}
    rows = metrics_rows(path, n_updates)
    if rewrite:
        with open(path, "w") as f:
            f.writelines(line for line, _ in rows)
    return {k: [v] for k, v in metrics_columns(rows).items()}


def start_metrics(log_dir: str) -> None:
    """Creates ``log_dir`` if needed and an empty ``metrics.jsonl`` in it (a fresh run)."""
    os.makedirs(log_dir, exist_ok=True)
    with open(os.path.join(log_dir, METRICS), "w"):
        pass
