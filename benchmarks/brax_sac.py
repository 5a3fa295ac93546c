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
import sys

sys.path.insert(0, os.path.dirname(__file__))
from brax_ppo import (
    EVAL_EPISODES,
    WARM_EPOCHS,
    alternate,
    brax_env,
    brax_record,
    ours_record,
    report,
)

from jaxrl_par.algos import sac
from jaxrl_par.runner.training import train

#: env -> env steps per repeat, learning starts included
STEPS = {"fast": 128_000, "inverted_pendulum:positional": 128_000}
HP = {"num_envs": 128, "grad_updates": 32, "ours_num_steps": 8, "batch_size": 256,
      "buffer_size": 100_000, "learning_starts": 3_072, "learning_rate": 3e-4,
      "gamma": 0.99, "tau": 0.005, "hidden": (64, 64)}


def run_brax(spec: str, steps: int, epochs: int, seed: int) -> dict:
    from brax.training.agents.sac import networks as sac_networks
    from brax.training.agents.sac import train as brax_sac

    networks = functools.partial(sac_networks.make_sac_networks,
                                 hidden_layer_sizes=HP["hidden"])
    return brax_record(
        brax_sac.train, prefill_steps=HP["learning_starts"], environment=brax_env(spec),
        num_timesteps=steps, episode_length=1000, num_envs=HP["num_envs"],
        num_eval_envs=EVAL_EPISODES, learning_rate=HP["learning_rate"],
        discounting=HP["gamma"], seed=seed, batch_size=HP["batch_size"],
        num_evals=epochs + 1, normalize_observations=False, tau=HP["tau"],
        min_replay_size=HP["learning_starts"], max_replay_size=HP["buffer_size"],
        grad_updates_per_step=HP["grad_updates"], deterministic_eval=True,
        network_factory=networks)


def run_ours(spec: str, steps: int, epochs: int, seed: int) -> dict:
    n = HP["num_envs"]
    cfg = sac.Config(
        env=f"brax:{spec}", num_envs=n, num_steps=HP["ours_num_steps"], total_timesteps=steps,
        buffer_size=HP["buffer_size"], batch_size=HP["batch_size"],
        learning_starts=HP["learning_starts"], train_frequency=n // HP["grad_updates"],
        learning_rate=HP["learning_rate"], alpha_learning_rate=HP["learning_rate"],
        gamma=HP["gamma"], tau=HP["tau"], hidden_sizes=HP["hidden"], activation="relu")
    algo = sac.make(cfg)
    return ours_record(algo, train(algo, seed, progress=False, num_chunks=epochs),
                       cfg.env_steps_per_update)


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
    rows = alternate(args.envs.split(","), STEPS, HP["num_envs"] * HP["ours_num_steps"],
                     args, run_brax, run_ours)
    report(rows, "SAC", args, HP)


if __name__ == "__main__":
    main()
