"""SAC against rejax's SAC on Pendulum-v1, side by side in one process.

Both at one config: 4 envs, one gradient step of 256 per env step (rejax:
``num_epochs=4`` per iteration of 4 env steps), 64-64 ReLU networks, twin critics, a
learning rate of 3e-4 for actor, critics and temperature, 5,000 random env steps first,
a replay of 100,000, gamma 0.99, the target entropy -1, no gradient clipping (rejax:
an elementwise clip at 1e6). Target critics: ours average with tau 0.005 after every
gradient step, rejax after every iteration (``target_update_freq=1`` counts env steps,
once per iteration), so rejax gets polyak 0.995^4 per iteration, the same rate. rejax
treats a truncation (Pendulum's only episode end) as terminal; ours bootstraps it.

Reported, alternated ``--repeats`` times (medians): training env steps/s of ``--seeds``
seeds as one vmapped batch (compile apart, timed from one fresh build each), and the
greedy return at the end (ours: ``evaluate.greedy_returns``, 16 episodes per seed;
rejax: its own evaluation, 128 episodes, in one extra run that is not timed).

    taskset -c 0 python benchmarks/sac.py [--repeats 3] [--seeds 2] [--steps 30000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import FiveValueStep, machine, rejax_row, write_json

from jaxrl_par.algos import sac
from jaxrl_par.runner.evaluation import greedy_returns
from jaxrl_par.runner.training import train

ENV = "Pendulum-v1"


def ours(steps: int, seeds: int) -> dict:
    cfg = sac.Config(env=ENV, total_timesteps=steps)
    algo = sac.make(cfg)
    res = train(algo, list(range(seeds)), progress=False)
    greedy = greedy_returns(algo, res.state, num_envs=16)
    return {"env_steps_per_s": res.steps_per_second, "compile_s": res.compile_seconds,
            "train_s": res.train_seconds, "greedy_return": float(np.mean(greedy)),
            "greedy_returns": [float(x) for x in greedy]}


def rejax_algo(steps: int, timed: bool):
    import gymnax
    from rejax import SAC

    env, params = gymnax.make(ENV)
    algo = SAC.create(env=FiveValueStep(env), env_params=params, total_timesteps=steps,
                      eval_freq=steps, num_envs=4, num_epochs=4, batch_size=256,
                      buffer_size=100_000, fill_buffer=5_000, learning_rate=3e-4,
                      gamma=0.99, polyak=0.995 ** 4, target_update_freq=1,
                      max_grad_norm=1e6, hidden_layer_sizes=(64, 64),
                      agent_kwargs={"activation": "relu"}, skip_initial_evaluation=True)
    if timed:  # no evaluation inside the timed run (ours has none)
        algo = algo.replace(eval_callback=lambda algo, ts, rng: jnp.float32(0.0))
    return algo


def rejax_run(steps: int, seeds: int, timed: bool = True) -> dict:
    algo = rejax_algo(steps, timed)
    return rejax_row(algo, steps, seeds, timed)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--steps", type=int, default=30_000)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "sac.json"))
    args = p.parse_args()
    runs: dict[str, list] = {"ours": [], "rejax": []}
    for r in range(args.repeats):
        runs["ours"].append(ours(args.steps, args.seeds))
        runs["rejax"].append(rejax_run(args.steps, args.seeds))
        print(r, {k: round(v[-1]["env_steps_per_s"]) for k, v in runs.items()}, flush=True)
    quality = rejax_run(args.steps, args.seeds, timed=False)
    med = {k: statistics.median(x["env_steps_per_s"] for x in v) for k, v in runs.items()}
    pairs = [o["env_steps_per_s"] / x["env_steps_per_s"]
             for o, x in zip(runs["ours"], runs["rejax"], strict=True)]
    print(f"{'':6s} {'env steps/s':>12s} {'compile s':>9s} {'greedy return':>14s}")
    print(f"{'ours':6s} {med['ours']:12,.0f} {runs['ours'][0]['compile_s']:9.1f} "
          f"{runs['ours'][0]['greedy_return']:14.1f}")
    print(f"{'rejax':6s} {med['rejax']:12,.0f} {runs['rejax'][0]['compile_s']:9.1f} "
          f"{quality['greedy_return']:14.1f}")
    print(f"ours/rejax: {med['ours'] / med['rejax']:.2f}x (median of pair ratios "
          f"{statistics.median(pairs):.2f}x)")
    write_json(args.out, {"machine": machine(), "env": ENV, "steps": args.steps,
                          "seeds": args.seeds, "runs": runs, "rejax_quality": quality,
                          "median_env_steps_per_s": med,
                          "ratio": med["ours"] / med["rejax"],
                          "pair_ratio_median": statistics.median(pairs)})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
