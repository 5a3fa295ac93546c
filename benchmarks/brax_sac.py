"""SAC against Brax's own SAC trainer on Brax envs, side by side in one process.

The companion of ``brax_ppo.py`` (its helpers, its shim and its steady-epoch rule). Both
train the same Brax env at one config: ``num_envs`` envs each step once, then
``grad_updates`` gradient steps of 256 transitions follow (ours: ``train_frequency =
num_envs / grad_updates`` env steps per gradient step), uniform replay of 100,000,
``learning_starts`` env steps of uniform random actions first (Brax: ``min_replay_size``,
before its first epoch), 64-64 ReLU actor and twin critics, Adam 3e-4 for both and for
the temperature (from 1), gamma 0.99, Polyak tau 0.005 after every gradient step, no
observation normalisation, 1,000-step episodes. What still differs: Brax's target
entropy is ``-0.5 * action_size``, ours ``-action_size``; Brax's auto-reset returns an
env to its first initial state, ours draws a new one.

Reported as ``brax_ppo.py`` does: training env steps/s over the epochs after the first
two (``WARM_EPOCHS``; ours' first chunk also holds the random-action warm-up), in
``--repeats`` alternated runs on seeds ``--seed + r``; compile seconds (Brax's from its
first two epochs, ours measured apart in the first run); greedy returns (16 episodes).

    taskset -c 0 python benchmarks/brax_sac.py [--envs fast,inverted_pendulum:positional]
        [--repeats 3] [--epochs 5] [--out benchmarks/results/brax_sac.json]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
import warnings

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from brax_ppo import EVAL_EPISODES, WARM_EPOCHS, _device_put_replicated, _returns, brax_env
from common import machine, write_json

from jaxrl_par.algos import sac
from jaxrl_par.evaluate import greedy_returns
from jaxrl_par.train import train

#: env -> env steps per repeat, learning starts included
STEPS = {"fast": 128_000, "inverted_pendulum:positional": 128_000}
HP = {"num_envs": 128, "grad_updates": 32, "ours_num_steps": 8, "batch_size": 256,
      "buffer_size": 100_000, "learning_starts": 3_072, "learning_rate": 3e-4,
      "gamma": 0.99, "tau": 0.005, "hidden": (64, 64)}


def run_brax(spec: str, steps: int, epochs: int, seed: int) -> dict:
    from brax.training.agents.sac import networks as sac_networks
    from brax.training.agents.sac import train as brax_sac

    if not hasattr(jax, "device_put_replicated"):  # removed in jax 0.10
        jax.device_put_replicated = _device_put_replicated
    records = []
    t0 = time.perf_counter()

    def progress(step, metrics):
        records.append((time.perf_counter() - t0, int(step), dict(metrics)))

    networks = functools.partial(sac_networks.make_sac_networks,
                                 hidden_layer_sizes=HP["hidden"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        brax_sac.train(
            brax_env(spec), num_timesteps=steps, episode_length=1000,
            num_envs=HP["num_envs"], num_eval_envs=EVAL_EPISODES,
            learning_rate=HP["learning_rate"], discounting=HP["gamma"], seed=seed,
            batch_size=HP["batch_size"], num_evals=epochs + 1, normalize_observations=False,
            tau=HP["tau"], min_replay_size=HP["learning_starts"],
            max_replay_size=HP["buffer_size"], grad_updates_per_step=HP["grad_updates"],
            deterministic_eval=True, network_factory=networks, progress_fn=progress)
    trained = [r for r in records if "training/sps" in r[2]]
    sps = [float(r[2]["training/sps"]) for r in trained]
    walltime = np.asarray([float(r[2]["training/walltime"]) for r in trained])
    done = np.asarray([r[1] for r in trained]) - HP["learning_starts"]  # prefill: before
    steady = statistics.median(sps[WARM_EPOCHS:])
    # training/walltime starts with the prefill's seconds: taken off with the first epoch's
    # steady-rate share, what remains of the first two epochs is compile.
    return {"env_steps": int(done[-1] + HP["learning_starts"]), "steps_per_s": steady,
            "epoch_steps_per_s": sps,
            "compile_s": float(walltime[WARM_EPOCHS - 1] - done[WARM_EPOCHS - 1] / steady),
            "greedy_return": float(trained[-1][2]["eval/episode_reward"])}


def run_ours(spec: str, steps: int, epochs: int, seed: int) -> dict:
    n = HP["num_envs"]
    cfg = sac.Config(
        env=f"brax:{spec}", num_envs=n, num_steps=HP["ours_num_steps"], total_timesteps=steps,
        buffer_size=HP["buffer_size"], batch_size=HP["batch_size"],
        learning_starts=HP["learning_starts"], train_frequency=n // HP["grad_updates"],
        learning_rate=HP["learning_rate"], alpha_learning_rate=HP["learning_rate"],
        gamma=HP["gamma"], tau=HP["tau"], hidden_sizes=HP["hidden"], activation="relu")
    algo = sac.make(cfg)
    res = train(algo, seed, progress=False, num_chunks=epochs)
    per_update = cfg.env_steps_per_update
    ends = np.asarray(res.chunk_ends)
    secs = np.diff(np.asarray(res.chunk_seconds), prepend=0.0)
    sps = (np.diff(ends, prepend=0) * per_update / secs).tolist()
    greedy = greedy_returns(algo, res.state, num_envs=EVAL_EPISODES)
    return {"env_steps": int(ends[-1]) * per_update,
            "steps_per_s": statistics.median(sps[WARM_EPOCHS:]), "epoch_steps_per_s": sps,
            "compile_s": res.compile_seconds, "greedy_return": float(greedy.mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", default=",".join(STEPS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=5, help=f"> {WARM_EPOCHS}")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the env steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/brax_sac.json")
    args = ap.parse_args()
    if args.epochs <= WARM_EPOCHS:
        raise SystemExit(f"--epochs must be > {WARM_EPOCHS}")
    rows = []
    per_update = HP["num_envs"] * HP["ours_num_steps"]
    for spec in args.envs.split(","):
        if spec not in STEPS:
            raise SystemExit(f"unknown env {spec!r}; one of {', '.join(STEPS)}")
        steps = max(1, round(STEPS[spec] * args.scale / (per_update * args.epochs))) \
            * per_update * args.epochs
        runs = {"brax": [], "ours": []}
        for r in range(args.repeats):
            order = (("brax", run_brax), ("ours", run_ours))
            for who, fn in order if r % 2 == 0 else order[::-1]:
                out = fn(spec, steps, args.epochs, args.seed + r)
                runs[who].append(out)
                print(f"  {spec} {who} run {r}: {out['steps_per_s']:,.0f} steps/s, "
                      f"greedy {out['greedy_return']:.1f}", flush=True)
        med = {w: statistics.median(o["steps_per_s"] for o in runs[w]) for w in runs}
        rows.append({"env": spec, "env_steps": steps, "brax": runs["brax"], "ours": runs["ours"],
                     "brax_steps_per_s": med["brax"], "ours_steps_per_s": med["ours"],
                     "ratio": med["ours"] / med["brax"]})
    print("\n| env | env steps | Brax SAC steps/s | ours steps/s | ours/Brax | compile Brax "
          "/ ours (s) | greedy return Brax / ours |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for row in rows:
        b, o = row["brax"], row["ours"]
        compile_s = [statistics.median(x["compile_s"] for x in b), o[0]["compile_s"]]
        print(f"| {row['env']} | {row['env_steps']:,} | {row['brax_steps_per_s']:,.0f} | "
              f"{row['ours_steps_per_s']:,.0f} | {row['ratio']:.2f} | {compile_s[0]:.1f} / "
              f"{compile_s[1]:.1f} | {_returns(b)} / {_returns(o)} |")
    write_json(args.out, {"machine": machine(), "hp": {**HP, "hidden": list(HP["hidden"])},
                          "repeats": args.repeats, "epochs": args.epochs, "rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
