"""Asynchronous workers beside synchronous ones, two families side by side.

``--family actor-critic`` (default): A3C (threads and round-robin), A2C, PPO.
``--family q``: Gorila (threads and round-robin) and DQN.

In one process, alternated ``--repeats`` times, each on the same env for the same
env-step budget with several seeds as one vmapped batch:

* ``a2c``: one synchronous worker (A3C with ``num_workers=1``), staleness 0;
* ``a3c`` / ``gorila``: 4 workers pushing in the round-robin order inside one compiled
  program (``train(algo, seeds)``), every push 3 pushes stale after the first round;
* ``*-threads-1dev``: the same workers as host threads pushing as they finish, all on
  one device (``train(..., async_workers=AsyncWorkers(algo, [device 0]))``);
* ``*-threads-Ndev``: the threads on N CPU devices, worker ``k`` on device ``k mod N``
  (this script asks XLA for N host devices before jax starts; the single-device cases
  use the first);
* ``ppo`` / ``dqn``: the synchronous (serial) references with their defaults;
* ``a3c-threads-gymnasium`` (``--host``): A3C's threads on one device stepping
  ``gymnasium:<env>`` from Python (:mod:`jaxrl_par.envs.host`);
* ``impala-actor-learner[-gymnasium]`` (``--host``): IMPALA's actors and learner on two
  devices at once, on the JAX env and with the actors stepping gymnasium's.

Reported: final return (mean +- std over seeds, first repeat), training env steps/s
(median over repeats), compile seconds (first build), and the staleness computed by
the server (mean, and the largest of any update's pushes).

    python benchmarks/async_workers.py [--family q] [--repeats 3] [--devices 4] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--devices", type=int, default=4, help="CPU devices for the threads")
    p.add_argument("--family", choices=("actor-critic", "q"), default="actor-critic")
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--budget", type=int, default=500_000)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--quick", action="store_true", help="1/10 of the budget, 1 repeat")
    p.add_argument("--host", action="store_true",
                   help="actor-critic family: also A3C's threads on gymnasium's env (host)")
    p.add_argument("--out", default=None,
                   help="default: results/async_workers_<family>.json")
    args = p.parse_args()
    if args.out is None:
        args.out = os.path.join(os.path.dirname(__file__), "results",
                                f"async_workers_{args.family.replace('-', '_')}.json")
    return args


ARGS = _parse()
if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " "
                               f"--xla_force_host_platform_device_count={ARGS.devices}").strip()

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, write_json

from jaxrl_par.algos import a2c, a3c, dqn, gorila, impala, ppo
from jaxrl_par.parallel.async_workers import AsyncWorkers
from jaxrl_par.runner.training import train


def cases(env: str, budget: int) -> dict:
    """name -> (algorithm, train keyword arguments)."""
    devices = jax.devices()
    many = min(ARGS.devices, len(devices))
    if ARGS.family == "q":
        name, reference = "gorila", {"dqn": (dqn.make(dqn.Config(env=env,
                                                                 total_timesteps=budget)), {})}
        algo = gorila.make(gorila.Config(env=env, total_timesteps=budget))
    else:
        name, reference = "a3c", {
            "ppo": (ppo.make(ppo.Config(env=env, total_timesteps=budget)), {}),
            "a2c": (a2c.make(a2c.Config(env=env, total_timesteps=budget)), {})}
        algo = a3c.make(a3c.Config(env=env, total_timesteps=budget))
        if ARGS.host:  # the same workers stepping gymnasium's env from Python
            gym_algo = a3c.make(a3c.Config(env=f"gymnasium:{env}", total_timesteps=budget))
            reference["a3c-threads-gymnasium"] = (
                gym_algo, {"async_workers": AsyncWorkers(gym_algo, devices[:1])})
            # IMPALA's actors and learner on two devices, on the JAX env and on gymnasium's
            for suffix, env_id in (("", env), ("-gymnasium", f"gymnasium:{env}")):
                reference[f"impala-actor-learner{suffix}"] = (
                    impala.make(impala.Config(env=env_id, total_timesteps=budget)),
                    {"actor_learner": tuple(devices[:2])})
    return {
        **reference,
        name: (algo, {}),
        f"{name}-threads-1dev": (algo, {"async_workers": AsyncWorkers(algo, devices[:1])}),
        f"{name}-threads-{many}dev": (algo,
                                      {"async_workers": AsyncWorkers(algo, devices[:many])}),
    }


def main() -> None:
    budget, repeats = ((ARGS.budget // 10, 1) if ARGS.quick else (ARGS.budget, ARGS.repeats))
    seeds = list(range(ARGS.seeds))
    runs = cases(ARGS.env, budget)
    results: dict[str, list] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, (algo, kw) in runs.items():
            results[name].append(train(algo, seeds, progress=False, **kw))
    rows = {}
    for name, rs in results.items():
        finals = rs[0].final_returns()
        stale = rs[0].metrics.get("staleness")
        rows[name] = {
            "final_returns": [float(x) for x in finals],
            "final_return": float(np.mean(finals)), "final_std": float(np.std(finals)),
            "steps_per_second": statistics.median(r.steps_per_second for r in rs),
            "steps_per_second_runs": [r.steps_per_second for r in rs],
            "compile_seconds": rs[0].compile_seconds,
            "mean_staleness": None if stale is None else float(np.mean(stale)),
            "max_staleness": (None if stale is None
                              else float(np.max(rs[0].metrics["max_staleness"]))),
        }
    base_name = "gorila" if ARGS.family == "q" else "a3c"
    base = rows[base_name]["steps_per_second"]
    print(f"{ARGS.env}, {budget:,} env steps x {len(seeds)} seeds, {repeats} repeat(s)")
    print(f"{'case':21s} {'final return':>16s} {'steps/s':>11s} {'vs ' + base_name:>10s} "
          f"{'compile s':>9s} {'staleness':>9s} {'max':>5s}")
    for name, r in rows.items():
        stale = ("" if r["mean_staleness"] is None
                 else f"{r['mean_staleness']:9.2f} {r['max_staleness']:5.0f}")
        print(f"{name:21s} {r['final_return']:8.1f} +- {r['final_std']:5.1f} "
              f"{r['steps_per_second']:11,.0f} {r['steps_per_second'] / base:9.2f}x "
              f"{r['compile_seconds']:9.1f} {stale}")
    write_json(ARGS.out, {"machine": machine(), "family": ARGS.family, "env": ARGS.env,
                          "total_timesteps": budget,
                          "seeds": seeds, "repeats": repeats, "cases": rows})
    print(f"wrote {ARGS.out}")


if __name__ == "__main__":
    main()
