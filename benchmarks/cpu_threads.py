"""Training speed on CPU by the size of XLA:CPU's thread pool (``--cpu-threads``).

Each algorithm trains through the CLI as a user runs it, not pinned to a core, in fresh
processes that alternate ``--cpu-threads auto`` (one thread for a small run of one program)
and ``--cpu-threads default`` (XLA's: one per core), ``--repeats`` times each. Prints the
median env steps/s of each and their ratio, with every run's figure (runs on a shared
host vary from process to process), and writes ``benchmarks/results/cpu_threads.json``::

    python benchmarks/cpu_threads.py --repeats 3

``--sizes`` compares one thread with XLA's pool at growing observation batches, around
the size where ``auto`` switches to XLA's pool (``cpu_threads.POOL_FROM_NUMBERS``;
``benchmarks/results/cpu_sizes.json``)::

    python benchmarks/cpu_threads.py --sizes --repeats 2

``--per-core`` instead compares one device with one CPU device per core (``--devices N``,
data parallel, each device's part on a thread of its own; both ``--cpu-threads auto``)
for the algorithms that run data parallel, at their defaults and at bigger batches
(``benchmarks/results/cpu_per_core.json``)::

    python benchmarks/cpu_threads.py --per-core --repeats 3
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, most_devices, pool_env, write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: (algorithm, env, env steps per run): each run trains for ~2-10 s after its compile.
RUNS = [("ppo", "CartPole-v1", 300_000), ("a2c", "CartPole-v1", 300_000),
        ("impala", "CartPole-v1", 300_000), ("dqn", "CartPole-v1", 100_000),
        ("apex", "CartPole-v1", 100_000), ("sac", "Pendulum-v1", 20_000)]
SETTINGS = {"auto": ["--cpu-threads", "auto"], "default": ["--cpu-threads", "default"]}

CORES = os.cpu_count() or 1
#: ``--per-core``'s runs: (algorithm, env, env steps, further CLI arguments).
PER_CORE_RUNS = [
    ("ppo", "CartPole-v1", 300_000, []),
    ("ppo", "CartPole-v1", 1_000_000, ["--set", "num_envs=256"]),
    ("ppo", "Breakout-MinAtar", 500_000, ["--set", "num_envs=256"]),
    ("impala", "CartPole-v1", 300_000, []),
    ("impala", "Breakout-MinAtar", 300_000, ["--set", "num_envs=64"]),
    ("a2c", "CartPole-v1", 500_000, []),
    ("a2c", "CartPole-v1", 1_000_000, ["--set", "num_envs=64"]),
    ("a2c", "CartPole-v1", 2_000_000, ["--set", "num_envs=256"]),
    ("a2c", "Breakout-MinAtar", 500_000, ["--set", "num_envs=64"]),
    ("a3c", "CartPole-v1", 500_000, []),
    ("dqn", "CartPole-v1", 100_000, []),
    ("sac", "Pendulum-v1", 20_000, []),
]


#: ``--sizes``' runs: (algorithm, env, env steps, further CLI arguments), from below to
#: above ``cpu_threads.POOL_FROM_NUMBERS`` (num_envs x the observation's size).
SIZE_RUNS = [
    ("ppo", "CartPole-v1", 300_000, []),                                  # 8 x 4 = 32
    ("dqn", "Breakout-MinAtar", 30_000, []),                              # 8 x 400 = 3,200
    ("ppo", "CartPole-v1", 2_000_000, ["--preset", "none", "--set", "num_envs=1024"]),  # 4,096
    ("ppo", "Breakout-MinAtar", 200_000, ["--set", "num_envs=16"]),       # 6,400
    ("ppo", "Breakout-MinAtar", 300_000, []),                             # 64 x 400 = 25,600
    ("dqn", "Breakout-MinAtar", 30_000, ["--set", "num_envs=64"]),        # 25,600
    ("impala", "Breakout-MinAtar", 300_000, ["--set", "num_envs=64"]),    # 25,600
    ("a2c", "Breakout-MinAtar", 300_000, ["--set", "num_envs=64"]),       # 25,600
]
SIZE_SETTINGS = {"one thread": ["--cpu-threads", "1"], "XLA's pool": ["--cpu-threads", "default"]}


def per_core_devices(algo: str, extra: list[str]) -> list[str]:
    """``--devices N`` for a run of ``algo`` with CLI arguments ``extra``: one device per
    core, or the most devices up to the cores that its envs divide over."""
    from jaxrl_par import algos

    num_envs = algos.get(algo).Config().num_envs
    for flag, value in itertools.pairwise(extra):
        if flag == "--set" and value.startswith("num_envs="):
            num_envs = int(value.split("=", 1)[1])
    return ["--devices", str(most_devices(num_envs, CORES))]


#: ``--per-core``'s settings: CLI arguments, or a function of (algorithm, arguments) to them.
PER_CORE_SETTINGS = {"per core": per_core_devices, "one device": []}


def one_run(algo: str, env: str, steps: int, setting: list[str]) -> dict:
    """One CLI training run in a fresh process, with ``setting``'s CLI arguments; its
    JSON summary."""
    cmd = [sys.executable, "-m", "jaxrl_par", "train", algo, "--env", env,
           "--total-timesteps", str(steps), *setting, "--json", "--no-progress"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=pool_env(None),
                         timeout=900, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare_settings(runs_spec, settings: dict[str, list[str]], repeats: int) -> list[dict]:
    """Each run of ``runs_spec`` under every setting in fresh processes, ``repeats`` times,
    the order reversed every other repeat; medians and every run's figure."""
    names = list(settings)
    rows = []
    for algo, env, steps, extra in runs_spec:
        runs: dict[str, list[dict]] = {s: [] for s in names}
        for r in range(repeats):
            for name in (names if r % 2 == 0 else names[::-1]):
                setting = settings[name]
                args = setting(algo, extra) if callable(setting) else setting
                runs[name].append(one_run(algo, env, steps, [*extra, *args]))
        sps = {s: [x["steps_per_second"] for x in v] for s, v in runs.items()}
        med = {s: statistics.median(v) for s, v in sps.items()}
        row = {"algo": algo, "env": env, "arguments": extra, "env_steps": steps,
               "steps_per_second": sps, "median": med,
               "ratio": med[names[0]] / med[names[1]],
               "final_return": {s: [x["final_return"] for x in v] for s, v in runs.items()},
               "cpu_threads": {s: runs[s][0]["cpu_threads"] for s in names}}
        rows.append(row)
        print(f"{algo:7s} {env:16s} {' '.join(extra):18s} "
              + "  ".join(f"{s} {m:>10,.0f}" for s, m in med.items())
              + f"  {names[0]}/{names[1]} {row['ratio']:.2f}   runs: "
              + "; ".join(f"{s} {[round(x) for x in v]}" for s, v in sps.items()), flush=True)
    return rows


def table(rows: list[dict], names: list[str]) -> None:
    a, b = names
    print(f"| algo | env | arguments | {a} (steps/s) | {b} (steps/s) | {a} / {b} "
          f"| every run, {a} | every run, {b} |")
    print("|---|---|---|---:|---:|---:|---|---|")
    for r in rows:
        print(f"| {r['algo']} | {r['env']} | {' '.join(r['arguments'])} | "
              f"{r['median'][a]:,.0f} | {r['median'][b]:,.0f} | {r['ratio']:.2f} | "
              + ", ".join(f"{x:,.0f}" for x in r["steps_per_second"][a]) + " | "
              + ", ".join(f"{x:,.0f}" for x in r["steps_per_second"][b]) + " |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--algos", default=None,
                   help="comma-separated subset of the algorithms (default: all)")
    p.add_argument("--per-core", action="store_true",
                   help="one device against one CPU device per core (--devices N)")
    p.add_argument("--sizes", action="store_true",
                   help="one thread against XLA's pool at growing observation batches, "
                        "around the size where --cpu-threads auto switches")
    p.add_argument("--out", default=None, help="the JSON file (default: results/"
                                               "cpu_threads.json, cpu_per_core.json or "
                                               "cpu_sizes.json)")
    args = p.parse_args()
    if args.per_core:
        spec, settings, name = PER_CORE_RUNS, PER_CORE_SETTINGS, "cpu_per_core.json"
    elif args.sizes:
        spec, settings, name = SIZE_RUNS, SIZE_SETTINGS, "cpu_sizes.json"
    else:
        spec, settings, name = [(*r, []) for r in RUNS], SETTINGS, "cpu_threads.json"
    if args.algos:
        spec = [r for r in spec if r[0] in args.algos.split(",")]
    out = args.out or os.path.join(os.path.dirname(__file__), "results", name)
    rows = compare_settings(spec, settings, args.repeats)
    shown = {k: v if isinstance(v, list) else v.__name__ for k, v in settings.items()}
    write_json(out, {"machine": machine(), "repeats": args.repeats, "settings": shown,
                     "rows": rows})
    print(f"wrote {out}\n")
    table(rows, list(settings))


if __name__ == "__main__":
    main()
