"""A hyperparameter sweep as one vmapped program against the loop a user writes without it.

For PPO and DQN on CartPole-v1, eight learning rates (seed 0 each):

* ``sweep``: ``Config(sweep=("learning_rate",))`` and ``train(..., hparams=...)``: one
  compile, the eight lanes trained at once;
* ``loop``: eight configs, each made and trained alone (each compiles: the learning rate
  is a constant of its program);
* ``seeds``: the default config with eight seeds vmapped, the runner's throughput
  without a sweep, to show what holding the values in the state costs.

Reported: wall time of the whole sweep (compile included) for ``sweep`` and ``loop`` and
their ratio; compile seconds; training env steps/s of ``sweep`` and ``seeds`` as the
median of interleaved repeats. Run it pinned to one core (``taskset -c 0``), as the
numbers in BENCHMARKS.md were.

    python benchmarks/sweep.py [--total-timesteps 200000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, write_json  # noqa: E402

from jaxrl_par.algos import dqn, ppo  # noqa: E402
from jaxrl_par.train import train  # noqa: E402

RATES = [3e-3, 2e-3, 1e-3, 5e-4, 2.5e-4, 1e-4, 5e-5, 2.5e-5]


def _run(algo, seeds, **kw):
    t = time.perf_counter()
    result = train(algo, seeds, progress=False, **kw)
    return result, time.perf_counter() - t


def bench(name: str, module, total: int, repeats: int) -> dict:
    base = {"total_timesteps": total}
    sweep_algo = module.make(module.Config(sweep=("learning_rate",), **base))
    hparams = {"learning_rate": RATES}
    sweep, sweep_wall = _run(sweep_algo, [0] * len(RATES), hparams=hparams)
    loop_wall, loop_compile, loop_returns = 0.0, 0.0, []
    for lr in RATES:
        one, wall = _run(module.make(module.Config(learning_rate=lr, **base)), [0])
        loop_wall += wall
        loop_compile += one.compile_seconds
        loop_returns.append(float(one.final_returns()[0]))
    seeds_algo = module.make(module.Config(**base))
    seeds_first, _ = _run(seeds_algo, list(range(len(RATES))))
    speed = {"sweep": [], "seeds": []}
    for _ in range(repeats):  # interleaved: sweep, seeds, sweep, seeds...
        speed["sweep"].append(_run(sweep_algo, [0] * len(RATES),
                                   hparams=hparams)[0].steps_per_second)
        speed["seeds"].append(_run(seeds_algo, list(range(len(RATES))))[0].steps_per_second)
    return {
        "algo": name, "env": "CartPole-v1", "lanes": len(RATES), "total_timesteps": total,
        "learning_rates": RATES,
        "sweep_wall_s": sweep_wall, "loop_wall_s": loop_wall,
        "loop_over_sweep_wall": loop_wall / sweep_wall,
        "sweep_compile_s": sweep.compile_seconds, "loop_compile_s": loop_compile,
        "seeds_compile_s": seeds_first.compile_seconds,
        "sweep_steps_per_s": statistics.median(speed["sweep"]),
        "seeds_steps_per_s": statistics.median(speed["seeds"]),
        "sweep_over_seeds_speed": statistics.median(speed["sweep"])
        / statistics.median(speed["seeds"]),
        "sweep_final_returns": [float(x) for x in sweep.final_returns()],
        "loop_final_returns": loop_returns,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-timesteps", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--algos", default="ppo,dqn")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "sweep.json"))
    args = p.parse_args()
    modules = {"ppo": ppo, "dqn": dqn}
    rows = [bench(n, modules[n], args.total_timesteps, args.repeats)
            for n in args.algos.split(",")]
    print(f"{'algo':5s} {'lanes':>5s} {'sweep wall':>10s} {'loop wall':>9s} {'ratio':>6s} "
          f"{'compile sweep/loop':>18s} {'sweep steps/s':>13s} {'seeds steps/s':>13s} "
          f"{'ratio':>6s}")
    for r in rows:
        print(f"{r['algo']:5s} {r['lanes']:5d} {r['sweep_wall_s']:9.1f}s {r['loop_wall_s']:8.1f}s "
              f"{r['loop_over_sweep_wall']:5.2f}x {r['sweep_compile_s']:8.1f}s/{r['loop_compile_s']:6.1f}s"
              f"   {r['sweep_steps_per_s']:13,.0f} {r['seeds_steps_per_s']:13,.0f} "
              f"{r['sweep_over_seeds_speed']:5.2f}x")
        print(f"      final returns by learning rate, sweep: "
              f"{np.round(r['sweep_final_returns'], 1).tolist()}")
        print(f"      final returns by learning rate, loop:  "
              f"{np.round(r['loop_final_returns'], 1).tolist()}")
    write_json(args.out, {"machine": machine(), "rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
