"""The actor-learner paradigm beside the synchronous one: IMPALA against PPO.

Part 1, side by side in one process: IMPALA and PPO train the same env for the same
env-step budget, several seeds as one vmapped batch, alternated ``--repeats`` times.
Reported: final return (mean +- std over seeds), training env steps/s (median over
repeats) and compile seconds (the first build; the repeats reuse the compiled program),
and IMPALA's ratio to PPO. Each algorithm runs
its own defaults, with only ``num_envs`` (and PPO's learning rate on MinAtar, the
README's recipe) set per env.

Part 2, the policy lag: IMPALA on CartPole with the actors re-pulling the parameters
every 1, 4, 16 or 64 learner steps (pipelined), on-policy (``pipeline=False``, lag
0), and at 16 and 64 without the off-policy correction (``off_policy_correction=False``):
the mean measured policy lag and the final return. ``--lag-only`` runs this part alone.

    taskset -c 0 python benchmarks/impala.py [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, write_json

from jaxrl_par.algos import impala, ppo
from jaxrl_par.runner.training import train

# env -> (budget, seeds, {algo: Config changes})
SETTINGS = {
    "CartPole-v1": (500_000, 4, {"ppo": {}, "impala": {}}),
    "Breakout-MinAtar": (1_000_000, 2, {"ppo": {"num_envs": 64, "learning_rate": 5e-4},
                                        "impala": {"num_envs": 64}}),
}
MODULES = {"ppo": ppo, "impala": impala}
SYNC_PERIODS = (1, 4, 16, 64)


def paradigms(env: str, repeats: int, scale: float) -> dict:
    budget, num_seeds, changes = SETTINGS[env]
    budget = int(budget * scale)
    seeds = list(range(num_seeds))
    runs: dict[str, list] = {name: [] for name in MODULES}
    for _ in range(repeats):
        for name, module in MODULES.items():
            cfg = module.Config(env=env, total_timesteps=budget, **changes[name])
            runs[name].append(train(module.make(cfg), seeds, progress=False))
    row = {"env": env, "total_timesteps": budget, "seeds": seeds}
    for name, results in runs.items():
        finals = results[0].final_returns()
        row[name] = {
            "final_returns": [float(x) for x in finals],
            "final_return": float(np.mean(finals)), "final_std": float(np.std(finals)),
            "steps_per_second": statistics.median(r.steps_per_second for r in results),
            # the first build in this process; later repeats reuse the runner's program cache
            "compile_seconds": results[0].compile_seconds,
            "config": changes[name],
        }
    row["impala_over_ppo"] = row["impala"]["steps_per_second"] / row["ppo"]["steps_per_second"]
    return row


def lag(scale: float) -> list[dict]:
    rows = []
    cases = ([(1, False, True)] + [(k, True, True) for k in SYNC_PERIODS]
             + [(k, True, False) for k in SYNC_PERIODS[2:]])
    for sync, pipeline, corrected in cases:
        cfg = impala.Config(total_timesteps=int(500_000 * scale), actor_sync_period=sync,
                            pipeline=pipeline, off_policy_correction=corrected)
        res = train(impala.make(cfg), [0, 1, 2, 3], progress=False)
        finals = res.final_returns()
        rows.append({"actor_sync_period": sync, "pipeline": pipeline,
                     "off_policy_correction": corrected,
                     "mean_policy_lag": float(np.mean(res.metrics["policy_lag"])),
                     "final_returns": [float(x) for x in finals],
                     "final_return": float(np.mean(finals)), "final_std": float(np.std(finals))})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--envs", default=",".join(SETTINGS))
    p.add_argument("--quick", action="store_true", help="1/20 of the budgets, 1 repeat")
    p.add_argument("--lag-only", action="store_true", help="only part 2, the policy lag")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "impala.json"))
    args = p.parse_args()
    scale, repeats = (0.05, 1) if args.quick else (1.0, args.repeats)
    rows = [] if args.lag_only else [paradigms(env, repeats, scale)
                                     for env in args.envs.split(",")]
    print(f"{'env':18s} {'algo':7s} {'final return':>16s} {'steps/s':>11s} {'compile s':>9s}")
    for r in rows:
        for name in MODULES:
            m = r[name]
            print(f"{r['env']:18s} {name:7s} {m['final_return']:8.1f} +- {m['final_std']:5.1f} "
                  f"{m['steps_per_second']:11,.0f} {m['compile_seconds']:9.1f}")
        print(f"{r['env']:18s} impala/ppo steps/s: {r['impala_over_ppo']:.2f}x")
    lags = lag(scale)
    print(f"\n{'actor_sync_period':>17s} {'pipeline':>8s} {'V-trace':>7s} {'mean lag':>9s} "
          f"{'final return':>16s}")
    for r in lags:
        print(f"{r['actor_sync_period']:17d} {r['pipeline']!s:>8s} "
              f"{r['off_policy_correction']!s:>7s} {r['mean_policy_lag']:9.2f} "
              f"{r['final_return']:8.1f} +- {r['final_std']:5.1f}")
    write_json(args.out, {"machine": machine(), "paradigms": rows, "policy_lag": lags,
                          "repeats": repeats, "scale": scale})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
