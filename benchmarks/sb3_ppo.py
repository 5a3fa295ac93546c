"""PPO on CartPole-v1: jaxrl_par as its users run it against Stable-Baselines3 as its users
run it, at the same hyperparameters.

* ``ours``: ``jaxrl_par.train(ppo.make(cfg), 0)`` on gymnax's CartPole-v1 (the env in the
  process, inside the compiled program), ``cfg`` the CLI's config for
  ``jaxrl-par train ppo --env CartPole-v1`` (the Config defaults under the env's preset:
  8 envs, 32 steps per env per update, 4 epochs of 4 minibatches, Adam 5e-4 constant,
  64-64 tanh networks), with the XLA:CPU set-up the CLI gives (one thread).
* ``sb3``: ``stable_baselines3.PPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs,
  vec_env_cls=DummyVecEnv), device="cpu")`` on gymnasium's CartPole-v1, with the same
  ``n_envs``, ``n_steps``, ``n_epochs``, minibatch size (``batch_size`` = envs x steps /
  minibatches), learning rate, gamma, GAE lambda, clip range, entropy and value
  coefficients, gradient-norm clip and 64-64 tanh networks, so each env step carries the
  same share of gradient work; torch with its default threads.

Each run is a fresh process; the two alternate over ``--rounds`` rounds (the order
reversed every other round). Throughput is env steps per second of the training loop:
ours ``TrainResult.steps_per_second`` (its compile reported apart as ``compile_s``), SB3
``steps / seconds`` of ``model.learn`` (its model built apart, ``setup_s``). Both train
the same env steps (``--steps``, rounded down to whole updates). The return is each
side's mean return of the episodes that finished in the last 5% of its env steps (ours
``TrainResult.final_returns()``, the same per update; SB3 from the ``episode`` infos of
its Monitor wrapper, read by a callback).

    python benchmarks/sb3_ppo.py --steps 150000 --rounds 3 --out benchmarks/results/sb3_ppo.json
    python benchmarks/sb3_ppo.py --side sb3 --steps 20480        # one run, one JSON line

Needs ``pip install stable-baselines3`` (and torch).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

TAIL = 0.05  # the share of env steps whose finished episodes make the final return


def ours_config(steps: int):
    """The CLI's PPO config for CartPole-v1 (Config defaults, then the env's preset) with
    ``steps`` env steps."""
    from jaxrl_par import presets

    return presets.config("ppo", "CartPole-v1", total_timesteps=steps)


def whole_steps(steps: int) -> int:
    """``steps`` rounded down to whole updates of the config (at least one)."""
    cfg = ours_config(steps)
    batch = cfg.num_envs * cfg.num_steps
    return max(1, steps // batch) * batch


def run_ours(steps: int) -> dict:
    from jaxrl_par import train
    from jaxrl_par.algos import ppo

    cfg = ours_config(steps)
    result = train(ppo.make(cfg), 0, progress=False)
    return {"steps": int(result.env_steps[-1]), "steps_per_second": result.steps_per_second,
            "train_s": result.train_seconds, "compile_s": result.compile_seconds,
            "final_return": float(result.final_returns(TAIL)[0])}


def run_sb3(steps: int, torch_threads: int = 0) -> dict:
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    if torch_threads:
        torch.set_num_threads(torch_threads)
    cfg = ours_config(steps)

    class Episodes(BaseCallback):
        """(env steps so far, return) of every episode that finishes."""

        def __init__(self):
            super().__init__()
            self.ends: list[tuple[int, float]] = []

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.ends.append((self.num_timesteps, float(info["episode"]["r"])))
            return True

    t = time.perf_counter()
    env = make_vec_env("CartPole-v1", n_envs=cfg.num_envs, seed=0, vec_env_cls=DummyVecEnv)
    lr = cfg.learning_rate
    model = PPO("MlpPolicy", env, n_steps=cfg.num_steps,
                batch_size=cfg.num_envs * cfg.num_steps // cfg.num_minibatches,
                n_epochs=cfg.update_epochs,
                learning_rate=(lambda left: lr * left) if cfg.anneal_lr else lr,
                gamma=cfg.gamma, gae_lambda=cfg.gae_lambda, clip_range=cfg.clip_eps,
                ent_coef=cfg.ent_coef, vf_coef=cfg.vf_coef, max_grad_norm=cfg.max_grad_norm,
                device="cpu", seed=0,
                policy_kwargs={"net_arch": {"pi": list(cfg.hidden_sizes),
                                            "vf": list(cfg.hidden_sizes)},
                               "activation_fn": torch.nn.Tanh})
    setup_s = time.perf_counter() - t
    episodes = Episodes()
    t = time.perf_counter()
    model.learn(steps, callback=episodes)
    seconds = time.perf_counter() - t
    env.close()
    done = model.num_timesteps
    tail = [r for at, r in episodes.ends if at > (1 - TAIL) * done]
    if not tail and episodes.ends:
        tail = [episodes.ends[-1][1]]  # none finished in the tail: the last one, as ours
    return {"steps": done, "steps_per_second": done / seconds, "train_s": seconds,
            "setup_s": setup_s, "torch_threads": torch.get_num_threads(),
            "final_return": float(np.mean(tail)) if tail else None}


#: Each side's XLA:CPU set-up (``common.pool_env`` arguments): ours one thread, as the
#: CLI gives it (``--cpu-threads auto``); SB3 runs no XLA.
POOLS = {"ours": (1,), "sb3": (None,)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=150_000,
                   help="env steps of every run (rounded down to whole updates)")
    p.add_argument("--rounds", type=int, default=3,
                   help="fresh processes per side, alternated")
    p.add_argument("--torch-threads", type=int, default=0,
                   help="SB3's torch intra-op threads (0: torch's default, one per core, as "
                        "its users get it); on a loaded host the default can slow SB3 many "
                        "times over")
    p.add_argument("--side", choices=sorted(POOLS), default=None,
                   help="one run of one side in this process; prints one JSON line")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                 "sb3_ppo.json"))
    args = p.parse_args()
    if args.side:
        run = (run_ours(args.steps) if args.side == "ours"
               else run_sb3(args.steps, args.torch_threads))
        print(json.dumps(run))
        return 0
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/common.py
    from common import as_users_run, machine, write_json

    steps = whole_steps(args.steps)
    runs = as_users_run(lambda who: [sys.executable, os.path.abspath(__file__), "--side", who,
                                     "--steps", str(steps), "--torch-threads",
                                     str(args.torch_threads)], args.rounds, say=True,
                        setups=POOLS)
    median = {who: statistics.median(r["steps_per_second"] for r in v)
              for who, v in runs.items()}
    finals = {who: [r["final_return"] for r in v] for who, v in runs.items()}
    cfg = ours_config(steps)
    hp = {k: getattr(cfg, k) for k in ("num_envs", "num_steps", "update_epochs",
                                       "num_minibatches", "learning_rate", "anneal_lr",
                                       "gamma", "gae_lambda", "clip_eps", "ent_coef",
                                       "vf_coef", "max_grad_norm", "hidden_sizes")}
    write_json(args.out, {"machine": machine(), "steps": steps, "hyperparameters": hp,
                          "runs": runs, "median_steps_per_second": median,
                          "final_return": finals,
                          "compile_s": statistics.median(r["compile_s"] for r in runs["ours"])})
    print(f"wrote {args.out}: env steps/s ours {median['ours']:,.0f}, SB3 {median['sb3']:,.0f} "
          f"({median['ours'] / median['sb3']:.2f}x); final returns {finals}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
