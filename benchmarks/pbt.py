"""Population based training against the plain sweep it starts from, at the same budget.

Eight lanes start at eight learning rates spread over four decades (most of them too
small to learn in the budget), one seed each; the same population trains once as a
plain sweep and once with PBT (exploit/explore every ``--interval`` updates). Repeated
for ``--repeats`` seeds of the whole population. Reported per algorithm: the mean and
best final return over the lanes (mean over repeats, with the spread), and the wall
time of both (PBT's host steps and state copies included).

    taskset -c 0 python benchmarks/pbt.py [--algos ppo,dqn] [--repeats 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, write_json

from jaxrl_par.algos import dqn, ppo
from jaxrl_par.runner.pbt import PBT
from jaxrl_par.runner.training import train

RATES = [1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3]
MODULES = {"ppo": ppo, "dqn": dqn}
TOTAL = {"ppo": 200_000, "dqn": 100_000}


def run(name: str, repeats: int, interval_fraction: float) -> dict:
    module = MODULES[name]
    algo = module.make(module.Config(total_timesteps=TOTAL[name], sweep=("learning_rate",)))
    interval = max(1, int(algo.num_updates * interval_fraction))
    out = {"algo": name, "env": "CartPole-v1", "total_timesteps": TOTAL[name],
           "learning_rates": RATES, "interval_updates": interval, "repeats": []}
    for r in range(repeats):
        seeds = [r] * len(RATES)
        row = {"seed": r}
        for mode, pbt in (("sweep", None), ("pbt", PBT(interval=interval))):
            t = time.perf_counter()
            res = train(algo, seeds, hparams={"learning_rate": RATES}, pbt=pbt,
                        progress=False)
            finals = res.final_returns()
            row[mode] = {"final_returns": [float(x) for x in finals],
                         "mean": float(np.nanmean(finals)), "best": float(np.nanmax(finals)),
                         "final_learning_rates": [float(x) for x in
                                                  res.hparams["learning_rate"]],
                         "wall_s": time.perf_counter() - t,
                         "train_s": res.train_seconds}
        out["repeats"].append(row)
    for mode in ("sweep", "pbt"):
        means = [row[mode]["mean"] for row in out["repeats"]]
        bests = [row[mode]["best"] for row in out["repeats"]]
        out[mode] = {"mean_of_lanes": float(np.mean(means)), "mean_std": float(np.std(means)),
                     "best_lane": float(np.mean(bests)), "best_std": float(np.std(bests)),
                     "train_s": float(np.median([row[mode]["train_s"]
                                                 for row in out["repeats"]]))}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", default="ppo,dqn")
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--interval-fraction", type=float, default=0.1,
                   help="updates between PBT steps, as a share of the run")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "pbt.json"))
    args = p.parse_args()
    rows = [run(n, args.repeats, args.interval_fraction) for n in args.algos.split(",")]
    print(f"{'algo':5s} {'mode':6s} {'mean over lanes':>18s} {'best lane':>16s} "
          f"{'train s':>8s}")
    for r in rows:
        for mode in ("sweep", "pbt"):
            m = r[mode]
            print(f"{r['algo']:5s} {mode:6s} {m['mean_of_lanes']:9.1f} +- {m['mean_std']:5.1f} "
                  f"{m['best_lane']:8.1f} +- {m['best_std']:4.1f} {m['train_s']:8.1f}")
    write_json(args.out, {"machine": machine(), "rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
