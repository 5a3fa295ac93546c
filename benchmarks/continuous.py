"""Continuous control: PPO on Pendulum-v1, jaxrl_par against rejax at the same settings.

Both libraries train the same Gaussian actor-critic (two 64-64 tanh MLPs, a learned
state-independent log std) with the same hyperparameters (``HP``: 32 envs x 16 steps,
4 epochs x 4 minibatches, learning rate 1e-3 held constant, as rejax has no annealing,
global-norm clipping at 1.0), rewards divided by the running std of the discounted
return in both (``normalize_rewards``), observations as they are. Seeds are vmapped in
each library (``--seeds``), and each run is compiled apart from its timing.

Returns at the end, per seed: ours is the mean return of the episodes finished in the last
5% of updates (the sampling policy, as it trained); rejax's is its own evaluation at the
end of training (128 episodes, actions sampled from the final policy, as its ``act``
does). Also reported for ours: the greedy return (the mean action, 8 episodes per seed).

Usage: ``taskset -c 0 python benchmarks/continuous.py [--seeds 8] [--total-timesteps
3e5]``; prints a table and writes ``benchmarks/results/continuous.json``.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import ppo as ppo_bench  # benchmarks/ppo.py: both libraries' PPO built alike
from common import machine, train_vmapped, write_json

from jaxrl_par.algos import ppo

ENV = "Pendulum-v1"
NUM_ENVS = 32
HP = {"num_steps": 16, "update_epochs": 4, "num_minibatches": 4, "learning_rate": 1e-3,
      "gamma": 0.99, "gae_lambda": 0.95, "clip_eps": 0.2, "vf_coef": 0.5, "ent_coef": 0.01,
      "max_grad_norm": 1.0}


def ours(seeds: list[int], total_timesteps: int) -> dict:
    from jaxrl_par.runner.evaluation import greedy_returns
    from jaxrl_par.runner.training import train

    algo = ppo.make(ppo_bench.ours_config(ENV, NUM_ENVS, total_timesteps, HP, anneal_lr=False,
                                          normalize_rewards=True))
    res = train(algo, seeds, progress=False, num_chunks=1)
    return {
        "returns": [float(x) for x in res.final_returns(fraction=0.05)],
        "greedy_returns": [float(x) for x in greedy_returns(algo, res.state, num_envs=8)],
        "env_steps": int(res.env_steps[-1]),
        "compile_seconds": res.compile_seconds,
        "train_seconds": res.train_seconds,
        "steps_per_second": res.steps_per_second,
    }


def rejax(seeds: list[int], total_timesteps: int) -> dict:
    algo = ppo_bench.make_rejax(ENV, NUM_ENVS, total_timesteps, HP, normalize_rewards=True)
    keys = jax.vmap(jax.random.key)(np.asarray(seeds))
    (_, (_, returns)), compile_s, train_s = train_vmapped(algo.train, keys)
    per_update = NUM_ENVS * HP["num_steps"]
    steps = total_timesteps // per_update * per_update
    return {
        "returns": [float(x) for x in np.asarray(returns)[:, -1].mean(axis=-1)],
        "env_steps": steps,
        "compile_seconds": compile_s,
        "train_seconds": train_s,
        "steps_per_second": steps * len(seeds) / train_s,
    }


def summary(xs: list[float]) -> str:
    x = np.asarray(xs)
    half = 1.96 * x.std(ddof=1) / np.sqrt(len(x)) if len(x) > 1 else float("nan")
    return f"{x.mean():8.1f} +- {half:5.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--total-timesteps", type=float, default=3e5)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                 "continuous.json"))
    a = p.parse_args()
    if a.seeds < 1:
        p.error("--seeds must be >= 1")
    seeds = list(range(a.first_seed, a.first_seed + a.seeds))
    total = int(a.total_timesteps)
    rows = {"ours": ours(seeds, total), "rejax": rejax(seeds, total)}
    print(f"PPO on {ENV}, {len(seeds)} seeds, {total:,} steps each (mean +- 95% CI over seeds)")
    print(f"{'':6s} {'return':>17s} {'steps/s':>10s} {'train s':>8s} {'compile s':>9s}")
    for who, r in rows.items():
        print(f"{who:6s} {summary(r['returns'])} {r['steps_per_second']:10,.0f} "
              f"{r['train_seconds']:8.1f} {r['compile_seconds']:9.1f}")
    print(f"ours, greedy (mean action): {summary(rows['ours']['greedy_returns'])}")
    write_json(a.out, {"machine": machine(), "env": ENV, "num_envs": NUM_ENVS,
                       "hyperparameters": HP,
                       "seeds": seeds, "total_timesteps": total, **rows})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
