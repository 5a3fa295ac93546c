"""Command line: ``jaxrl-par train ALGO --env ID ...`` and ``jaxrl-par list``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading

import numpy as np

from jaxrl_par import (
    algos,  # no gymnax here: hosts must join before it is imported
    cli_use,
    failures,
    platform,
)
from jaxrl_par.algos.config import apply_overrides
from jaxrl_par.platform import cpu_threads
from jaxrl_par.runner import interrupt

CPU_THREADS_HELP = ("threads XLA runs a program's kernels on, on CPU: auto (default) is one, "
                    "which runs small RL programs fastest, or XLA's one per core for runs "
                    "whose observations over all envs hold 4,096 numbers or more at a step "
                    "(train and compare restart once for it) and when programs run at once from "
                    "host threads (--async-workers, --actor-learner, @threads); 'default' is "
                    "XLA's; N is N. An NPROC in the environment is kept under auto "
                    "(jaxrl_par/platform/cpu_threads.py)")


class _TrainHelp(argparse.Action):
    """``-h``/``--help`` of ``train``: the options, then the fields of the Config of the
    algorithm named before it (``jaxrl-par train ppo --help``), with type, default and
    meaning."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help=None):  # noqa: A002
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.print_help()
        algo = getattr(namespace, "algo", None)
        if algo in algos.ALGORITHMS:
            from jaxrl_par.algos.fields import table

            print(f"\n{algo}.Config (set with --set FIELD=VALUE):\n")
            print(table(algos.get(algo).Config))
        else:
            print("\n`jaxrl-par train ALGO --help` lists ALGO's Config fields.")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    from jaxrl_par import __version__

    p = argparse.ArgumentParser(
        prog="jaxrl-par",
        description="Reinforcement learning on the accelerator: every parallel paradigm, one API.",
    )
    p.add_argument("--version", action="version", version=f"jaxrl-par {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train an algorithm on an environment", add_help=False)
    t.add_argument("-h", "--help", action=_TrainHelp,
                   help="show this help and the Config fields of the ALGO given before it")
    t.add_argument("algo", help=f"one of: {', '.join(sorted(algos.ALGORITHMS))}")
    t.add_argument("--env", default=None, help="environment id (default: the algorithm's)")
    t.add_argument("--seeds", type=int, default=None,
                   help="number of seeds, trained as one vmapped batch (default 1, or the "
                        "seeds of the run whose config.json --config names)")
    t.add_argument("--seed", type=int, default=None,
                   help="first seed (seeds are seed..seed+N-1; default 0)")
    t.add_argument("--total-timesteps", default=None,  # parsed as the Config's int field
                   help="environment steps per seed (e.g. 5e5)")
    t.add_argument("--preset", default=None, metavar="auto|none|ENV",
                   help="per-environment settings (jaxrl_par/presets/ALGO.toml): auto, the "
                        "default, uses --env's preset when there is one (none with --config); "
                        "none gives the plain Config defaults; ENV takes that env's preset; "
                        "--set overrides its fields")
    t.add_argument("--config", default=None, metavar="FILE",
                   help="start from the Config fields in a JSON file: a run's config.json "
                        "(its log dir) or an object of fields; --env, --total-timesteps and "
                        "--set apply on top")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                   help="set any Config field, e.g. --set num_envs=16 or --set "
                        "hidden_sizes=[128,128] (repeatable; `train ALGO --help` lists "
                        "the fields)")
    t.add_argument("--print-config", action="store_true",
                   help="print the resolved Config (defaults, --config, --env, "
                        "--total-timesteps and --set applied) as JSON, and exit")
    t.add_argument("--sweep", action="append", default=[], metavar="FIELD=V1,V2,...",
                   help="train every seed at every value (repeatable: the grid of all "
                        "given fields) as one vmapped batch, e.g. --sweep "
                        "learning_rate=1e-3,2.5e-4; prints a table of final returns per "
                        "point. FIELD is one of the Config's sweepable fields (the "
                        "learning rate, discount, loss coefficients...; any other "
                        "lists them). FIELD=LOW:HIGH (uniform) or FIELD=LOW:HIGH:log "
                        "(log-uniform) draws --points random values instead")
    t.add_argument("--points", type=int, default=None, metavar="N",
                   help="random search: draw N points of the --sweep ranges (LOW:HIGH), "
                        "every seed at each (the draw is fixed by the first seed)")
    t.add_argument("--pbt", type=int, default=None, metavar="K",
                   help="population based training over the --sweep lanes: every K updates "
                        "the worst quarter copies the best quarter's states and perturbs "
                        "their values (x0.8 or x1.25); the table then shows final values")
    t.add_argument("--log-dir", default=None,
                   help="write config.json, metrics.jsonl and orbax checkpoints "
                        "(checkpoints/<updates done>/, the last 2 kept)")
    t.add_argument("--checkpoint-seconds", type=float, default=30.0, metavar="S",
                   help="the least time between two checkpoints, written in the background "
                        "(default 30; 0: after every chunk); the last chunk is always saved "
                        "when the run ends or stops (Ctrl-C, SIGTERM, --time-limit)")
    t.add_argument("--resume", action="store_true",
                   help="continue from --log-dir's newest readable checkpoint, with the "
                        "run's settings; a larger --total-timesteps continues it to the new "
                        "total, its schedules (learning-rate annealing, epsilon decay) "
                        "re-stretched over the new total from the resumed update on")
    t.add_argument("--logger", dest="loggers", action="append", default=[],
                   choices=("tensorboard", "wandb"),
                   help="also log every update's scalars (per seed and their mean, against "
                        "env steps) to TensorBoard (in --log-dir/tensorboard; pip install "
                        "'jaxrl_par[tensorboard]') or W&B (offline unless $WANDB_MODE says "
                        "otherwise; pip install 'jaxrl_par[wandb]'); repeatable")
    t.add_argument("--chunks", type=int, default=20, help="host round-trips (progress updates)")
    t.add_argument("--max-chunk-seconds", type=float, default=10.0, metavar="S",
                   help="a chunk that takes longer is followed by shorter ones, so Ctrl-C "
                        "or SIGTERM (30 s before SIGKILL under SLURM and Kubernetes) stops "
                        "with a checkpoint in time (default 10; 0: chunks as --chunks says)")
    t.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="stop, logged and checkpointed, before a chunk that would end past "
                        "S seconds of training (e.g. a job's time limit less a margin); "
                        "--resume continues")
    t.add_argument("--eval-envs", type=int, default=0, metavar="N",
                   help="after training, play one greedy episode in each of N envs per seed "
                        "(each seed and env from its own start state) and report "
                        "greedy_return: the evaluation policy's return, mean, std and 95%% "
                        "interval over seeds (final_return is the training return, played "
                        "by the exploring policy)")
    t.add_argument("--eval-every", type=int, default=None, metavar="K",
                   help="also evaluate greedily during training, after every K-th chunk "
                        "(see --chunks) and the last: --eval-envs episodes per seed (8 if "
                        "not given), logged as greedy_return; its time is not counted as "
                        "training time")
    t.add_argument("--json", action="store_true",
                   help="print one JSON summary as the last line; its 'figures' object says "
                        "what each figure is (steps_per_second is summed over seeds, "
                        "steps_per_second_per_seed is one seed's)")
    t.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    t.add_argument("--no-compile-cache", action="store_true",
                   help="do not keep compiled programs on disk (by default they are kept in "
                        "$JAX_COMPILATION_CACHE_DIR or ~/.cache/jaxrl_par/xla, so running "
                        "the same command again skips most of the compile)")
    t.add_argument("--cpu-threads", default="auto", metavar="auto|default|N",
                   help=CPU_THREADS_HELP)
    t.add_argument("--platform-tuning", choices=("on", "off"), default=None,
                   help="platform-specific lowerings (jaxrl_par/platform, "
                        "docs/performance.md): on (default) or off, to compare; sets "
                        "$JAXRL_PAR_PLATFORM_TUNING for this run")
    par = t.add_argument_group("devices and hosts (see docs/scaling.md)")
    par.add_argument("--devices", type=int, default=None,
                     help="train on a ('pop','data') mesh of N devices (all hosts' together); "
                          "on one CPU host, N CPU devices are made, e.g. one per core")
    par.add_argument("--pop", type=int, default=None,
                     help="pop axis of the mesh: seeds split over N device groups, each "
                          "data-parallel over devices/N (default 1)")
    par.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                     help="multi-host: process 0's address, or 'auto' to detect SLURM/MPI/TPU")
    par.add_argument("--num-processes", type=int, default=None, help="multi-host: process count")
    par.add_argument("--process-id", type=int, default=None, help="multi-host: this process")
    par.add_argument("--actor-learner", action="store_true",
                     help="Ape-X: actors on one device and learner on another, running at "
                          "once (sets pipeline=true; on CPU, two devices of the cores)")
    par.add_argument("--async-workers", action="store_true",
                     help="a3c, a2c, gorila: each worker in a host thread of its own, "
                          "pushing gradients as they finish (nondeterministic; workers "
                          "spread over the devices). Without it the workers push in a fixed "
                          "round-robin order inside one compiled program")
    par.add_argument("--vector-env", choices=("grouped", "async", "sync"), default=None,
                     help="gymnasium:<id> envs: a subprocess per core, each stepping a "
                          "group of the envs (grouped; the default for ppo, a2c, dqn, sac, "
                          "ddpg, td3), each env in a subprocess (async, gymnasium's "
                          "AsyncVectorEnv) or all in this process (sync)")
    par.add_argument("--overlap-learning", action="store_true",
                     help="gymnasium:<id> envs, dqn, sac, td3 and ddpg (Gaussian noise): "
                          "learn from each update while the envs step the next, which acts "
                          "with the parameters of one update before (and epsilon or the "
                          "random warm-up one update late); on CPU, acting gets a CPU "
                          "device of its own. Recorded in config.json")
    par.add_argument("--debug-replication", action="store_true",
                     help="check after every chunk that data-parallel replicas are identical")
    c = sub.add_parser(
        "compare", help="train several algorithms and runtimes on one env, side by side",
        description="Trains every entry on the same env and seeds and prints one table: "
                    "final return, env steps/s, compile and training seconds, and with "
                    "--target the env steps and seconds each took to reach it.")
    c.add_argument("entries", nargs="*", metavar="ENTRY",
                   help="ALGO (its update as one program), ALGO@threads (a3c, a2c, "
                        "gorila: workers as host threads), ALGO@actor-learner (apex, "
                        "impala: two devices at once) or ALGO@devices=N (data parallel), "
                        "each optionally with settings of its own, e.g. "
                        "dqn:prioritized=true:learning_rate=1e-3; default: every "
                        "algorithm that trains on the env, as one program")
    c.add_argument("--env", default="CartPole-v1", help="environment id (default CartPole-v1)")
    c.add_argument("--seeds", type=int, default=1,
                   help="seeds per entry, trained as one vmapped batch (default 1)")
    c.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    c.add_argument("--total-timesteps", default=None,
                   help="environment steps per seed for every entry (default: each "
                        "algorithm's own)")
    c.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="[ALGO.]FIELD=VALUE",
                   help="a Config field for every entry that has it, or with ALGO. for one "
                        "algorithm's entries (repeatable)")
    c.add_argument("--target", type=float, default=None, metavar="RETURN",
                   help="also report the env steps and training seconds each entry took "
                        "to reach this return (mean over seeds of the trailing 5%% of "
                        "updates)")
    c.add_argument("--eval-envs", type=int, default=0, metavar="N",
                   help="also each entry's greedy return: one episode in each of N envs "
                        "per seed")
    c.add_argument("--eval-every", type=int, default=None, metavar="K",
                   help="also evaluate each entry greedily during training, after every "
                        "K-th chunk (--eval-envs episodes per seed, 8 if not given): "
                        "curves of greedy returns in --out and --plot (markers)")
    c.add_argument("--chunks", type=int, default=20,
                   help="chunks per entry: the resolution of the wall-clock curve")
    c.add_argument("--repeats", type=int, default=1, metavar="R",
                   help="train every entry R times, the entries alternating, and report "
                        "the median env steps/s (returns and curves: the first run's)")
    c.add_argument("--out", default=None, metavar="FILE.json",
                   help="write the rows (with their learning curves) as JSON, after every "
                        "entry")
    c.add_argument("--resume", action="store_true",
                   help="with --out: keep the rows that FILE.json already holds for these "
                        "entries (same env, seeds and config) and train only the others")
    c.add_argument("--plot", default=None, metavar="FILE.png",
                   help="save return against env steps and against seconds (matplotlib)")
    c.add_argument("--json", action="store_true", help="print one JSON summary as the last line")
    c.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    c.add_argument("--no-compile-cache", action="store_true",
                   help="do not keep compiled programs on disk (see train --help)")
    c.add_argument("--cpu-threads", default="auto", metavar="auto|default|N",
                   help=CPU_THREADS_HELP)
    ev = sub.add_parser("eval", help="greedy return of a run trained with --log-dir")
    ev.add_argument("log_dir", nargs="?", help="the run's --log-dir (holds checkpoints/)")
    ev.add_argument("--log-dir", dest="log_dir_option", metavar="LOG_DIR",
                    help="the same, as train spells it")
    ev.add_argument("--eval-envs", type=int, default=8, metavar="N",
                    help="one greedy episode in each of N envs per seed (default 8)")
    ev.add_argument("--json", action="store_true", help="print one JSON summary as the last line")
    ev.add_argument("--no-compile-cache", action="store_true",
                    help="do not keep compiled programs on disk (see train --help)")
    cli_use.add_video_arguments(ev)
    cli_use.add_commands(sub)
    ls = sub.add_parser("list", help="list algorithms and environments")
    ls.add_argument("--details", action="store_true",
                    help="also each environment's actions and observation shape (builds "
                         "every env: a few seconds)")
    for command in (t, c, ev, ls):
        command.add_argument(
            "--import", dest="imports", action="append", default=[], metavar="MODULE",
            help="import MODULE first (repeatable), e.g. one that registers your own "
                 "environment with jaxrl_par.envs.register (the current directory is on "
                 "the import path); see examples/corridor.py")
    return p


def _import_modules(modules: list[str]) -> None:
    """Imports ``--import`` modules, with the current directory on the import path as
    ``python -m`` has it (a console script's path starts at its own directory)."""
    import importlib

    if modules and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ValueError(f"--import {name}: {e} (give a module name importable from "
                             f"{os.getcwd()} or the PYTHONPATH, e.g. examples.corridor)"
                             ) from None


def _sweepable(algo: str) -> tuple[str, ...]:
    """The Config fields of ``algo`` that ``--sweep`` can vary (without importing jax)."""
    import importlib

    return getattr(importlib.import_module(algos.ALGORITHMS[algo][0]).Config, "SWEEPABLE", ())


def _sweep_values(items: list[str]) -> tuple[dict[str, list[float]], dict[str, tuple]]:
    """``({field: [values]}, {field: (low, high[, "log"])})`` from ``--sweep`` strings:
    ``field=v1,v2,...`` (a grid) and ``field=low:high[:log]`` (a range to sample)."""
    values: dict[str, list[float]] = {}
    ranges: dict[str, tuple] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name or not text.strip():
            raise ValueError(f"--sweep expects FIELD=V1,V2,..., got {item!r}")
        if name in values or name in ranges:
            raise ValueError(f"--sweep {name} is given twice; list all its values in one "
                             f"--sweep {name}=V1,V2,...")
        if ":" in text:
            parts = [p.strip() for p in text.split(":")]
            try:
                if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "log"):
                    raise ValueError
                ranges[name] = (float(parts[0]), float(parts[1]), *parts[2:])
            except ValueError:
                raise ValueError(f"--sweep {item!r}: a range is LOW:HIGH (uniform) or "
                                 "LOW:HIGH:log (log-uniform)") from None
            continue
        try:
            values[name] = [float(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"--sweep {item!r}: the values must be numbers separated by "
                             "commas") from None
    return values, ranges


def _lanes(args, cfg) -> tuple[object, list[int], dict | None]:
    """``(cfg, seeds, hparams)`` of the run: with ``--sweep``, the config with the swept
    fields added to ``sweep`` and every seed at every point of the grid
    (:func:`jaxrl_par.algos.hyper.grid`); without, the seeds and (from a run's
    config.json given as ``--config``) that run's swept values: its lanes as they were,
    or with ``--seed``/``--seeds`` each of its points at those seeds."""
    import dataclasses

    from jaxrl_par.algos import hyper

    seeds = _seeds(args)
    values, ranges = _sweep_values(args.sweep)
    if ranges and args.points is None:
        raise ValueError(f"--sweep {next(iter(ranges))}=LOW:HIGH draws random values: give "
                         "how many points with --points N")
    if args.points is not None and not ranges:
        raise ValueError("--points N draws values of ranges: give one as --sweep "
                         "FIELD=LOW:HIGH (or LOW:HIGH:log)")
    recorded = _recorded(args, "hparams")
    if not values and recorded and (args.seed is not None or args.seeds is not None):
        # The recorded sweep's points, each at the seeds asked for now.
        points = hyper.points(recorded, len(next(iter(recorded.values()))))
        return (cfg, *hyper.at_seeds([point for point, _ in points], seeds))
    if not values and not ranges:
        return cfg, seeds, recorded
    allowed = _sweepable(args.algo)
    if not allowed:
        raise ValueError(f"--sweep: {args.algo} has no sweepable fields")
    unknown = [name for name in [*values, *ranges] if name not in allowed]
    if unknown:
        raise ValueError(f"--sweep {unknown[0]}: not a sweepable {args.algo} field; "
                         f"sweepable: {', '.join(allowed)}")
    swept = tuple(cfg.sweep) + tuple(n for n in [*values, *ranges] if n not in cfg.sweep)
    cfg = dataclasses.replace(cfg, sweep=swept)
    if args.seed is None and args.seeds is None and recorded:
        seeds = list(dict.fromkeys(seeds))  # a swept run's lanes repeat its seeds
    drawn = [{}]
    if ranges:  # random points, crossed with the grid's
        try:
            drawn = hyper.sample_points(args.points, seeds[0], **ranges)
        except ValueError as e:
            raise ValueError(f"--sweep/--points: {e}") from None
    points = [{**g, **d} for g in hyper.grid_points(**values) for d in drawn]
    return (cfg, *hyper.at_seeds(points, seeds))


def _recorded(args, key: str):
    """``key`` of the run's config.json that ``--config`` names (None if it has none)."""
    if args.config is None:
        return None
    with open(args.config) as f:  # _config_file has checked it
        data = json.load(f)
    return data.get(key) if isinstance(data, dict) and key in data else None


def _config_file(path: str, algo: str) -> object:
    """The ``algo`` Config that the JSON file at ``path`` describes: a run's
    ``config.json`` (``{"config": {...}, "seeds": ...}``, as ``train`` writes it into its
    log dir), a checkpoint's config record, or a plain object of Config fields. Fields it
    leaves out keep their defaults."""
    import dataclasses

    from jaxrl_par.runner import runs

    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"--config {path}: cannot read a JSON object from it ({e})") from None
    record = data.get("config", data) if isinstance(data, dict) else None
    if not isinstance(record, dict):  # a ValueError: main reports those as usage errors
        message = (f"--config {path}: expected a JSON object of Config fields, or a run's "
                   "config.json")
        raise ValueError(message)  # noqa: TRY004
    if isinstance(record.get("env"), str) and isinstance(data, dict):
        from jaxrl_par import envs

        envs.import_source(record["env"], data)  # a run's own env registers again
    record = {"config_class": f"{algos.ALGORITHMS[algo][0]}.Config", **record}
    try:
        owner, cls = runs.config_class(record)
    except ValueError as e:
        raise ValueError(f"--config {path}: {e}") from None
    if owner != algo:
        raise ValueError(f"--config {path} holds a {owner} config, not {algo}'s: train "
                         f"{owner} with it, or give a {algo} config")
    fields = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(record) - set(fields) - {"config_class"})
    if unknown:
        raise ValueError(f"--config {path}: unknown {algo} config field(s) {unknown}; valid "
                         f"fields: {', '.join(fields)}")
    return runs.config_from_record(record)[1]


def _seeds(args) -> list[int]:
    """``--seed``..``--seed + --seeds - 1``; with neither given and ``--config`` naming a
    run's config.json, that run's seeds (so ``--config D/config.json --log-dir D
    --resume`` continues it as it was), else ``[0]``."""
    if args.seed is None and args.seeds is None:
        recorded = _recorded(args, "seeds")
        if isinstance(recorded, list) and recorded:
            return [int(x) for x in recorded]
    first = 0 if args.seed is None else args.seed
    return list(range(first, first + (1 if args.seeds is None else args.seeds)))


def _config(args) -> object:
    return _config_and_preset(args)[0]


def _config_and_preset(args):
    """``train``'s Config and the preset in it (:mod:`jaxrl_par.presets`): the Config
    defaults (or ``--config``), then the env's preset, then ``--set`` and the flags."""
    import dataclasses

    from jaxrl_par import presets

    module = algos.get(args.algo)
    base = module.Config() if args.config is None else _config_file(args.config, args.algo)
    overrides = list(args.overrides)
    if args.env is not None:
        overrides.append(f"env={args.env}")
        base = apply_overrides(base, [f"env={args.env}"])
    if args.total_timesteps is not None:
        overrides.append(f"total_timesteps={args.total_timesteps}")
    chosen = getattr(args, "preset", None)  # default: the env's, none over a --config file
    chosen = presets.lookup(args.algo, base.env, chosen or (
        presets.NONE if args.config else presets.AUTO))
    if chosen is not None:  # its fields replace the base's; the flags come after
        base = dataclasses.replace(base, **dict(chosen.fields))
    # dataclasses.replace re-runs __post_init__, so every override is validated.
    return apply_overrides(base, overrides), chosen


def _multi_host(args) -> bool:
    """Whether ``train``'s arguments ask to join a multi-host run."""
    return args.command == "train" and bool(
        args.coordinator or args.num_processes is not None or args.process_id is not None)


def _start_hosts(args) -> None:
    """Joins a multi-host run before anything touches a device."""
    from jaxrl_par import parallel

    if args.coordinator == "auto":
        parallel.initialize()
    elif _multi_host(args):
        parallel.initialize(args.coordinator, args.num_processes, args.process_id)


def compile_cache_dir() -> str:
    """Where the CLI keeps compiled programs: ``$JAX_COMPILATION_CACHE_DIR`` if set, else
    ``$XDG_CACHE_HOME/jaxrl_par/xla`` (``~/.cache/jaxrl_par/xla``)."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return os.environ["JAX_COMPILATION_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxrl_par", "xla")


def _use_compile_cache() -> None:
    """Turns on jax's persistent compilation cache for this process (the CLI is a program,
    so it may set jax's global config; the library never does). A rerun of the same
    command then loads the compiled training program instead of compiling it: the
    default PPO run's compile went from 8.5 s to 2.1 s (tracing and lowering remain). jax
    keys entries by program, jax version and devices, and skips programs that compile in
    under a second; a cache it cannot write is a warning, not an error. The cache is
    trimmed first to its bound (:func:`trim_compile_cache`, 2 GiB by default)."""
    import jax

    path = compile_cache_dir()
    trim_compile_cache(path, compile_cache_limit())
    jax.config.update("jax_compilation_cache_dir", path)


#: The default bound on the CLI's compile cache, in MiB (``JAXRL_PAR_COMPILE_CACHE_MB``).
COMPILE_CACHE_MB = 2048


def compile_cache_limit() -> int | None:
    """The compile cache's bound in bytes: ``$JAXRL_PAR_COMPILE_CACHE_MB`` MiB (0: no
    bound), else :data:`COMPILE_CACHE_MB`. A value that is not a whole number is an error
    naming the variable."""
    text = os.environ.get("JAXRL_PAR_COMPILE_CACHE_MB", "").strip()
    if not text:
        return COMPILE_CACHE_MB << 20
    if not text.isdigit():
        raise ValueError(f"JAXRL_PAR_COMPILE_CACHE_MB={text!r}: give the compile cache's bound "
                         "in MiB as a whole number, or 0 for no bound")
    return int(text) << 20 or None


def trim_compile_cache(path: str, limit: int | None) -> int:
    """Deletes the least recently used files of the compile cache at ``path`` until it
    holds at most 3/4 of ``limit`` bytes, if it holds more than ``limit`` (None: no
    bound); returns the bytes freed. jax never deletes from its cache on its own (its
    ``jax_compilation_cache_max_size`` eviction needs bookkeeping files on every entry,
    which entries written without it lack), so the CLI trims it as it starts. A file
    that disappears meanwhile (another run trimming) is skipped."""
    if limit is None or not os.path.isdir(path):
        return 0
    files = []
    with os.scandir(path) as entries:
        for entry in entries:
            try:
                if entry.is_file(follow_symlinks=False) and not entry.name.startswith("."):
                    st = entry.stat(follow_symlinks=False)
                    files.append((max(st.st_atime, st.st_mtime), st.st_size, entry.path))
            except OSError:
                continue
    total = sum(size for _, size, _ in files)
    if total <= limit:
        return 0
    freed = 0
    for _, size, file in sorted(files):  # oldest use first
        if total - freed <= limit * 3 // 4:
            break
        try:
            os.remove(file)
            freed += size
        except OSError:
            continue
    return freed


def cmd_train(args) -> int:
    import dataclasses

    if args.print_config:
        from jaxrl_par.runner.records import jsonable

        cfg = _config(args)
        record = {"config_class": f"{type(cfg).__module__}.{type(cfg).__qualname__}",
                  **dataclasses.asdict(cfg)}
        print(json.dumps(jsonable(record), indent=2))
        return 0

    # first: XLA reads its CPU pool's size and device count when jax starts, and
    # importing the runner starts it (gymnax computes at import)
    concurrent = bool(args.actor_learner or args.async_workers)
    # a run on one device, one host, whose size may still give it XLA's pool
    auto_pool = (cpu_threads.auto_gives_one(args.cpu_threads, concurrent)
                 and not args.overlap_learning and (args.devices or 1) == 1
                 and not _multi_host(args))
    pool = cpu_threads.apply(args.cpu_threads, concurrent)
    if args.platform_tuning is not None:
        os.environ[platform.SETTING] = args.platform_tuning
    if args.actor_learner or args.overlap_learning:
        cpu_threads.devices(2, warn=False)  # on CPU: two devices of the cores, at once
    elif args.devices is not None and args.devices > 1 and not _multi_host(args):
        cpu_threads.devices(args.devices, warn=False)  # on CPU: e.g. one per core

    import jax

    from jaxrl_par.runner.training import train

    _check_train_args(args)
    _start_hosts(args)
    _import_modules(args.imports)  # after joining: a module may touch a device
    module = algos.get(args.algo)
    cfg, preset = _config_and_preset(args)
    cfg, sharded = _runtime_config(args, cfg)
    cfg, seeds, hparams = _lanes(args, cfg)
    if auto_pool and jax.default_backend() == "cpu":
        from jaxrl_par import envs

        _pool_for_size(args, envs.observation_numbers(cfg.env, cfg.num_envs * len(seeds)))
    algo = module.make(cfg)
    mesh_kw = _runtime_keywords(args, sharded)
    if not args.no_compile_cache:
        _use_compile_cache()
    pbt = None
    if args.pbt is not None:
        from jaxrl_par.runner.pbt import PBT

        pbt = PBT(interval=args.pbt)
    during = ({"eval_envs": args.eval_envs, "eval_every": args.eval_every}
              if args.eval_every is not None else {})
    loggers = []
    if args.loggers and jax.process_index() == 0:  # only process 0 logs
        from jaxrl_par.runner import loggers as loggers_lib
        from jaxrl_par.runner.records import config_record

        loggers = loggers_lib.from_names(args.loggers, args.log_dir, config_record(algo))
    result = train(algo, seeds, num_chunks=args.chunks, log_dir=args.log_dir,
                   resume=args.resume, progress=not args.no_progress, hparams=hparams,
                   pbt=pbt, preset=preset and preset.without(dict(preset.fields)),  # recorded
                   listeners=loggers, max_chunk_seconds=args.max_chunk_seconds or None,
                   time_limit=args.time_limit,
                   checkpoint_seconds=args.checkpoint_seconds or None,
                   **mesh_kw, **during)
    states = result.state
    if args.eval_envs and sharded:
        from jaxrl_par import parallel

        states = parallel.unreplicate(parallel.to_host(states))  # every process calls it
    if jax.process_index() != 0:  # only process 0 reports
        return 0
    summary = _summary(args, cfg, algo, preset, seeds, result, states, pool)
    if args.json:
        print(json.dumps(summary))
    return _exit_code(args, result)


def _pool_for_size(args, observation_numbers: int) -> None:
    """``--cpu-threads auto`` started this command on one thread, before jax could say
    how large its observations are. A run with large ones (``observation_numbers``: the
    envs' observations at a step over the lanes one program steps, seeds and swept
    points; ``cpu_threads.auto_threads``) restarts on XLA's pool when this process is the
    command itself; otherwise a line says how to get that pool."""
    if cpu_threads.auto_threads(observation_numbers) == 1:
        return
    if args.program_argv is not None and cpu_threads.can_restart():
        if not args.no_progress:
            print("jaxrl_par: large observation batches: restarting on XLA:CPU's pool of a "
                  "thread per core, which --cpu-threads auto picks for them (--cpu-threads 1 "
                  "keeps one thread)", file=sys.stderr)
        cpu_threads.restart_with_default_pool(args.program_argv)
    if not args.no_progress:
        print("jaxrl_par: tip: this run's observation batches are large; --cpu-threads "
              "default (XLA's pool of a thread per core) trains it faster", file=sys.stderr)


def _check_train_args(args) -> None:
    """``ValueError`` for counts out of range; ``--eval-every`` implies 8 eval envs."""
    if args.eval_envs < 0:
        raise ValueError(f"--eval-envs={args.eval_envs}: give a number of envs >= 1, or 0 for "
                         "no evaluation")
    if args.seeds is not None and args.seeds < 1:
        raise ValueError(f"--seeds={args.seeds}: give the number of seeds to train, >= 1 "
                         "(--seed sets the first one)")
    if args.chunks < 1:
        raise ValueError(f"--chunks={args.chunks}: give the number of host round-trips, >= 1")
    if args.eval_every is not None:
        if args.eval_every < 1:
            raise ValueError(f"--eval-every={args.eval_every}: give a number of chunks, >= 1")
        args.eval_envs = args.eval_envs or 8


def _runtime_config(args, cfg):
    """``(cfg, sharded)``: the config as the runtime asked for needs it (the
    actor-learner's pipeline, the mesh's data axis) and whether training runs on a mesh;
    ``ValueError`` for a runtime the algorithm does not have."""
    import dataclasses

    import jax

    from jaxrl_par import axes
    from jaxrl_par.envs import host

    fields = {f.name for f in dataclasses.fields(cfg)}
    if args.overlap_learning and not host.is_host(cfg.env):
        raise ValueError(f"--overlap-learning overlaps learning with the steps of host envs "
                         f"(--env gymnasium:<id>); {cfg.env} steps on the device: drop it")
    if args.actor_learner:
        if "pipeline" not in fields:
            raise ValueError(f"--actor-learner: {args.algo} has no actor-learner pipeline; "
                             "use it with apex or impala")
        if args.devices is not None or args.pop is not None:
            raise ValueError("--actor-learner runs on two devices of its own; drop --devices "
                             "and --pop")
        cfg = dataclasses.replace(cfg, pipeline=True)
    if args.async_workers:
        if "num_workers" not in fields:
            raise ValueError(f"--async-workers: {args.algo} has no asynchronous workers; use "
                             f"it with {', '.join(algos.with_config_field('num_workers'))}")
        if args.devices is not None or args.pop is not None or args.actor_learner:
            raise ValueError("--async-workers places its workers on the devices itself; drop "
                             "--devices, --pop and --actor-learner")
    if args.devices is not None and args.devices // (args.pop or 1) > 1 \
            and "axis_name" not in fields:
        workers = " (its workers on several devices: --async-workers)" \
            if "num_workers" in fields else ""
        raise ValueError(f"--devices {args.devices}: {args.algo} does not run data parallel"
                         f"{workers}; these do: "
                         f"{', '.join(algos.with_config_field('axis_name'))}")
    # A mesh when asked for, and always on several hosts (it spans every host's devices).
    sharded = args.devices is not None or args.pop is not None or jax.process_count() > 1
    if sharded and "axis_name" in fields:
        cfg = dataclasses.replace(cfg, axis_name=axes.DATA)  # average gradients over `data`
    return cfg, sharded


def _runtime_keywords(args, sharded: bool) -> dict:
    """``train``'s runtime arguments from the flags: the mesh, the actor-learner, the
    asynchronous workers, the host envs' vector env."""
    kw = {"devices": args.devices, "pop": args.pop or 1,
          "debug_replication": args.debug_replication} if sharded else {}
    if args.actor_learner:
        kw = {"actor_learner": True}
    if args.async_workers:
        kw = {"async_workers": True}
    if args.vector_env is not None:
        kw["vector_env"] = args.vector_env
    if args.overlap_learning:
        kw["overlap_learning"] = True
    return kw


def _summary(args, cfg, algo, preset, seeds, result, states, pool) -> dict:
    """The run's JSON summary (returns, speed, staleness, the greedy evaluation with
    ``--eval-envs``, a sweep's table, what each figure is), its one-line report printed
    (on stderr with ``--json``)."""
    from jaxrl_par.algos import hyper
    from jaxrl_par.runner import figures

    per_seed = result.final_returns()
    finals = per_seed[~np.isnan(per_seed)]  # seeds that finished an episode
    env_steps = int(result.env_steps[-1]) if len(result.env_steps) else 0
    summary = {
        "algo": args.algo,
        "env": cfg.env,
        "seeds": len(seeds),
        "preset": preset and preset.name,  # null: the plain Config defaults
        "env_steps": env_steps,
        # null, not NaN (which strict JSON readers reject), when no episode finished
        "final_return": float(np.mean(finals)) if finals.size else None,
        "final_return_std": float(np.std(finals)) if finals.size else None,
        "final_returns": [None if np.isnan(x) else float(x) for x in per_seed],  # by seed
        "final_return_ci95": figures.spread_fields("final_return", per_seed)["final_return_ci95"],
        **({"hparams": hyper.to_record(result.hparams)}
           if result.hparams else {}),
        "steps_per_second": float(result.steps_per_second),
        "steps_per_second_per_seed": float(result.steps_per_second) / len(seeds),
        "compile_seconds": float(result.compile_seconds),
        "cpu_threads": pool,  # XLA:CPU's pool (None: its default, one thread per core)
        "platform_tuning": platform.tuning(),
        **({"eval_seconds": float(result.eval_seconds)} if result.eval_seconds else {}),
    }
    staleness = result.metrics.get("staleness")
    if staleness is not None and staleness.size:  # asynchronous workers (a3c, gorila)
        summary["mean_staleness"] = float(np.mean(staleness))
        summary["max_staleness"] = float(np.max(result.metrics["max_staleness"]))
    stop_signal = signal.Signals(result.stop_signal or signal.SIGINT)  # read if interrupted
    finished_before = not result.updates_run and not result.interrupted  # a --resume
    if finished_before:
        summary["already_finished"] = True
    if result.interrupted:
        summary["interrupted"] = True
        summary["stop_signal"] = (stop_signal.name if result.stop_signal is not None
                                  else "time_limit")
    greedy = ""
    if args.eval_envs:
        from jaxrl_par.runner.evaluation import greedy_returns

        last = result.metrics.get("greedy_return")
        if last is not None and last.size and not np.isnan(last[:, -1]).any():
            returns = last[:, -1]  # the evaluation after the last chunk: this state's
        else:
            returns = greedy_returns(algo, states, num_envs=args.eval_envs)
        summary["greedy_return"] = float(np.mean(returns))
        summary["greedy_return_std"] = float(np.std(returns))
        summary["greedy_returns"] = [float(x) for x in returns]
        summary["greedy_return_ci95"] = figures.spread_fields("g", returns)["g_ci95"]
        greedy = (f", greedy return {summary['greedy_return']:.1f} +- "
                  f"{summary['greedy_return_std']:.1f} ({args.eval_envs} episodes per seed)")
    speed = (f"{summary['steps_per_second']:,.0f} steps/s, compile "
             f"{summary['compile_seconds']:.1f} s" if not finished_before
             else "already finished, nothing trained")
    final = (f"final return {summary['final_return']:.1f} +- {summary['final_return_std']:.1f}"
             if finals.size else "no episode finished yet (train longer for a final return)")
    if "mean_staleness" in summary:
        final += (f", staleness {summary['mean_staleness']:.2f} pushes (max "
                  f"{summary['max_staleness']:.0f})")
    print(
        f"{args.algo} on {cfg.env}: {env_steps:,} steps x {len(seeds)} seed(s), {final}"
        f"{greedy}, {speed}",
        file=sys.stderr if args.json else sys.stdout,
    )
    if result.hparams:
        summary["sweep"] = _sweep_table(
            result.hparams, per_seed, seeds, sys.stderr if args.json else sys.stdout,
            np.asarray(summary["greedy_returns"]) if args.eval_envs else None)
    summary["figures"] = figures.describe(summary)
    return summary


def _exit_code(args, result) -> int:
    """0, or a shell's code for a signal that stopped the run (130 for SIGINT, 143 for
    SIGTERM), after saying how to continue it."""
    stop_signal = signal.Signals(result.stop_signal or signal.SIGINT)  # read if interrupted
    if result.interrupted and result.stop_signal is None:  # --time-limit
        print("jaxrl-par: stopped at --time-limit; "
              + ("the same command with --resume continues from the checkpoint"
                 if args.log_dir else "give --log-dir to be able to resume a run"),
              file=sys.stderr)
        return 0
    if result.interrupted:
        print("jaxrl-par: interrupted; "
              + ("the same command with --resume continues from the checkpoint"
                 if args.log_dir else "give --log-dir to be able to resume a run"),
              file=sys.stderr)
        return 128 + stop_signal  # a shell's code: 130 for SIGINT, 143 for SIGTERM
    return 0


def _sweep_table(hparams: dict, per_lane: np.ndarray, seeds: list[int], out,
                 greedy: np.ndarray | None = None) -> list[dict]:
    """Prints the final return of each point of a sweep (mean +- std over its seeds;
    with ``greedy``, each lane's greedy return, theirs too) and the best point by final
    return; returns the rows for the JSON summary."""
    from jaxrl_par.algos import hyper

    rows = hyper.summarize(hparams, per_lane, seeds)
    if greedy is not None:
        for row, g in zip(rows, hyper.summarize(hparams, greedy, seeds), strict=True):
            row["greedy_return"], row["greedy_return_std"] = g["final_return"], \
                g["final_return_std"]
    names = list(hparams)
    width = [max(len(n), 10) for n in names]
    print("  ".join(n.ljust(w) for n, w in zip(names,
                                               width, strict=True)) + "  final return (seeds)"
          + ("  greedy return" if greedy is not None else ""), file=out)
    for row in rows:
        cells = "  ".join(f"{row['hparams'][n]:<{w}.4g}" for n, w in zip(names, width, strict=True))
        result = ("no episode finished" if row["final_return"] is None else
                  f"{row['final_return']:.1f} +- {row['final_return_std']:.1f}")
        extra = (f"  {row['greedy_return']:.1f} +- {row['greedy_return_std']:.1f}"
                 if greedy is not None else "")
        result = f"{result} ({len(row['seeds'])})"
        print(f"{cells}  {result:<20}{extra}".rstrip(), file=out)
    scored = [r for r in rows if r["final_return"] is not None]
    if scored:
        best = max(scored, key=lambda r: r["final_return"])
        print("best: " + " ".join(f"{n}={best['hparams'][n]:.4g}" for n in names)
              + f" ({best['final_return']:.1f}); train it alone with "
              + " ".join(f"--set {n}={best['hparams'][n]!r}" for n in names), file=out)
    return rows


def cmd_compare(args) -> int:
    from jaxrl_par.runner import compare

    if args.seeds < 1:
        raise ValueError(f"--seeds={args.seeds}: give the number of seeds, >= 1")
    if args.chunks < 1:
        raise ValueError(f"--chunks={args.chunks}: give the number of chunks per entry, >= 1")
    if args.eval_every is not None and args.eval_every >= 1:
        args.eval_envs = args.eval_envs or 8  # as compare() does, and recorded so
    entries = [compare.Entry.parse(e) for e in args.entries]
    needed = max((e.devices_needed for e in entries), default=1)
    host_defaults = not entries and args.env.startswith("gymnasium:")
    if host_defaults:
        needed = 2  # the default host entries include impala@actor-learner
    concurrent = host_defaults or any(e.runtime in ("threads", "actor-learner") for e in entries)
    auto_pool = cpu_threads.auto_gives_one(args.cpu_threads, concurrent) and needed == 1
    cpu_threads.apply(args.cpu_threads, concurrent)  # before jax touches a device, too
    if needed > 1:
        cpu_threads.devices(needed, warn=False)  # before jax touches a device (gymnax does)
    _import_modules(args.imports)
    if not args.no_compile_cache:
        _use_compile_cache()
    if args.plot:  # fail before training, not after
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ValueError("--plot needs matplotlib: pip install matplotlib") from None
    entries = entries or compare.default_entries(args.env)
    # parsed and checked as each Config's own field, as train's --total-timesteps is
    overrides = ([f"total_timesteps={args.total_timesteps}"]
                 if args.total_timesteps is not None else []) + args.overrides
    seeds = list(range(args.seed, args.seed + args.seeds))
    import jax

    if auto_pool and jax.default_backend() == "cpu":
        _pool_for_size(args, _largest_observations(args.env, entries, overrides, len(seeds)))
    summary = {"env": args.env, "seeds": seeds, "target": args.target,
               "eval_envs": args.eval_envs, "eval_every": args.eval_every, "rows": []}
    done = _finished_rows(args, summary) if args.resume else []

    def save(row):  # a row again (a later repeat's speed) replaces its earlier record
        records = {r["entry"]: r for r in summary["rows"]}
        records[row.entry.name] = row.to_record()
        summary["rows"] = list(records.values())
        if args.out:
            tmp = f"{args.out}.tmp"
            with open(tmp, "w") as f:
                json.dump(summary, f, indent=1)
            os.replace(tmp, args.out)  # a reader never sees half a file

    rows = compare.compare(entries, args.env, seeds, overrides=overrides, target=args.target,
                           eval_envs=args.eval_envs, eval_every=args.eval_every,
                           num_chunks=args.chunks, repeats=args.repeats,
                           progress=not args.no_progress, on_row=save, done=done)
    out = sys.stderr if args.json else sys.stdout
    print(f"{args.env}, seeds {seeds}:", file=out)
    print(compare.table(rows, args.target), file=out)
    if args.plot and rows:
        compare.plot(rows, args.plot, args.target)
        print(f"plot: {args.plot}", file=out)
    if args.json:
        print(json.dumps(summary))
    if rows and rows[-1].interrupted:
        print(f"jaxrl-par: interrupted during {rows[-1].entry.name}; later entries did not "
              "run", file=sys.stderr)
        return 128 + (rows[-1].stop_signal or signal.SIGINT)
    return 0


def _largest_observations(env_id: str, entries, overrides: list[str], seeds: int) -> int:
    """The most observation numbers any entry of a comparison steps at once
    (``envs.observation_numbers`` over its envs and the seeds); 0 when an entry's config
    is in error, which ``compare`` then reports in its own words."""
    from jaxrl_par import envs
    from jaxrl_par.runner import compare

    try:
        per_algo = compare.split_overrides(overrides, entries)
        configs = [compare.entry_config(e, env_id, None, per_algo[e.algo]) for e in entries]
    except ValueError:
        return 0
    return max((envs.observation_numbers(env_id, c.num_envs * seeds) for c in configs),
               default=0)


def _finished_rows(args, summary: dict) -> list[dict]:
    """The rows of ``--out`` that ``--resume`` keeps: none if the file does not exist
    yet; an error if it was written for another env, seeds, target or evaluation."""
    if not args.out:
        raise ValueError("--resume keeps the rows of --out FILE.json: give --out")
    if not os.path.exists(args.out):
        return []
    try:
        with open(args.out) as f:
            before = json.load(f)
        rows = before["rows"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"--resume: cannot read the rows of {args.out} ({e})") from None
    for key in ("env", "seeds", "target", "eval_envs", "eval_every"):
        if before.get(key) != summary[key]:
            raise ValueError(f"--resume: {args.out} holds a comparison with {key} "
                             f"{before.get(key)!r}, not {summary[key]!r}; give the same, "
                             "or another --out")
    return rows


def cmd_eval(args) -> int:
    from jaxrl_par.runner import figures
    from jaxrl_par.runner.evaluation import greedy_returns
    from jaxrl_par.runner.runs import load_run

    if args.eval_envs < 1:
        raise ValueError(f"--eval-envs={args.eval_envs}: give a number of envs >= 1")
    if args.log_dir and args.log_dir_option and args.log_dir != args.log_dir_option:
        raise ValueError(f"two log dirs given ({args.log_dir} and --log-dir "
                         f"{args.log_dir_option}): give one")
    args.log_dir = args.log_dir or args.log_dir_option
    _import_modules(args.imports)
    if not args.log_dir:
        raise ValueError("no log dir: give the run's --log-dir, e.g. jaxrl-par eval runs/ppo")
    if not args.no_compile_cache:
        _use_compile_cache()
    run = load_run(args.log_dir)
    returns = greedy_returns(run.algo, run.state, num_envs=args.eval_envs)
    cfg = run.algo.config
    summary = {
        "algo": run.name,
        "env": cfg.env,
        "seeds": run.seeds,
        "updates_done": run.updates_done,
        "num_updates": run.algo.num_updates,
        "data_shards": run.data_shards,
        "greedy_return": float(np.mean(returns)),
        "greedy_return_std": float(np.std(returns)),
        "greedy_returns": [float(x) for x in returns],
        "greedy_return_ci95": figures.spread_fields("g", returns)["g_ci95"],
    }
    if run.hparams:
        from jaxrl_par.algos import hyper

        summary["hparams"] = hyper.to_record(run.hparams)
    print(f"{run.name} on {cfg.env} ({args.log_dir}, update {run.updates_done} of "
          f"{run.algo.num_updates}, seeds {run.seeds}): greedy return "
          f"{summary['greedy_return']:.1f} +- {summary['greedy_return_std']:.1f} "
          f"({args.eval_envs} episodes per seed)", file=sys.stderr if args.json else sys.stdout)
    cli_use.eval_video(args)
    summary["figures"] = figures.describe(summary)
    if args.json:
        print(json.dumps(summary))
    return 0


def cmd_list(args) -> int:
    _import_modules(args.imports)
    from jaxrl_par import envs
    from jaxrl_par.runner import compare

    print("algorithms (and the runtimes `jaxrl-par compare` can run them with):")
    for name, (_, desc) in sorted(algos.ALGORITHMS.items()):
        print(f"  {name:10s} {desc}; {', '.join(compare.runtimes_of(name))}")
    print("environments:" + ("" if args.details else " (--details: actions and observations)"))
    for env_id in envs.list_envs():
        print(f"  {env_id:26s} {_env_details(env_id)}" if args.details else f"  {env_id}")
    print("  gymnasium:<id>             any gymnasium env, stepped on the host (--vector-env "
          "async|sync): ppo, a2c, dqn, sac; a3c and gorila with --async-workers, impala "
          "with --actor-learner")
    print("  brax:<name>[:<backend>]    a Brax env (pip install 'jaxrl_par[brax]'), e.g. "
          "brax:ant:positional: " + _brax_names())
    return 0


def _brax_names() -> str:
    """Brax's env names for the listing, or why there are none here."""
    from jaxrl_par.envs import brax_envs

    try:
        return ", ".join(brax_envs.names())
    except ImportError:
        return "(brax is not installed)"


def _env_details(env_id: str) -> str:
    """``"discrete, 2 actions; obs (4,) float32; apex, dqn, ppo"``: the env's actions,
    observations and the algorithms that train on it (or why it could not be built)."""
    from jaxrl_par import envs

    try:
        env = envs.make(env_id, 1)
    # A listing reports any failure instead of stopping (MNISTBandit-bsuite downloads MNIST).
    except Exception as e:  # noqa: BLE001
        return f"(not built here: {type(e).__name__}: {str(e)[:60]})"
    if env.discrete:
        actions = f"discrete, {env.num_actions} action{'s' if env.num_actions > 1 else ''}"
    else:
        actions = f"continuous, {env.action_shape[0]}-d actions"
    trainable = ", ".join(algos.for_actions(env.discrete))
    return f"{actions}; obs {env.observation_shape} {env.obs_dtype}; {trainable}"


def _kept(log_dir: str | None) -> str:
    """What a stop before training says of ``log_dir``: that what it held is kept, where
    it held something (a run to resume, or other files); nothing for a new one."""
    from jaxrl_par.runner import records

    if not log_dir or not os.path.isdir(log_dir):
        return ""
    saved = os.path.join(log_dir, records.CHECKPOINTS)
    if os.path.isdir(saved) and os.listdir(saved):
        return (f"; what {log_dir} held before is kept (--resume continues from its last "
                "checkpoint)")
    held = [f for f in os.listdir(log_dir) if f != ".lock"]
    return f"; what {log_dir} held before is kept" if held else ""


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the exit code.

    A Ctrl-C or SIGTERM while nothing is in flight (importing, compiling, evaluating)
    stops the command with a line instead of a traceback, and exit code 130 or 143 (also
    when Python dropped the signal's exception: ``interrupt.raise_pending``);
    during training the runner finishes its chunk first (``jaxrl_par.runner.interrupt``).
    SIGTERM raises here instead of killing the process (``interrupt.raise_terminated``),
    so that cleanup runs: a log dir that the run created and did not write to is removed
    again.
    """
    args = _parser().parse_args(argv)
    # the command line that runs this command again (None: called with its own argv)
    args.program_argv = sys.argv[1:] if argv is None else None
    # orbax logs a failed background write's traceback through absl before it raises
    # the error here; the command says it in one line instead.
    logging.getLogger("absl").setLevel(logging.CRITICAL)
    previous = None
    # Not on several hosts: there GracefulStop is off too, and SIGTERM keeps its default
    # (the process ends at once, not after the compiled call in flight).
    previous_int = None
    if not _multi_host(args) and threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            previous = signal.signal(signal.SIGTERM, interrupt.raise_terminated)
        # Python's own Ctrl-C handler, noting the signal in case Python drops the
        # exception (interrupt.raise_pending)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            previous_int = signal.signal(signal.SIGINT, interrupt.raise_interrupt)
    log_dir = getattr(args, "log_dir", None) if args.command == "train" else None
    kept = _kept(log_dir)
    commands = {"train": cmd_train, "eval": cmd_eval, "compare": cmd_compare,
                **cli_use.COMMANDS}
    try:
        code = commands.get(args.command, cmd_list)(args)
        # A Ctrl-C or SIGTERM whose exception Python dropped after the last check (the
        # runner's after its compile, evaluation's, compare's between entries) still
        # ends the command with its code, as a scheduler that sent it expects.
        interrupt.raise_pending()
        return code
    except KeyboardInterrupt:
        interrupt.forget_pending()
        print(f"\njaxrl-par: stopped by Ctrl-C{kept}", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:  # e.g. `jaxrl-par list | head`: the reader is gone, so stop
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 0
    except interrupt.Terminated:
        interrupt.forget_pending()
        print(f"\njaxrl-par: stopped by SIGTERM{kept}", file=sys.stderr)
        return 128 + signal.SIGTERM
    except Exception as e:  # one line for what a user can fix; a traceback for a bug
        line = failures.user_error(e, log_dir)
        if line is None:
            print(failures.bug_report(e), file=sys.stderr)
            return 1
        print(f"jaxrl-par: error: {' '.join(line.split())}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if previous_int is not None:
            signal.signal(signal.SIGINT, previous_int)


if __name__ == "__main__":
    sys.exit(main())
