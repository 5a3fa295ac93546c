"""Paradigms side by side on one environment: :func:`compare` and ``jaxrl-par compare``.

Each entry is an algorithm and the way its work is spread (its runtime), written
``ALGO`` or ``ALGO@RUNTIME``:

* ``ppo``, ``dqn``, ``a3c``, ...: the algorithm's own update as one compiled program
  (for A3C and Gorila: the workers' pushes applied round-robin inside it);
* ``a3c@threads``, ``gorila@threads``: the workers as host threads pushing to the
  parameter server as they finish (:mod:`jaxrl_par.parallel.async_workers`);
* ``apex@actor-learner``, ``impala@actor-learner``: actors and learner on two devices at
  once (:mod:`jaxrl_par.parallel.actor_learner`);
* ``ppo@devices=N`` (any algorithm with an ``axis_name``): data parallel over a mesh of
  ``N`` devices (:mod:`jaxrl_par.parallel`);
* any of these followed by Config settings of the entry's own, ``:FIELD=VALUE`` each:
  ``dqn:prioritized=true``, ``ppo@devices=2:num_envs=8``, so that one algorithm can be
  compared with itself under other settings.

Every entry trains the same seeds with :func:`jaxrl_par.runner.training.train` and is reported in
one row: its final return (as ``train`` reports it), env steps/s, compile and training
seconds, and, for a ``target`` return, the env steps and the wall-clock seconds it took
to reach it: sample efficiency and speed apart. The wall-clock curve is measured at the
end of every chunk (``TrainResult.chunk_seconds``); within a chunk its time is spread
evenly over its updates.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxrl_par import algos
from jaxrl_par.algos.config import apply_overrides
from jaxrl_par.runner import interrupt

RUNTIMES = ("program", "threads", "actor-learner", "devices")

# How each algorithm parallelises its work, in the words of the literature.
PARADIGMS = {
    "dqn": "serial replay learner",
    "sac": "serial replay learner",
    "ddpg": "serial replay learner",
    "td3": "serial replay learner",
    "ppo": "synchronous vectorised actors",
    "a2c": "synchronous vectorised actors",
    "a3c": "asynchronous workers, parameter server",
    "gorila": "asynchronous workers, parameter server",
    "impala": "actor-learner, V-trace",
    "apex": "distributed prioritized replay",
}

_RUNTIME_WORDS = {
    "program": "one program",
    "threads": "host threads on {devices}",
    "actor-learner": "actors and learner on {devices}",
    "devices": "data parallel over {devices}",
}

# The Config field that shows an algorithm can take each runtime.
_RUNTIME_FIELD = {"threads": "num_workers", "actor-learner": "pipeline", "devices": "axis_name"}


@dataclasses.dataclass(frozen=True)
class Entry:
    """One row of a comparison: ``algo`` run with ``runtime`` (on ``devices`` devices
    for ``"devices"``), with its own Config ``settings`` (``"field=value"`` strings)
    applied last."""

    algo: str
    runtime: str = "program"
    devices: int | None = None
    settings: tuple[str, ...] = ()

    def __post_init__(self):
        if self.algo not in algos.ALGORITHMS:
            raise ValueError(f"unknown algorithm {self.algo!r} in a comparison; available: "
                             f"{', '.join(sorted(algos.ALGORITHMS))}")
        if self.runtime not in RUNTIMES:
            raise ValueError(f"{self.algo}@{self.runtime}: unknown runtime; write ALGO, "
                             "ALGO@threads, ALGO@actor-learner or ALGO@devices=N")
        if (self.runtime == "devices") != (self.devices is not None):
            raise ValueError(f"{self.algo}: give devices=N with the 'devices' runtime, and "
                             "only with it")
        if self.devices is not None and self.devices < 1:
            raise ValueError(f"{self.name}: the device count must be >= 1")
        for item in self.settings:
            if "=" not in item or not item.partition("=")[0].strip():
                raise ValueError(f"{self.name}: {item!r} is not FIELD=VALUE (an entry's own "
                                 "settings: ALGO:FIELD=VALUE:FIELD=VALUE)")

    @classmethod
    def parse(cls, text: str) -> Entry:
        """``"ppo"``, ``"a3c@threads"``, ``"apex@actor-learner"``, ``"ppo@devices=2"``,
        each optionally followed by settings of its own: ``"dqn:prioritized=true"``,
        ``"ppo@devices=2:num_envs=8:learning_rate=1e-3"``."""
        head, *settings = text.strip().split(":")
        algo, _, runtime = head.partition("@")
        runtime = runtime.strip() or "program"
        devices = None
        if runtime.startswith("devices"):
            _, sep, count = runtime.partition("=")
            try:
                devices = int(count) if sep else None
            except ValueError:
                devices = None
            if devices is None:
                raise ValueError(f"{text!r}: write ALGO@devices=N with N a number of devices")
            runtime = "devices"
        return cls(algo.strip(), runtime, devices, tuple(s.strip() for s in settings))

    @property
    def name(self) -> str:
        if self.runtime == "program":
            base = self.algo
        elif self.runtime == "devices":
            base = f"{self.algo}@devices={self.devices}"
        else:
            base = f"{self.algo}@{self.runtime}"
        return ":".join((base, *self.settings))

    def paradigm(self, devices: int | None = None) -> str:
        """``"asynchronous workers, parameter server (host threads on 2 devices)"``: how
        the entry parallelises, run on ``devices`` devices (default
        :attr:`devices_needed`)."""
        n = self.devices_needed if devices is None else devices
        runtime = _RUNTIME_WORDS[self.runtime].format(
            devices=f"{n} device{'s' if n != 1 else ''}")
        return f"{PARADIGMS[self.algo]} ({runtime})"

    @property
    def devices_needed(self) -> int:
        """Local devices the entry asks for: 2 for actor-learner, N for devices=N, else
        1 (threads spread over as many as there are)."""
        return {"actor-learner": 2, "devices": self.devices or 1}.get(self.runtime, 1)

    def devices_used(self) -> int:
        """Local devices the entry runs on here (threads: all; actor-learner: two, or
        one shared when there is only one)."""
        import jax

        have = jax.local_device_count()
        if self.runtime == "threads":
            return have
        return min(self.devices_needed, have) if self.runtime == "actor-learner" \
            else self.devices_needed


def runtimes_of(algo: str) -> list[str]:
    """The entry forms ``algo`` runs with: ``["a3c", "a3c@threads"]``,
    ``["ppo", "ppo@devices=N"]``."""
    fields = {f.name for f in dataclasses.fields(algos.get(algo).Config)}
    return [algo] + [f"{algo}@{r}" + ("=N" if r == "devices" else "")
                     for r, field in _RUNTIME_FIELD.items() if field in fields]


def default_entries(env_id: str) -> list[Entry]:
    """Every algorithm that trains on ``env_id``'s actions, each as one program; for a
    host env (``"gymnasium:<id>"``) the runtimes that can step it."""
    from jaxrl_par import envs
    from jaxrl_par.envs import host

    if host.is_host(env_id):
        discrete = host.spec(env_id).discrete
        names = [("a3c", "threads"), ("gorila", "threads"), ("impala", "actor-learner")]
        return [Entry(a, r) for a, r in names if a in algos.for_actions(discrete)]
    envs.check_env_id(env_id)
    return [Entry(a) for a in algos.for_actions(envs.make(env_id, 1).discrete)]


def split_overrides(overrides: Sequence[str], entries: Sequence[Entry]
                    ) -> dict[str, list[str]]:
    """``{algo: ["field=value", ...]}`` from ``FIELD=VALUE`` (every entry whose Config
    has the field) and ``ALGO.FIELD=VALUE`` (that algorithm's entries) strings. A field
    that no entry's Config has, or an algorithm not compared, is an error."""
    names = list(dict.fromkeys(e.algo for e in entries))
    fields = {a: {f.name for f in dataclasses.fields(algos.get(a).Config)} for a in names}
    out: dict[str, list[str]] = {a: [] for a in names}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r}: write FIELD=VALUE or ALGO.FIELD=VALUE")
        owner, dot, field = key.strip().rpartition(".")
        if dot:
            if owner not in out:
                raise ValueError(f"--set {item!r}: {owner!r} is not compared here (entries: "
                                 f"{', '.join(e.name for e in entries)})")
            out[owner].append(f"{field}={value}")  # apply_overrides checks the field
            continue
        takers = [a for a in names if field in fields[a]]
        if not takers:
            raise ValueError(f"--set {item!r}: no compared algorithm has a field {field!r}; "
                             "write ALGO.FIELD=VALUE for one algorithm")
        for a in takers:
            out[a].append(f"{field}={value}")
    return out


def entry_config(entry: Entry, env_id: str, total_timesteps: int | None = None,
                 overrides: Sequence[str] = ()):
    """The validated Config that ``entry`` trains with: the algorithm's defaults, then
    ``env``, ``total_timesteps`` (if given), ``overrides`` and the entry's own settings,
    then what the runtime needs (``pipeline=True``; ``axis_name`` for a mesh)."""
    from jaxrl_par import axes

    cfg_cls = algos.get(entry.algo).Config
    field_names = {f.name for f in dataclasses.fields(cfg_cls)}
    if entry.runtime != "program" and _RUNTIME_FIELD[entry.runtime] not in field_names:
        able = algos.with_config_field(_RUNTIME_FIELD[entry.runtime])
        raise ValueError(f"{entry.name}: {entry.algo} has no {entry.runtime} runtime; it "
                         f"runs with {', '.join(able)}")
    sets = [f"env={env_id}", *([f"total_timesteps={total_timesteps}"]
                               if total_timesteps is not None else []), *overrides,
            *entry.settings]
    cfg = apply_overrides(cfg_cls(), sets)
    if entry.runtime == "actor-learner":
        cfg = dataclasses.replace(cfg, pipeline=True)
    if entry.runtime == "devices" and (entry.devices or 1) > 1:
        cfg = dataclasses.replace(cfg, axis_name=axes.DATA)
    return cfg


def update_seconds(result) -> np.ndarray:
    """``[U]`` wall seconds of training at the end of each update of ``result`` (a
    :class:`~jaxrl_par.runner.training.TrainResult`): measured at chunk ends, interpolated within
    chunks; NaN for updates a resumed run did before this call."""
    n = len(result.env_steps)
    first = n - result.updates_run  # updates a resumed run had done before this call
    out = np.full(n, np.nan)
    if result.updates_run:
        out[first:] = np.interp(np.arange(first, n) + 1.0,
                                np.concatenate([[first], result.chunk_ends]),
                                np.concatenate([[0.0], result.chunk_seconds]))
    return out


@dataclasses.dataclass
class Row:
    """One entry's outcome (``to_record`` gives it as JSON)."""

    entry: Entry
    env: str
    seeds: list[int]
    devices: int
    env_steps: int
    final_returns: list[float | None]
    steps_per_second: float
    compile_seconds: float
    train_seconds: float
    steps_to_target: int | None = None
    seconds_to_target: float | None = None
    greedy_returns: list[float] | None = None
    lag: dict[str, float] = dataclasses.field(default_factory=dict)
    curve: dict[str, list] = dataclasses.field(default_factory=dict)
    interrupted: bool = False
    stop_signal: int | None = None
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    reused: bool = False
    speed_runs: list[float] = dataclasses.field(default_factory=list)

    @property
    def final_return(self) -> float | None:
        vals = [x for x in self.final_returns if x is not None]
        return float(np.mean(vals)) if vals else None

    @property
    def final_return_std(self) -> float | None:
        vals = [x for x in self.final_returns if x is not None]
        return float(np.std(vals)) if vals else None

    def to_record(self) -> dict[str, Any]:
        out = {
            "entry": self.entry.name, "algo": self.entry.algo, "runtime": self.entry.runtime,
            "devices": self.devices, "paradigm": self.entry.paradigm(self.devices),
            "env": self.env, "seeds": self.seeds, "env_steps": self.env_steps,
            "final_return": self.final_return, "final_return_std": self.final_return_std,
            "final_returns": self.final_returns,
            "steps_per_second": self.steps_per_second,
            "compile_seconds": self.compile_seconds, "train_seconds": self.train_seconds,
            "steps_to_target": self.steps_to_target,
            "seconds_to_target": self.seconds_to_target, **self.lag,
            "speed_runs": self.speed_runs or [self.steps_per_second],
            "config": self.config, "curve": self.curve,
        }
        if self.greedy_returns is not None:
            out["greedy_return"] = float(np.mean(self.greedy_returns))
            out["greedy_returns"] = self.greedy_returns
        if self.interrupted:
            out["interrupted"] = True
        return out

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Row:
        """The row that :meth:`to_record` wrote (marked ``reused``)."""
        lag = {k: record[k] for k in ("mean_staleness", "mean_policy_lag") if k in record}
        return cls(entry=Entry.parse(record["entry"]), env=record["env"],
                   seeds=list(record["seeds"]), devices=record["devices"],
                   env_steps=record["env_steps"], final_returns=record["final_returns"],
                   steps_per_second=record["steps_per_second"],
                   compile_seconds=record["compile_seconds"],
                   train_seconds=record["train_seconds"],
                   steps_to_target=record["steps_to_target"],
                   seconds_to_target=record["seconds_to_target"],
                   greedy_returns=record.get("greedy_returns"), lag=lag,
                   curve=record["curve"], config=record.get("config", {}), reused=True,
                   speed_runs=list(record.get("speed_runs", [record["steps_per_second"]])))


def row_of(entry: Entry, env_id: str, result, target: float | None = None,
           greedy: np.ndarray | None = None, devices: int | None = None,
           config: dict[str, Any] | None = None, curve_points: int = 200) -> Row:
    """The :class:`Row` of ``entry`` from its :class:`~jaxrl_par.runner.training.TrainResult`
    (trained on ``devices`` devices; default :attr:`Entry.devices_needed`)."""
    per_seed = result.final_returns()
    env_steps = np.asarray(result.env_steps)
    trailing = result.trailing_returns()
    mean = trailing.mean(0)  # NaN until every seed has finished an episode
    seconds = update_seconds(result)
    steps_to = seconds_to = None
    if target is not None and trailing.size:
        reached = np.flatnonzero(mean >= target)
        if reached.size:
            u = int(reached[0])
            steps_to = int(env_steps[u])
            seconds_to = None if np.isnan(seconds[u]) else float(seconds[u])
    lag = {}
    for name, key in (("staleness", "mean_staleness"), ("policy_lag", "mean_policy_lag")):
        if name in result.metrics and result.metrics[name].size:
            lag[key] = float(np.mean(result.metrics[name]))
    picks = np.unique(np.linspace(0, len(env_steps) - 1, min(curve_points, len(env_steps)))
                      .round().astype(int)) if len(env_steps) else np.zeros(0, int)
    curve = {"env_steps": [int(x) for x in env_steps[picks]],
             "seconds": [None if np.isnan(x) else round(float(x), 4) for x in seconds[picks]],
             "return": [None if np.isnan(x) else float(x) for x in mean[picks]]}
    evaluated = result.metrics.get("greedy_return")
    if evaluated is not None:  # train(..., eval_envs=...): the points evaluated
        points = np.flatnonzero(~np.isnan(evaluated).any(0))
        curve["greedy"] = {
            "env_steps": [int(env_steps[u]) for u in points],
            "seconds": [None if np.isnan(seconds[u]) else round(float(seconds[u]), 4)
                        for u in points],
            "return": [float(evaluated[:, u].mean()) for u in points]}
    return Row(
        entry=entry, env=env_id, seeds=list(result.seeds),
        devices=entry.devices_needed if devices is None else devices,
        env_steps=int(env_steps[-1]) if len(env_steps) else 0,
        final_returns=[None if np.isnan(x) else float(x) for x in per_seed],
        steps_per_second=float(result.steps_per_second),
        compile_seconds=float(result.compile_seconds),
        train_seconds=float(result.train_seconds),
        steps_to_target=steps_to, seconds_to_target=seconds_to,
        greedy_returns=None if greedy is None else [float(x) for x in greedy],
        lag=lag, curve=curve, interrupted=bool(result.interrupted),
        stop_signal=result.stop_signal, config=config or {})


def check_devices(entries: Sequence[Entry]) -> None:
    """``ValueError`` naming the fix when an entry needs more local devices than exist
    (on CPU: ``--xla_force_host_platform_device_count``, which the CLI sets itself)."""
    import jax

    have = jax.local_device_count()
    for e in entries:
        if e.runtime == "devices" and e.devices_needed > have:
            raise ValueError(
                f"{e.name} needs {e.devices_needed} devices and there are {have}; on CPU "
                f"set XLA_FLAGS=--xla_force_host_platform_device_count={e.devices_needed} "
                "before importing jax (jaxrl-par compare does it), or compare fewer devices")


def compare(entries: Sequence[Entry | str], env_id: str, seeds: Sequence[int] = (0,), *,
            total_timesteps: int | None = None, overrides: Sequence[str] = (),
            target: float | None = None, eval_envs: int = 0, eval_every: int | None = None,
            num_chunks: int = 20,
            progress: bool = True, repeats: int = 1,
            on_row: Callable[[Row], None] | None = None,
            done: Sequence[dict[str, Any]] = ()) -> list[Row]:
    """Trains every entry on ``env_id`` at the same seeds and returns one :class:`Row`
    each, in order.

    Every entry's Config is built (and validated) before the first one compiles, so a
    bad field or an entry that cannot run stops the comparison at once.

    Args:
      entries: :class:`Entry` or strings (``"a3c@threads"``; see the module docstring).
      env_id: the environment every entry trains on.
      seeds: trained as one vmapped batch in every entry.
      total_timesteps: env steps per seed for every entry (default: each algorithm's
        own default, so the budgets may differ; the rows give each).
      overrides: ``FIELD=VALUE`` for every entry with the field, ``ALGO.FIELD=VALUE``
        for one algorithm's entries (:func:`split_overrides`).
      target: a return; each row then gives the env steps and the training seconds at
        the first update where the seeds' mean trailing return
        (``TrainResult.trailing_returns``) reached it, or None.
      eval_envs: if > 0, each row also gives the greedy return over this many episodes
        per seed.
      eval_every: if given, every entry is also evaluated greedily during training,
        after every ``eval_every``-th chunk (``train(..., eval_envs=...)``, with
        ``eval_envs`` episodes, 8 if 0), and each row's curve holds the greedy returns
        (``curve["greedy"]``: env steps, seconds and the seeds' mean at each point).
      num_chunks: chunks per entry: the wall-clock curve's resolution.
      progress: a line per entry and ``train``'s progress bar.
      repeats: train every entry this many times, the entries alternating (each
        repeat after the first reuses its compiled programs): a row's
        ``steps_per_second`` is then the median of its runs' (``speed_runs``); its
        returns, curve and seconds to the target are the first run's.
      on_row: called with each row as it finishes, and again as each later repeat
        updates its speed (e.g. to save results as they come).
      done: rows finished before (:meth:`Row.to_record`, e.g. read back from a file
        that ``on_row`` wrote): an entry whose row is here, with the same env, seeds and
        config, is not trained again (its row is :meth:`Row.from_record`); one with
        other settings is an error naming them. Interrupted rows are trained again.

    A Ctrl-C or SIGTERM during an entry's training stops after its chunk (as
    :func:`~jaxrl_par.runner.training.train` does); that row is marked ``interrupted`` and no
    later entry runs.
    """
    from jaxrl_par.runner.evaluation import greedy_returns
    from jaxrl_par.runner.records import config_record
    from jaxrl_par.runner.training import train

    entries = [Entry.parse(e) if isinstance(e, str) else e for e in entries]
    if not entries:
        raise ValueError("nothing to compare: give at least one entry, e.g. ppo or a3c@threads")
    names = [e.name for e in entries]
    if len(set(names)) < len(names):
        raise ValueError(f"an entry is given twice: {names}")
    if eval_envs < 0:
        raise ValueError(f"eval_envs={eval_envs}: give >= 1 episodes per seed, or 0")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r}: give the number of runs of each entry, >= 1")
    during: dict[str, int] = {}
    if eval_every is not None:
        if eval_every < 1:
            raise ValueError(f"eval_every={eval_every}: give a number of chunks >= 1")
        eval_envs = eval_envs or 8
        during = {"eval_envs": eval_envs, "eval_every": eval_every}
    per_algo = split_overrides(overrides, entries)
    made = []
    for e in entries:  # every entry checked before the first compiles
        try:
            cfg = entry_config(e, env_id, total_timesteps, per_algo[e.algo])
            made.append(algos.get(e.algo).make(cfg))
        except ValueError as err:
            message = str(err)
            raise ValueError(message if message.startswith(e.name)
                             else f"{e.name}: {message}") from None
    records = [config_record(algo) for algo in made]
    earlier = {d["entry"]: d for d in done if not d.get("interrupted")}
    for entry, record in zip(entries, records, strict=True):
        if entry.name in earlier:
            _check_same(earlier[entry.name], env_id, list(seeds), record)
    check_devices([e for e in entries if e.name not in earlier])
    rows: list[Row] = []
    for i, (entry, algo, record) in enumerate(zip(entries, made, records, strict=True)):
        interrupt.raise_pending()  # a stop Python lost since the last entry's compile
        if entry.name in earlier:
            row = Row.from_record(earlier[entry.name])
            if progress:
                print(f"jaxrl_par: [{i + 1}/{len(entries)}] {entry.name}: finished before, "
                      "its row is reused", file=sys.stderr, flush=True)
            rows.append(row)
            if on_row is not None:
                on_row(row)
            continue
        kw = _runtime_kwargs(entry)
        if progress:
            print(f"jaxrl_par: [{i + 1}/{len(entries)}] {entry.name}: "
                  f"{entry.paradigm(entry.devices_used())}, "
                  f"{algo.num_updates * algo.env_steps_per_update:,} env steps x "
                  f"{len(seeds)} seed(s)", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            result = train(algo, list(seeds), num_chunks=num_chunks, progress=progress,
                           **kw, **during)
        except FloatingPointError as e:  # a NaN loss: say whose
            raise FloatingPointError(f"{entry.name}: {e}") from None
        greedy = None
        last = result.metrics.get("greedy_return")
        if last is not None and last.size and not np.isnan(last[:, -1]).any():
            greedy = last[:, -1]  # the evaluation after the last chunk: the final state's
        elif eval_envs and not result.interrupted:
            state = result.state
            if entry.runtime == "devices":
                from jaxrl_par import parallel

                state = parallel.unreplicate(parallel.to_host(state))
            greedy = greedy_returns(algo, state, num_envs=eval_envs)
        row = row_of(entry, env_id, result, target, greedy, entry.devices_used(), record)
        if progress:
            print(f"jaxrl_par: {entry.name} done in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr, flush=True)
        row.speed_runs = [row.steps_per_second]
        rows.append(row)
        if on_row is not None:
            on_row(row)
        if result.interrupted:
            return rows
    runtime_kw = {e.name: _runtime_kwargs(e) for e in entries}
    for r in range(1, repeats):  # the speed again, entries alternating
        for entry, algo, row in zip(entries, made, rows, strict=True):
            interrupt.raise_pending()
            if row.reused:
                continue
            if progress:
                print(f"jaxrl_par: repeat {r + 1}/{repeats}: {entry.name}", file=sys.stderr,
                      flush=True)
            result = train(algo, list(seeds), num_chunks=num_chunks, progress=progress,
                           **runtime_kw[entry.name])
            if result.interrupted:  # a partial run's speed is not a run's: stop here
                return rows
            row.speed_runs.append(float(result.steps_per_second))
            row.steps_per_second = float(np.median(row.speed_runs))
            if on_row is not None:
                on_row(row)
    return rows


def _runtime_kwargs(entry: Entry) -> dict[str, Any]:
    """What :func:`~jaxrl_par.runner.training.train` takes to run ``entry``'s runtime."""
    return {"threads": {"async_workers": True}, "actor-learner": {"actor_learner": True},
            "devices": {"devices": entry.devices}}.get(entry.runtime, {})


def _check_same(record: dict[str, Any], env_id: str, seeds: list[int],
                config: dict[str, Any]) -> None:
    """``ValueError`` naming what differs between a finished row and an entry now."""
    diff = [f"env {record['env']!r} (now {env_id!r})"] if record["env"] != env_id else []
    if list(record["seeds"]) != seeds:
        diff.append(f"seeds {record['seeds']} (now {seeds})")
    before = record.get("config", {})
    diff += [f"{k}={before.get(k)!r} (now {config.get(k)!r})"
             for k in sorted(set(before) | set(config)) if before.get(k) != config.get(k)]
    if diff:
        raise ValueError(f"{record['entry']} finished before with other settings: "
                         f"{'; '.join(diff[:6])}; compare with those, or start afresh "
                         "(another --out, or without --resume)")


def table(rows: Sequence[Row], target: float | None = None) -> str:
    """The rows as a Markdown table (one line per entry)."""
    runs = max((len(r.speed_runs) for r in rows), default=1)
    head = ["entry", "paradigm", "env steps", "final return",
            "steps/s" if runs <= 1 else f"steps/s (median of {runs})", "compile s",
            "train s"]
    if any(r.greedy_returns is not None for r in rows):
        head.append("greedy return")
    if target is not None:
        head += [f"steps to {target:g}", f"seconds to {target:g}"]
    if any(r.lag for r in rows):
        head.append("staleness / lag")
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join("---" if i < 2 else "---:" for i in range(len(head))) + "|"]
    for r in rows:
        final = ("no episode" if r.final_return is None else
                 f"{r.final_return:.1f} +- {r.final_return_std:.1f}")
        cells = [r.entry.name + (" (interrupted)" if r.interrupted else ""),
                 r.entry.paradigm(r.devices),
                 f"{r.env_steps:,}", final, f"{r.steps_per_second:,.0f}",
                 f"{r.compile_seconds:.1f}", f"{r.train_seconds:.1f}"]
        if "greedy return" in head:
            cells.append("" if r.greedy_returns is None else
                         f"{np.mean(r.greedy_returns):.1f}")
        if target is not None:
            cells.append("not reached" if r.steps_to_target is None else
                         f"{r.steps_to_target:,}")
            cells.append("" if r.seconds_to_target is None else f"{r.seconds_to_target:.1f}")
        if "staleness / lag" in head:
            cells.append(", ".join(f"{k.removeprefix('mean_').replace('_', ' ')} {v:.2f}"
                                   for k, v in r.lag.items()))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: Sequence[Row], path: str, target: float | None = None) -> None:
    """Saves the rows' mean return against env steps and against training seconds (two
    panels) to ``path`` (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plotting needs matplotlib: pip install matplotlib (or "
                          "pip install -e '.[bench]')") from e
    fig, (ax_steps, ax_secs) = plt.subplots(1, 2, figsize=(12, 4.5))
    # A colour per entry (tab20 past 10), a line style per runtime.
    palette = plt.get_cmap("tab10" if len(rows) <= 10 else "tab20").colors
    styles = dict(zip(RUNTIMES, ["-", "--", ":", "-."], strict=True))
    for i, r in enumerate(rows):
        ret = np.array([np.nan if x is None else x for x in r.curve["return"]])
        secs = np.array([np.nan if x is None else x for x in r.curve["seconds"]])
        kw = {"label": r.entry.name, "color": palette[i % len(palette)],
              "ls": styles[r.entry.runtime], "lw": 1.3}
        ax_steps.plot(r.curve["env_steps"], ret, **kw)
        ax_secs.plot(secs, ret, **kw)
        if "greedy" in r.curve:  # evaluations during training: markers, same colour
            g = r.curve["greedy"]
            gsecs = [np.nan if x is None else x for x in g["seconds"]]
            for ax, xs in ((ax_steps, g["env_steps"]), (ax_secs, gsecs)):
                ax.plot(xs, g["return"], "o", ms=3, color=kw["color"])
    ax_secs.set_xscale("log")
    for ax, label in ((ax_steps, "env steps per seed"),
                      (ax_secs, "training seconds (log scale)")):
        ax.set_xlabel(label)
        ax.set_ylabel("return (trailing mean over seeds)")
        if target is not None:
            ax.axhline(target, color="grey", lw=0.8, ls="--")
    ax_steps.legend(fontsize=8)
    fig.suptitle(f"{rows[0].env}, seeds {rows[0].seeds}" if rows else "")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = ["PARADIGMS", "RUNTIMES", "Entry", "Row", "compare", "default_entries",
           "entry_config", "plot", "row_of", "runtimes_of", "split_overrides", "table",
           "update_seconds"]
