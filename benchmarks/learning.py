"""Learning benchmark: every algorithm on the environments of gymnax-blines' table that it
supports, with its preset (``jaxrl_par/presets``) at the published budget, several seeds.

Each cell (algorithm x env) is one program: the seeds vmapped by ``jaxrl_par``'s runner.
Printed per cell: the final training return (mean, std and 95% interval over seeds), the
greedy return (``runner.evaluation.greedy_returns``, 16 episodes per seed), and the
figure the preset's source publishes. Writes ``results/learning_<tag>.json`` and a PNG
grid of the training-return curves (mean over seeds, the band min-max).

    python benchmarks/learning.py                  # every cell, published budgets
    python benchmarks/learning.py --quick          # the small subset (budget-reduced)
    python benchmarks/learning.py --algos dqn --envs CartPole-v1 --seeds 4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time

import numpy as np

from jaxrl_par import algos, presets
from jaxrl_par.runner.evaluation import greedy_returns, spread
from jaxrl_par.runner.training import train

HERE = os.path.dirname(os.path.abspath(__file__))
ALGOS = ("ppo", "dqn", "apex", "sac", "a2c", "impala")
# gymnax-blines' table (gymnax README): classic control and MinAtar
ENVS = ("CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCar-v0",
        "MountainCarContinuous-v0", "Breakout-MinAtar", "SpaceInvaders-MinAtar",
        "Asterix-MinAtar", "Freeway-MinAtar")
# (algo, env, fraction of the preset's budget): the cells that fit ~15 minutes on two
# idle CPU cores, at budgets where each preset already learns most of the way.
QUICK = (("ppo", "CartPole-v1", 1.0), ("ppo", "Acrobot-v1", 0.5),
         ("ppo", "Pendulum-v1", 1.0), ("ppo", "MountainCar-v0", 1.0),
         ("dqn", "CartPole-v1", 1.0), ("apex", "CartPole-v1", 1.0),
         ("sac", "Pendulum-v1", 1.0), ("a2c", "CartPole-v1", 0.5))


def cells(args) -> list[tuple[str, str, float]]:
    """``(algo, env, budget fraction)`` of the run."""
    if args.quick:
        chosen = [c for c in QUICK if (not args.algos or c[0] in args.algos)
                  and (not args.envs or c[1] in args.envs)]
    else:
        chosen = [(a, e, 1.0) for a in (args.algos or ALGOS) for e in (args.envs or ENVS)
                  if e in presets.table(a)]
    return [(a, e, f * args.budget) for a, e, f in chosen]


def run_cell(algo_name: str, env: str, fraction: float, seeds: int, chunks: int) -> dict:
    """Trains one cell on ``seeds`` seeds (one vmapped program); its record."""
    preset = presets.lookup(algo_name, env)
    cfg = presets.config(algo_name, env)
    per_update = algos.get(algo_name).make(cfg).env_steps_per_update
    steps = max(int(cfg.total_timesteps * fraction), per_update)
    algo = algos.get(algo_name).make(dataclasses.replace(cfg, total_timesteps=steps))
    t = time.perf_counter()
    result = train(algo, list(range(seeds)), num_chunks=chunks, progress=False)
    wall = time.perf_counter() - t
    final = result.final_returns()
    greedy = greedy_returns(algo, result.state, num_envs=16)
    curve = result.returns  # [S, U]
    every = max(1, curve.shape[1] // 100)  # at most ~100 points per curve
    fin, gre = spread(final), spread(greedy)
    return {
        "algo": algo_name, "env": env, "preset": preset.name, "source": preset.source,
        "env_steps": int(result.env_steps[-1]), "budget_fraction": fraction, "seeds": seeds,
        "final_return": fin.mean, "final_return_std": fin.std, "final_return_ci95": fin.ci95,
        "final_returns": [None if np.isnan(x) else float(x) for x in final],
        "greedy_return": gre.mean, "greedy_return_std": gre.std,
        "greedy_return_ci95": gre.ci95, "greedy_returns": [float(x) for x in greedy],
        "published": preset.published, "published_source": preset.published_source,
        "compile_seconds": float(result.compile_seconds), "wall_seconds": wall,
        "steps_per_second": float(result.steps_per_second),
        "curve": {"env_steps": [int(x) for x in result.env_steps[every - 1::every]],
                  "mean": _nan_none(np.nanmean(curve, axis=0)[every - 1::every]),
                  "min": _nan_none(np.nanmin(curve, axis=0)[every - 1::every]),
                  "max": _nan_none(np.nanmax(curve, axis=0)[every - 1::every])},
    }


def _nan_none(x) -> list:
    return [None if np.isnan(v) else float(v) for v in np.asarray(x, np.float64)]


def _fmt(x, width=7) -> str:
    return f"{'-':>{width}}" if x is None else f"{x:>{width}.1f}"


def row_text(r: dict) -> str:
    ci = r["final_return_ci95"]
    interval = f"[{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "-"
    return (f"{r['algo']:<7}{r['env']:<26}{r['env_steps']:>11,}{r['seeds']:>4}"
            f"{_fmt(r['final_return'])} +-{_fmt(r['final_return_std'], 6)} {interval:<18}"
            f"{_fmt(r['greedy_return'])}{_fmt(r['published'], 10)}{r['wall_seconds']:>8.0f}")


HEADER = (f"{'algo':<7}{'env':<26}{'env steps':>11}{'S':>4}{'final return (train)':>36}"
          f"{'greedy':>7}{'published':>10}{'wall s':>8}")


def plot(rows: list[dict], path: str) -> None:
    """A grid of curves: one panel per env, one line per algorithm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = [e for e in ENVS if any(r["env"] == e for r in rows)]
    cols = min(3, len(envs))
    nrows = -(-len(envs) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.5 * cols, 3.2 * nrows), squeeze=False)
    for ax, env in zip(axes.flat, envs, strict=False):
        for r in (r for r in rows if r["env"] == env):
            c = r["curve"]
            mean = np.array([np.nan if v is None else v for v in c["mean"]])
            lo = np.array([np.nan if v is None else v for v in c["min"]])
            hi = np.array([np.nan if v is None else v for v in c["max"]])
            line, = ax.plot(c["env_steps"], mean, label=r["algo"])
            ax.fill_between(c["env_steps"], lo, hi, color=line.get_color(), alpha=0.2)
            if r["published"] is not None:
                ax.axhline(r["published"], color=line.get_color(), ls=":", lw=1)
        ax.set_title(env, fontsize=9)
        ax.set_xlabel("env steps per seed", fontsize=8)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(envs):]:
        ax.axis("off")
    fig.suptitle("training return (mean over seeds, band min-max; dotted: published)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the small subset (QUICK)")
    p.add_argument("--algos", type=lambda s: s.split(","), default=None)
    p.add_argument("--envs", type=lambda s: s.split(","), default=None)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--budget", type=float, default=1.0,
                   help="fraction of each cell's budget (default 1: the published one)")
    p.add_argument("--chunks", type=int, default=10)
    p.add_argument("--tag", default=None, help="results/learning_<tag>.json (default: "
                   "quick or full)")
    args = p.parse_args(argv)
    todo = cells(args)
    if not todo:
        print("no cell: --algos/--envs select none of the presets", file=sys.stderr)
        return 2
    tag = args.tag or ("quick" if args.quick else "full")
    out = os.path.join(HERE, "results", f"learning_{tag}.json")
    record = {"machine": {"platform": platform.platform(), "processor": platform.processor(),
                          "cpus": os.cpu_count()},
              "command": " ".join(["python", "benchmarks/learning.py", *sys.argv[1:]]),
              "rows": []}
    print(HEADER, flush=True)
    t0 = time.perf_counter()
    for algo_name, env, fraction in todo:
        row = run_cell(algo_name, env, fraction, args.seeds, args.chunks)
        record["rows"].append(row)
        print(row_text(row), flush=True)
        record["total_seconds"] = time.perf_counter() - t0
        with open(out, "w") as f:
            json.dump(record, f, indent=1)
    png = out[:-len(".json")] + ".png"
    plot(record["rows"], png)
    print(f"total {record['total_seconds']:.0f} s; wrote {out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
