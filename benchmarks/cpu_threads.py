"""Training speed on CPU by the size of XLA:CPU's thread pool (``--cpu-threads``).

Each algorithm trains through the CLI as a user runs it, not pinned to a core, in fresh
processes that alternate ``--cpu-threads auto`` (one thread for a run of one program)
and ``--cpu-threads default`` (XLA's: one per core), ``--repeats`` times each. Prints the
median env steps/s of each and their ratio, with every run's figure (runs on a shared
host vary from process to process), and writes ``benchmarks/results/cpu_threads.json``::

    python benchmarks/cpu_threads.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, pool_env, write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: (algorithm, env, env steps per run): each run trains for ~2-10 s after its compile.
RUNS = [("ppo", "CartPole-v1", 300_000), ("a2c", "CartPole-v1", 300_000),
        ("impala", "CartPole-v1", 300_000), ("dqn", "CartPole-v1", 100_000),
        ("apex", "CartPole-v1", 100_000), ("sac", "Pendulum-v1", 20_000)]
SETTINGS = ("auto", "default")


def one_run(algo: str, env: str, steps: int, setting: str) -> dict:
    """One CLI training run in a fresh process; its JSON summary."""
    cmd = [sys.executable, "-m", "jaxrl_par", "train", algo, "--env", env,
           "--total-timesteps", str(steps), "--cpu-threads", setting, "--json",
           "--no-progress"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=pool_env(None),
                         timeout=900, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--algos", default=",".join(a for a, _, _ in RUNS),
                   help="comma-separated subset of: " + ", ".join(a for a, _, _ in RUNS))
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                 "cpu_threads.json"))
    args = p.parse_args()
    chosen = args.algos.split(",")
    rows = []
    for algo, env, steps in (r for r in RUNS if r[0] in chosen):
        runs: dict[str, list[dict]] = {s: [] for s in SETTINGS}
        for r in range(args.repeats):
            for setting in (SETTINGS if r % 2 == 0 else SETTINGS[::-1]):
                runs[setting].append(one_run(algo, env, steps, setting))
        sps = {s: [x["steps_per_second"] for x in v] for s, v in runs.items()}
        med = {s: statistics.median(v) for s, v in sps.items()}
        row = {"algo": algo, "env": env, "env_steps": steps, "steps_per_second": sps,
               "median": med, "ratio_auto_to_default": med["auto"] / med["default"],
               "cpu_threads": {s: runs[s][0]["cpu_threads"] for s in SETTINGS}}
        rows.append(row)
        print(f"{algo:7s} {env:12s} auto {med['auto']:>10,.0f}  default {med['default']:>10,.0f}"
              f"  auto/default {row['ratio_auto_to_default']:.2f}   runs: auto "
              f"{[round(x) for x in sps['auto']]} default {[round(x) for x in sps['default']]}",
              flush=True)
    write_json(args.out, {"machine": machine(), "repeats": args.repeats, "rows": rows})
    print(f"wrote {args.out}\n")
    print("| algo | env | auto: one thread (steps/s) | XLA's default (steps/s) | auto / default "
          "| every run, auto | every run, default |")
    print("|---|---|---:|---:|---:|---|---|")
    for r in rows:
        print(f"| {r['algo']} | {r['env']} | {r['median']['auto']:,.0f} | "
              f"{r['median']['default']:,.0f} | {r['ratio_auto_to_default']:.2f} | "
              + ", ".join(f"{x:,.0f}" for x in r["steps_per_second"]["auto"]) + " | "
              + ", ".join(f"{x:,.0f}" for x in r["steps_per_second"]["default"]) + " |")


if __name__ == "__main__":
    main()
