"""Ape-X vs DQN (uniform) vs DQN + PER on MinAtar, and DQN vs rejax's DQN on speed.

    python benchmarks/apex.py            # full run (budget: --steps, --seeds, --games)
    python benchmarks/apex.py --quick    # smoke run, ~1 minute

For each game and algorithm, ``--seeds`` seeds train as one vmapped batch for the same
env-step budget, in chunks; after each chunk the host records wall time (compile
excluded), env steps and the mean return of the episodes finished in that chunk. The
return at the env-step budget is the last chunk's; the return at equal wall clock is
each algorithm's at the training time of the fastest one. Returns: DQN's training
episodes (epsilon annealed to 0.05) and, for Ape-X, the greedy-ish half of the ladder
(eps <= 0.013; the all-actor mean is reported beside it). Mean and a 95% t-interval
over seeds. Also measured: env steps/s and learner updates/s, and rejax 0.1.3's DQN
beside ours at the same config (its gymnax env wrapped to the old 5-value step).
Writes benchmarks/results/apex.json and apex.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys
import time

# One XLA CPU thread when this process may run on one core only (`taskset -c 1`, as the
# speed check is run): XLA's Eigen pool sizes itself to the machine, not the affinity,
# and its threads time-sliced on one pinned core slow our DQN down whenever another job
# shares the core. Set before jax is imported; an explicit choice in XLA_FLAGS wins.
if (hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) == 1
        and "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", "")):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_cpu_multi_thread_eigen=false").strip()

import jax  # after XLA_FLAGS
import jax.numpy as jnp
import numpy as np

from jaxrl_par.algos import apex, dqn
from jaxrl_par.runner.training import make_chunk_fn, seed_keys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import FiveValueStep, as_users_run, train_vmapped

HERE = os.path.dirname(os.path.abspath(__file__))

T_95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31}


def interval(x):
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return float(np.mean(x)) if x.size else float("nan"), float("nan")
    return float(x.mean()), float(T_95.get(x.size - 1, 2.0) * x.std(ddof=1) / np.sqrt(x.size))


def configs(env, steps):
    common = {"env": env, "total_timesteps": steps, "buffer_size": 20_000, "batch_size": 64,
              "learning_starts": 2_000, "learning_rate": 2.5e-4, "n_step": 3,
              "hidden_sizes": (128,), "loss": "huber"}
    dqn_kw = dict(common, num_envs=8, num_steps=8, train_frequency=8, dueling=True,
                  target_update_period=250, exploration_fraction=0.25, max_grad_norm=10.0)
    # Ape-X learns at 1e-3, which beats 2.5e-4 at equal wall clock on MinAtar; DQN does
    # no better at 1e-3 than at 2.5e-4. Ape-X takes 8 learner steps per 256 env steps (2
    # sampled transitions per env step), which beats 4 at equal wall clock on Breakout
    # and SpaceInvaders. BENCHMARKS.md has the runs behind both choices.
    apex_kw = dict(common, learning_rate=1e-3)
    return {
        "apex": apex.Config(**apex_kw, num_actors=32, num_steps=8,
                            learner_steps_per_iteration=8, target_period=250,
                            actor_sync_period=16),
        "dqn": dqn.Config(**dqn_kw),
        "dqn_per": dqn.Config(**dqn_kw, prioritized=True),
    }


def learner_steps_per_update(cfg):
    if isinstance(cfg, apex.Config):
        return cfg.learner_steps_per_iteration
    return cfg.gradient_steps_per_update


def run(cfg, seeds, num_chunks):
    """Trains ``cfg`` on all seeds; returns the curve and timings."""
    module = apex if isinstance(cfg, apex.Config) else dqn
    algo = module.make(cfg)
    keys, _ = seed_keys(seeds)
    t0 = time.perf_counter()
    state = jax.jit(jax.vmap(algo.init))(keys)
    chunk = max(1, algo.num_updates // num_chunks)
    fn = make_chunk_fn(algo, chunk, jax.tree.map(lambda x: x[0], state))
    compiled = fn.lower(state, jnp.int32(0)).compile()
    compile_s = time.perf_counter() - t0
    ret_key = "episode_return_greedy" if module is apex else "episode_return"
    curve = {"wall": [], "env_steps": [], "return": [], "return_all": []}
    wall, done = 0.0, 0
    while done < algo.num_updates:
        t = time.perf_counter()
        state, m = compiled(state, jnp.int32(done))
        jax.block_until_ready(state)
        wall += time.perf_counter() - t
        n = min(chunk, algo.num_updates - done)
        done += n
        with np.errstate(all="ignore"):
            r = np.nanmean(np.asarray(m[ret_key])[:, :n], axis=1)
            r_all = np.nanmean(np.asarray(m["episode_return"])[:, :n], axis=1)
        curve["wall"].append(wall)
        curve["env_steps"].append(done * algo.env_steps_per_update)
        curve["return"].append(r.tolist())
        curve["return_all"].append(r_all.tolist())
    s = len(keys)
    return {
        "compile_s": compile_s,
        "train_s": wall,
        "env_steps_per_s": done * algo.env_steps_per_update * s / wall,
        "learner_updates_per_s": done * learner_steps_per_update(cfg) * s / wall,
        "curve": curve,
    }


def at_wall(curve, w):
    """Per-seed return of the last chunk finished by wall time ``w``, and its env steps."""
    idx = max([i for i, t in enumerate(curve["wall"]) if t <= w * 1.0001] or [0])
    return curve["return"][idx], curve["env_steps"][idx]


# -- rejax side by side ----------------------------------------------------------------
def rejax_speed(env_id, steps, seeds, num_envs, num_epochs, batch_size):
    """env steps/s of rejax's DQN, compile excluded; ``None`` and the error if it fails.

    Set to the same config as :func:`ours_speed` where rejax has the knob: ReLU (rejax's
    default is swish, dearer per unit), a hard target copy every 500 env steps (rejax's
    default is Polyak 0.99 at that period), epsilon decayed over half the run, gradient
    clipping at 10 (rejax clips elementwise, we clip the global norm), and no
    evaluation inside the timed run (ours has none; rejax's default runs 128 greedy
    episodes at the end).
    """
    import gymnax
    from rejax import DQN

    env, params = gymnax.make(env_id)
    algo = DQN.create(env=FiveValueStep(env), env_params=params, total_timesteps=steps,
                      eval_freq=steps, num_envs=num_envs, num_epochs=num_epochs,
                      batch_size=batch_size, buffer_size=10_000, fill_buffer=1_000,
                      learning_rate=2.5e-4, target_update_freq=500, polyak=0.0,
                      exploration_fraction=0.5, max_grad_norm=10.0,
                      agent_kwargs={"activation": "relu"}, skip_initial_evaluation=True)
    algo = algo.replace(eval_callback=lambda algo, ts, rng: jnp.float32(0.0))
    keys = jax.random.split(jax.random.key(0), seeds)
    _, compile_s, wall = train_vmapped(algo.train, keys)
    return {"compile_s": compile_s, "train_s": wall, "env_steps_per_s": steps * seeds / wall}


def speed_config(env_id, steps, num_envs, num_steps, train_frequency, batch_size) -> dqn.Config:
    """Our DQN at rejax's DQN config (the speed comparison's)."""
    return dqn.Config(env=env_id, total_timesteps=steps, num_envs=num_envs, num_steps=num_steps,
                      train_frequency=train_frequency, batch_size=batch_size,
                      buffer_size=10_000, learning_starts=1_000, hidden_sizes=(64, 64),
                      activation="relu", double_q=True, n_step=1, loss="mse",
                      learning_rate=2.5e-4, max_grad_norm=10.0, exploration_fraction=0.5,
                      target_update_period=50, tau=1.0)  # 50 gradient steps = 500 env steps


def ours_speed(env_id, steps, seeds, num_envs, num_steps, train_frequency, batch_size):
    cfg = speed_config(env_id, steps, num_envs, num_steps, train_frequency, batch_size)
    out = run(cfg, list(range(seeds)), num_chunks=1)
    out.pop("curve")
    return out


def speed_only(repeats: int) -> None:
    """Ours vs rejax DQN (CartPole, 10 envs, one gradient step of 128 per 10 env steps,
    1e5 steps), alternating A B A B; prints one JSON line.

    ``ratio`` is median over median. On a core shared with other jobs a run of ~1 s can
    be slowed by 2x, so the line also gives the median of the per-pair ratios (each
    pair ran back to back) and the ratio of the best runs (least disturbed).
    """
    import statistics

    runs = {"ours": [], "rejax": []}
    for r in range(repeats):
        runs["ours"].append(speed_one("ours"))
        runs["rejax"].append(speed_one("rejax"))
        print(r, runs["ours"][-1], runs["rejax"][-1], flush=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    pairs = [o / x for o, x in zip(runs["ours"], runs["rejax"], strict=True)]
    print(json.dumps({"median": med, "ratio": med["ours"] / med["rejax"],
                      "median_pair_ratio": statistics.median(pairs),
                      "best_ratio": max(runs["ours"]) / max(runs["rejax"]), "all": runs}))


def speed_as_users_run(rounds: int) -> None:
    """The same two runs as :func:`speed_only`, each in a fresh process, not pinned, with
    the XLA:CPU thread pool its users get (``common.USERS_POOL``: ours one thread, rejax
    XLA's default); the order alternates by round. Prints one JSON line: medians, their
    ratio, every run."""
    import statistics

    runs = as_users_run(lambda who: [sys.executable, __file__, "--speed-one", who], rounds,
                        say=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(json.dumps({"median": med, "ratio": med["ours"] / med["rejax"], "all": runs}))


def speed_one(who: str) -> float:
    """``--speed-one ours|rejax``: env steps/s of one of :func:`speed_only`'s runs (CartPole,
    10 envs, one gradient step of 128 per 10 env steps, 1e5 steps)."""
    if who == "ours":
        return ours_speed("CartPole-v1", 100_000, 1, 10, 10, 10, 128)["env_steps_per_s"]
    return rejax_speed("CartPole-v1", 100_000, 1, 10, 1, 128)["env_steps_per_s"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--steps", type=int, default=None, help="env steps per seed")
    p.add_argument("--games", default="Breakout-MinAtar,SpaceInvaders-MinAtar")
    p.add_argument("--speed-only", action="store_true",
                   help="only DQN vs rejax DQN env steps/s on CartPole, interleaved repeats")
    p.add_argument("--repeats", type=int, default=3, help="with --speed-only")
    p.add_argument("--as-users-run", action="store_true",
                   help="with --speed-only: each run in a fresh process, not pinned, ours "
                        "on one XLA:CPU thread and rejax on XLA's default, --repeats rounds")
    p.add_argument("--speed-one", default=None, help=argparse.SUPPRESS)  # a child process
    a = p.parse_args()
    if a.speed_one:
        print(json.dumps(speed_one(a.speed_one)))
        return
    if a.speed_only and a.as_users_run:
        speed_as_users_run(a.repeats)
        return
    if a.speed_only:
        speed_only(a.repeats)
        return
    steps = a.steps or (4_096 if a.quick else 12_288)
    seeds = 2 if a.quick else a.seeds
    chunks = 4 if a.quick else 12
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
               "steps_per_seed": steps, "seeds": seeds,
               "jax": jax.__version__, "devices": str(jax.devices()), "games": {}}
    for game in a.games.split(","):
        res = {}
        for name, cfg in configs(game, steps).items():
            res[name] = run(cfg, list(range(seeds)), chunks)
            res[name]["config"] = {k: (list(v) if isinstance(v, tuple) else v)
                                   for k, v in dataclasses.asdict(cfg).items()}
            print(f"{game} {name}: {res[name]['env_steps_per_s']:.0f} env steps/s, "
                  f"{res[name]['learner_updates_per_s']:.0f} updates/s, "
                  f"compile {res[name]['compile_s']:.1f}s, train {res[name]['train_s']:.1f}s",
                  flush=True)
        w = min(r["train_s"] for r in res.values())
        for _name, r in res.items():
            r["return_at_steps"] = interval(r["curve"]["return"][-1])
            r["return_all_actors_at_steps"] = interval(r["curve"]["return_all"][-1])
            ret_w, steps_w = at_wall(r["curve"], w)
            r["return_at_wall"] = interval(ret_w)
            r["env_steps_at_wall"] = steps_w
        results["games"][game] = {"wall_budget_s": w, "algos": res}
    # speed against rejax at one config: 10 envs, one gradient step of 128 per 10 env
    # steps (PureJaxRL / rejax defaults), CartPole-v1 and an MLP 64-64.
    sp_steps = 20_000 if a.quick else 100_000
    speed = {"env": "CartPole-v1", "steps_per_seed": sp_steps, "seeds": 1,
             "config": "10 envs, 1 gradient step (batch 128) per 10 env steps, MLP 64-64"}
    speed["ours"] = ours_speed("CartPole-v1", sp_steps, 1, 10, 10, 10, 128)
    try:
        speed["rejax"] = rejax_speed("CartPole-v1", sp_steps, 1, 10, 1, 128)
        speed["ratio"] = speed["ours"]["env_steps_per_s"] / speed["rejax"]["env_steps_per_s"]
    except Exception as e:  # noqa: BLE001 - report, do not hide
        speed["rejax"] = {"error": f"{type(e).__name__}: {e}"[:300]}
    print("speed", json.dumps(speed), flush=True)
    for game in a.games.split(","):
        try:
            results["games"][game]["rejax_dqn"] = rejax_speed(game, steps, seeds, 1, 1, 64)
        except Exception as e:  # noqa: BLE001
            results["games"][game]["rejax_dqn"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        print(game, "rejax", results["games"][game]["rejax_dqn"], flush=True)
    results["speed_vs_rejax"] = speed
    results["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    out = os.path.join(HERE, "results", "apex_quick.json" if a.quick else "apex.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    plot(results, out.replace(".json", ".png"))
    print("wrote", out)


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = list(results["games"])
    fig, axs = plt.subplots(1, len(games), figsize=(5 * len(games), 3.6), squeeze=False)
    for ax, game in zip(axs[0], games, strict=True):
        for name, r in results["games"][game]["algos"].items():
            c = r["curve"]
            with np.errstate(all="ignore"):
                ax.plot(c["wall"], np.nanmean(np.asarray(c["return"], float), axis=1),
                        marker="o", label=name)
        ax.axvline(results["games"][game]["wall_budget_s"], color="grey", ls=":")
        ax.set_title(game)
        ax.set_xlabel("wall clock (s, compile excluded)")
        ax.set_ylabel("episode return")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
