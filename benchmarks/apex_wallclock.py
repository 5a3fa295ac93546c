"""Ape-X vs DQN at equal wall clock on MinAtar, each with a schedule that completes.

    python benchmarks/apex_wallclock.py --seconds 400        # writes results/apex_wallclock.json
    python benchmarks/apex_wallclock.py --quick              # smoke run, ~3 minutes

``benchmarks/apex.py`` compares the algorithms at one env-step budget and reads "equal
wall clock" off the curves, where the slower algorithm is cut short in the middle of
its epsilon schedule. Here every algorithm gets its own env-step budget sized to the
same wall-clock time ``T``:

1. **Calibrate**: each algorithm's steady training rate (env steps/s with the learner
   running, compile excluded) is measured in short compiled calls, the algorithms
   alternating A B A B, median of ``--repeats``. Alternation makes the load of a
   shared machine hit both alike.
2. **Budget**: ``total_timesteps = rate * T`` per seed, so that DQN's epsilon decay and
   every schedule finish within the budget.
3. **Train** all ``--seeds`` as one vmapped batch, then **evaluate** the learner's
   parameters the same way for both: epsilon 0.01, ``--eval-envs`` episodes per seed.

Reported per game and algorithm: the evaluation return (mean and 95% t-interval over
seeds), Welch's t-test of Ape-X against uniform DQN, the budget, the calibrated rate and
the actual training time (which drifts from ``T`` with the load). Configs are
``benchmarks/apex.py``'s (same networks and hyperparameters).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_par import envs
from jaxrl_par.algos import apex, dqn
from jaxrl_par.algos.config import apply_overrides
from jaxrl_par.runner.training import make_chunk_fn, seed_keys, train

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apex import configs, interval

HERE = os.path.dirname(os.path.abspath(__file__))


def _module(cfg):
    return apex if isinstance(cfg, apex.Config) else dqn


def calibration_fn(cfg, seeds: int, updates: int):
    """A compiled call of ``updates`` learning updates of every seed, and its state."""
    cal = dataclasses.replace(cfg, learning_starts=0, total_timesteps=10**9)
    algo = _module(cfg).make(cal)
    keys, _ = seed_keys(list(range(seeds)))
    state = jax.jit(jax.vmap(algo.init))(keys)
    fn = make_chunk_fn(algo, updates).lower(state, jnp.int32(0)).compile()
    state, _ = fn(state, jnp.int32(0))  # fill the buffer past one batch; warm up
    jax.block_until_ready(state)
    return fn, state, updates * algo.env_steps_per_update * seeds


def calibrate(cfgs: dict, seeds: int, repeats: int, seconds_per_call: float) -> dict:
    """Median env steps/s (all seeds) of every config, calls alternating between them."""
    fns = {name: calibration_fn(cfg, seeds, 4) for name, cfg in cfgs.items()}
    # size each call to about ``seconds_per_call`` from one timed probe call
    sized = {}
    for name, (fn, state, _steps) in fns.items():
        t = time.perf_counter()
        state, _ = fn(state, jnp.int32(0))
        jax.block_until_ready(state)
        per_update = (time.perf_counter() - t) / 4
        updates = max(4, int(seconds_per_call / per_update))
        sized[name] = calibration_fn(cfgs[name], seeds, updates)
    rates = {name: [] for name in cfgs}
    for _ in range(repeats):
        for name, (fn, state, steps) in sized.items():
            t = time.perf_counter()
            state, _ = fn(state, jnp.int32(0))
            jax.block_until_ready(state)
            rates[name].append(steps / (time.perf_counter() - t))
            sized[name] = (fn, state, steps)
    return {name: {"median": statistics.median(r), "all": r} for name, r in rates.items()}


def evaluate(algo, states, num_envs: int, max_steps: int, epsilon: float = 0.01):
    """Per-seed mean return of the first episode of ``num_envs`` envs under
    ``algo.act`` (greedy in the learner's parameters) with ``epsilon`` random actions."""
    env = envs.make(algo.config.env, num_envs)
    num_actions = env.num_actions

    def one(state, key):
        k_reset, k_run = jax.random.split(key)
        env_state = env.reset(jax.random.split(k_reset, num_envs))

        def step(carry, k):
            env_state, total, alive = carry
            k_act, k_rand, k_eps, k_env = jax.random.split(k, 4)
            greedy = algo.act(state, env_state.obs, k_act)
            rand = jax.random.randint(k_rand, greedy.shape, 0, num_actions)
            explore = jax.random.uniform(k_eps, greedy.shape) < epsilon
            action = jnp.where(explore, rand, greedy).astype(greedy.dtype)
            env_state, ts = env.step(jax.random.split(k_env, num_envs), env_state, action)
            total = total + ts.reward * alive
            return (env_state, total, alive & ~ts.done), None

        init = (env_state, jnp.zeros(num_envs), jnp.ones(num_envs, bool))
        (_, total, alive), _ = jax.lax.scan(step, init, jax.random.split(k_run, max_steps))
        return jnp.mean(total), jnp.mean(alive.astype(jnp.float32))

    keys = jax.random.split(jax.random.key(10_000), jax.tree.leaves(states)[0].shape[0])
    returns, unfinished = jax.jit(jax.vmap(one))(states, keys)
    return np.asarray(returns).tolist(), np.asarray(unfinished).tolist()


def welch(a, b) -> dict:
    """Welch's t statistic and two-sided p-value of mean(a) - mean(b)."""
    from scipy import stats

    t, p = stats.ttest_ind(np.asarray(a, float), np.asarray(b, float), equal_var=False)
    return {"t": float(t), "p": float(p)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=400.0, help="wall-clock budget T")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--first-seed", type=int, default=0,
                   help="train seeds first..first+seeds-1 (a second run adds new seeds)")
    p.add_argument("--games", default="Breakout-MinAtar,SpaceInvaders-MinAtar")
    p.add_argument("--algos", default="apex,dqn", help="from apex, dqn, dqn_per")
    p.add_argument("--repeats", type=int, default=3, help="calibration calls per algorithm")
    p.add_argument("--eval-envs", type=int, default=32)
    p.add_argument("--eval-steps", type=int, default=2_000)
    p.add_argument("--set", action="append", default=[], metavar="ALGO.FIELD=VALUE",
                   help="override a config field, e.g. apex.learner_steps_per_iteration=8")
    p.add_argument("--quick", action="store_true", help="T = 20 s, 2 seeds, 1 repeat")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    if a.quick:
        a.seconds, a.seeds, a.repeats, a.eval_envs, a.eval_steps = 20.0, 2, 1, 8, 300
    wanted = a.algos.split(",")
    results = {"date": datetime.date.today().isoformat(), "seconds": a.seconds,
               "seeds": a.seeds, "first_seed": a.first_seed, "jax": jax.__version__,
               "devices": str(jax.devices()),
               "command": " ".join(sys.argv), "overrides": a.set, "games": {}}
    out_path = a.out or os.path.join(
        HERE, "results", "apex_wallclock_quick.json" if a.quick else "apex_wallclock.json")
    for game in a.games.split(","):
        cfgs = {k: v for k, v in configs(game, 10**6).items() if k in wanted}
        for item in a.set:
            target, _, value = item.partition("=")
            name, _, field = target.partition(".")
            cfgs[name] = apply_overrides(cfgs[name], [f"{field}={value}"])
        rates = calibrate(cfgs, a.seeds, a.repeats, seconds_per_call=max(2.0, a.seconds / 40))
        res = {}
        for name, cfg in cfgs.items():
            per_seed = rates[name]["median"] / a.seeds * a.seconds
            unit = cfg.env_steps_per_update
            budget = max(unit, int(per_seed // unit) * unit)
            cfg = dataclasses.replace(cfg, total_timesteps=budget,
                                      learning_starts=min(cfg.learning_starts, budget // 4))
            algo = _module(cfg).make(cfg)
            seeds = list(range(a.first_seed, a.first_seed + a.seeds))
            result = train(algo, seeds, num_chunks=8, progress=False)
            ret, unfinished = evaluate(algo, result.state, a.eval_envs, a.eval_steps)
            ret_key = "episode_return_greedy" if isinstance(cfg, apex.Config) else "episode_return"
            tail = max(1, algo.num_updates // 10)
            with np.errstate(all="ignore"):
                train_ret = np.nanmean(result.metrics[ret_key][:, -tail:], axis=1)
            out = {
                "config": {k: (list(v) if isinstance(v, tuple) else v)
                           for k, v in dataclasses.asdict(cfg).items()},
                "calibrated_env_steps_per_s": rates[name],
                "env_steps_per_seed": budget,
                "compile_s": result.compile_seconds,
                "train_s": result.train_seconds,
                "env_steps_per_s": result.steps_per_second,
                "eval_returns": ret,
                "eval_unfinished_fraction": unfinished,
                "eval_return": interval(ret),
                "train_return_last_10pct": interval(train_ret),
            }
            res[name] = out
            print(f"{game} {name}: budget {budget} steps/seed, calibrated "
                  f"{rates[name]['median']:.0f} steps/s, trained {out['train_s']:.0f} s, "
                  f"eval {out['eval_return'][0]:.2f} +- {out['eval_return'][1]:.2f}",
                  flush=True)
        if "apex" in res and "dqn" in res:
            res["apex_vs_dqn"] = welch(res["apex"]["eval_returns"], res["dqn"]["eval_returns"])
            print(game, "Ape-X vs DQN (Welch):", res["apex_vs_dqn"], flush=True)
        results["games"][game] = res
        write(out_path, results)  # after every game: a long run keeps what finished
    results["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    write(out_path, results)
    print("wrote", out_path)


def write(path: str, results: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(results, f, indent=1)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
