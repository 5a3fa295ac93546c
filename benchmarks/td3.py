"""TD3 (and DDPG) against rejax's TD3 on Pendulum-v1, each run in a fresh process.

Both at one config: 4 envs, one critic step of 256 per env step (rejax:
``num_epochs=4`` per iteration of 4 env steps), an actor step per two critic steps
(``policy_delay=2``), 64-64 ReLU networks, twin critics, a learning rate of 3e-4 for
actor and critics, 5,000 random env steps first, a replay of 100,000, gamma 0.99, no
gradient clipping (rejax: an elementwise clip at 1e6). Noise: ours is in half-widths of
the action box (Pendulum's is 2), rejax's in action units, so ours 0.1 / 0.2 / 0.5
(exploration / target / target clip) are rejax's 0.2 / 0.4 / 1.0. Targets: ours average
with tau 0.005 after every actor step, rejax once per iteration pair (8 env steps, 4
actor steps), so rejax gets polyak 0.995^4 there, the same rate. rejax treats a
truncation (Pendulum's only episode end) as terminal; ours bootstraps it. DDPG
(``--ddpg``) is ours alone at its defaults (one critic, an actor step per critic step).

Each measurement is a fresh Python process (no compile cache: the compile is timed and
reported apart), alternated ours, rejax, ours, rejax... for ``--repeats`` rounds;
reported are medians of training env steps/s of ``--seeds`` seeds as one vmapped batch,
and the greedy return at the end (ours: ``evaluation.greedy_returns``, 128 episodes per
seed; rejax: its own evaluation, 128 episodes, in one extra run that is not timed).
Needs rejax (``pip install -e '.[bench]'``).

    python benchmarks/td3.py [--repeats 2] [--seeds 2] [--steps 30000] [--ddpg]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))

ENV = "Pendulum-v1"


def ours(name: str, steps: int, seeds: int) -> dict:
    import numpy as np

    from jaxrl_par import algos
    from jaxrl_par.runner.evaluation import greedy_returns
    from jaxrl_par.runner.training import train

    module = algos.get(name)
    algo = module.make(module.Config(env=ENV, total_timesteps=steps))
    res = train(algo, list(range(seeds)), progress=False)
    greedy = greedy_returns(algo, res.state, num_envs=128)
    return {"env_steps_per_s": res.steps_per_second, "compile_s": res.compile_seconds,
            "train_s": res.train_seconds, "greedy_return": float(np.mean(greedy)),
            "greedy_returns": [float(x) for x in greedy],
            "final_returns": [float(x) for x in res.final_returns()]}


def rejax_run(steps: int, seeds: int, timed: bool) -> dict:
    import gymnax
    import jax.numpy as jnp
    from common import FiveValueStep, rejax_row
    from rejax import TD3

    env, params = gymnax.make(ENV)
    algo = TD3.create(env=FiveValueStep(env), env_params=params, total_timesteps=steps,
                      eval_freq=steps, num_envs=4, num_epochs=4, batch_size=256,
                      buffer_size=100_000, fill_buffer=5_000, learning_rate=3e-4,
                      gamma=0.99, polyak=0.995 ** 4, target_update_freq=1,
                      max_grad_norm=1e6, exploration_noise=0.2, target_noise=0.4,
                      target_noise_clip=1.0, policy_delay=2,
                      actor_kwargs={"activation": "relu"},
                      critic_kwargs={"activation": "relu"}, skip_initial_evaluation=True)
    if timed:  # no evaluation inside the timed run (ours has none)
        algo = algo.replace(eval_callback=lambda algo, ts, rng: jnp.float32(0.0))
    return rejax_row(algo, steps, seeds, timed)


def fresh(which: str, args) -> dict:
    """One measurement in a new process; its JSON row is the last line it prints."""
    cmd = [sys.executable, __file__, "--one", which, "--steps", str(args.steps),
           "--seeds", str(args.seeds)]
    env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false"}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--steps", type=int, default=30_000)
    p.add_argument("--ddpg", action="store_true", help="also DDPG at its defaults (ours)")
    p.add_argument("--one", choices=("td3", "ddpg", "rejax", "rejax-quality"),
                   help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "td3.json"))
    args = p.parse_args()
    if args.one:
        row = (rejax_run(args.steps, args.seeds, timed=args.one == "rejax")
               if args.one.startswith("rejax") else ours(args.one, args.steps, args.seeds))
        print(json.dumps(row))
        return

    from common import machine, write_json

    names = ["td3", "rejax"] + (["ddpg"] if args.ddpg else [])
    runs: dict[str, list] = {k: [] for k in names}
    for r in range(args.repeats):
        for k in names:
            runs[k].append(fresh(k, args))
        print(r, {k: round(v[-1]["env_steps_per_s"]) for k, v in runs.items()}, flush=True)
    quality = fresh("rejax-quality", args)
    med = {k: statistics.median(x["env_steps_per_s"] for x in v) for k, v in runs.items()}
    greedy = {k: statistics.median(x["greedy_return"] for x in v) for k, v in runs.items()
              if k != "rejax"}
    greedy["rejax"] = quality["greedy_return"]
    compile_s = {k: statistics.median(x["compile_s"] for x in v) for k, v in runs.items()}
    pairs = [o["env_steps_per_s"] / x["env_steps_per_s"]
             for o, x in zip(runs["td3"], runs["rejax"], strict=True)]
    label = {"td3": "ours td3", "ddpg": "ours ddpg", "rejax": "rejax td3"}
    print(f"{'':10s} {'env steps/s':>12s} {'compile s':>9s} {'greedy return':>14s}")
    for k in names:
        print(f"{label[k]:10s} {med[k]:12,.0f} {compile_s[k]:9.1f} {greedy[k]:14.1f}")
    print(f"td3 ours/rejax: {med['td3'] / med['rejax']:.2f}x (median of pair ratios "
          f"{statistics.median(pairs):.2f}x)")
    write_json(args.out, {"machine": machine(), "env": ENV, "steps": args.steps,
                          "seeds": args.seeds, "runs": runs, "rejax_quality": quality,
                          "median_env_steps_per_s": med, "median_compile_s": compile_s,
                          "greedy_return": greedy, "ratio": med["td3"] / med["rejax"],
                          "pair_ratio_median": statistics.median(pairs)})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
