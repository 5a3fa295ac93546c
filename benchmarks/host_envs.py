"""Host vector envs: jaxrl_par's PPO, SAC and TD3 on gymnasium envs stepped in subprocesses
(``grouped``, the default: a subprocess per core, each stepping a group of the envs;
``async``: gymnasium's AsyncVectorEnv, a subprocess per env) or in-process
(``sync``: SyncVectorEnv), against stable-baselines3's PPO, SAC and TD3 on SubprocVecEnv
and DummyVecEnv at the same num_envs and hyperparameters.

Every case runs in a fresh process, as its users run it; throughput is env steps per
second of the training loop (jaxrl_par's compile time is reported apart; SB3 compiles
nothing); for the replay learners (SAC, TD3) also gradient (critic) steps per second,
``updates_per_second``. For jaxrl_par the host loop's timing says how the wall clock split between
stepping the envs, waiting for the device, and the host's own work.

    python benchmarks/host_envs.py                       # the table, and JSON
    python benchmarks/host_envs.py --ppo-steps 100000 --sac-steps 30000 --solve
    python benchmarks/host_envs.py --case jaxrl_par:ppo:8:grouped --steps 50000  # one case
    python benchmarks/host_envs.py --no-ppo --no-sac --td3-steps 10000           # TD3 only
    python benchmarks/host_envs.py --overlap     # DQN and TD3, overlap_learning off and on

``--overlap`` runs DQN on gymnasium:CartPole-v1 and TD3 on gymnasium:Pendulum-v1 with the
grouped vector env, ``overlap_learning`` off and on, each in a fresh process with two CPU
devices and a one-thread pool (what the CLI's ``--overlap-learning`` sets up, for both),
the two alternated, and prints the medians of ``--repeats`` runs: env steps/s, gradient
steps/s and the host loop's shares of the wall clock.

Needs ``pip install stable-baselines3`` for the peers (they are skipped without it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

PPO_HP = {"num_steps": 128, "update_epochs": 4, "num_minibatches": 4, "learning_rate": 2.5e-4,
          "gamma": 0.99, "gae_lambda": 0.95, "clip_eps": 0.2, "ent_coef": 0.01,
          "vf_coef": 0.5, "max_grad_norm": 0.5}
SAC_HP = {"num_envs": 4, "learning_starts": 5_000, "batch_size": 256, "learning_rate": 3e-4,
          "gamma": 0.99, "tau": 0.005}
# TD3's on both sides: one critic step per env step (4 per step of the 4 envs), an actor
# and target step per 2 critic steps, noises in half-widths of the action box (SB3 acts
# and stores actions scaled to [-1, 1]), 64-64 networks.
TORCH_THREADS = 0  # SB3's torch threads (0: torch's default, one per core); --torch-threads
TD3_HP = {"num_envs": 4, "learning_starts": 1_000, "batch_size": 256, "learning_rate": 3e-4,
          "gamma": 0.99, "tau": 0.005, "policy_delay": 2, "exploration_noise": 0.1,
          "target_noise": 0.2, "target_noise_clip": 0.5}
# DQN's defaults (10 envs x 10 steps an update, a gradient step per 10 env steps), learning
# from 1,000 steps so that a short run learns most of the time.
DQN_HP = {"learning_starts": 1_000}
OVERLAP_MODES = ("plain", "overlap")  # a case's fifth field: overlap_learning off, on


def run_jaxrl_par(algo_name: str, num_envs: int, vector_env: str, steps: int,
                  overlap: bool = False) -> dict:
    import numpy as np

    from jaxrl_par.algos import dqn, ppo, sac, td3
    from jaxrl_par.parallel.host_loop import HostLoop
    from jaxrl_par.runner.training import train

    if algo_name == "dqn":
        cfg = dqn.Config(env="gymnasium:CartPole-v1", num_envs=num_envs,
                         total_timesteps=steps, **DQN_HP)
        algo = dqn.make(cfg)
    elif algo_name == "ppo":
        cfg = ppo.Config(env="gymnasium:CartPole-v1", num_envs=num_envs,
                         total_timesteps=steps, **PPO_HP)
        algo = ppo.make(cfg)
    elif algo_name == "sac":
        cfg = sac.Config(env="gymnasium:Pendulum-v1", total_timesteps=steps, **SAC_HP)
        algo = sac.make(cfg)
    else:
        cfg = td3.Config(env="gymnasium:Pendulum-v1", total_timesteps=steps,
                         hidden_sizes=(64, 64), train_frequency=1, **TD3_HP)
        algo = td3.make(cfg)
    loop = HostLoop(algo, vector_env, overlap=overlap)
    result = train(algo, 0, progress=False, num_chunks=10, vector_env=loop)
    loop.close()
    updates = {}
    if algo_name in ("sac", "td3", "dqn"):
        gradient_steps = int(np.asarray(result.state.gradient_steps)[0])
        updates = {"gradient_steps": gradient_steps,
                   "updates_per_second": gradient_steps / result.train_seconds}
    return {**updates, "steps_per_second": result.steps_per_second,
            "train_seconds": result.train_seconds, "compile_seconds": result.compile_seconds,
            "final_return": float(result.final_returns(0.05)[0]),
            "busy": loop.timing.fractions(), "act_device": str(loop.act_device)}


def run_sb3(algo_name: str, num_envs: int, vector_env: str, steps: int) -> dict:
    import numpy as np
    import torch
    from stable_baselines3 import PPO, SAC, TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    if TORCH_THREADS:
        torch.set_num_threads(TORCH_THREADS)
    vec_cls = SubprocVecEnv if vector_env == "subproc" else DummyVecEnv
    if algo_name == "ppo":
        env = make_vec_env("CartPole-v1", n_envs=num_envs, seed=0, vec_env_cls=vec_cls)
        hp = PPO_HP
        model = PPO("MlpPolicy", env, n_steps=hp["num_steps"],
                    batch_size=num_envs * hp["num_steps"] // hp["num_minibatches"],
                    n_epochs=hp["update_epochs"],
                    learning_rate=lambda left: hp["learning_rate"] * left,
                    gamma=hp["gamma"], gae_lambda=hp["gae_lambda"], clip_range=hp["clip_eps"],
                    ent_coef=hp["ent_coef"], vf_coef=hp["vf_coef"],
                    max_grad_norm=hp["max_grad_norm"], device="cpu", seed=0,
                    policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]},
                                   "activation_fn": torch.nn.Tanh})
    elif algo_name == "td3":
        hp = TD3_HP
        env = make_vec_env("Pendulum-v1", n_envs=hp["num_envs"], seed=0, vec_env_cls=vec_cls)
        dim = env.action_space.shape[0]
        model = TD3("MlpPolicy", env, learning_starts=hp["learning_starts"],
                    batch_size=hp["batch_size"], learning_rate=hp["learning_rate"],
                    gamma=hp["gamma"], tau=hp["tau"], train_freq=1,
                    gradient_steps=hp["num_envs"], policy_delay=hp["policy_delay"],
                    action_noise=NormalActionNoise(np.zeros(dim),
                                                   hp["exploration_noise"] * np.ones(dim)),
                    target_policy_noise=hp["target_noise"],
                    target_noise_clip=hp["target_noise_clip"], device="cpu", seed=0,
                    policy_kwargs={"net_arch": [64, 64]})
    else:
        hp = SAC_HP
        env = make_vec_env("Pendulum-v1", n_envs=hp["num_envs"], seed=0, vec_env_cls=vec_cls)
        # one gradient step per env step of all envs, as jaxrl_par's train_frequency=1
        model = SAC("MlpPolicy", env, learning_starts=hp["learning_starts"],
                    batch_size=hp["batch_size"], learning_rate=hp["learning_rate"],
                    gamma=hp["gamma"], tau=hp["tau"], train_freq=1,
                    gradient_steps=hp["num_envs"], device="cpu", seed=0,
                    policy_kwargs={"net_arch": [64, 64]})
    t = time.perf_counter()
    model.learn(steps)
    seconds = time.perf_counter() - t
    returns = [info["r"] for info in model.ep_info_buffer]
    env.close()
    updates = {}
    if algo_name in ("sac", "td3"):
        gradient_steps = model._n_updates  # SB3 counts its gradient steps here
        updates = {"gradient_steps": gradient_steps,
                   "updates_per_second": gradient_steps / seconds}
    return {**updates, "steps_per_second": steps / seconds, "train_seconds": seconds,
            "compile_seconds": 0.0,
            "final_return": float(np.mean(returns)) if returns else float("nan")}


def one_case(case: str, steps: int) -> dict:
    """``case`` = ``library:algo:num_envs:vector_env``, or for jaxrl_par with a fifth
    field ``plain`` or ``overlap`` (``overlap_learning`` off or on; either runs with two
    CPU devices and a one-thread pool, set here before jax starts); its figures as a
    dict."""
    library, algo_name, num_envs, vector_env, *mode = case.split(":")
    if library != "jaxrl_par":
        return {"case": case, "steps": steps,
                **run_sb3(algo_name, int(num_envs), vector_env, steps)}
    if mode:
        from jaxrl_par.platform import cpu_threads

        cpu_threads.limit()  # as the CLI's --cpu-threads auto
        cpu_threads.devices(2)  # as the CLI's --overlap-learning, for both modes
    return {"case": case, "steps": steps,
            **run_jaxrl_par(algo_name, int(num_envs), vector_env, steps,
                            overlap=mode == ["overlap"])}


def overlap_table(dqn_steps: int, td3_steps: int, repeats: int) -> list[dict]:
    """DQN (CartPole) and TD3 (Pendulum) on the grouped vector env, ``overlap_learning``
    off and on, alternated in fresh processes ``repeats`` times; prints and returns each
    case's medians (env steps/s, gradient steps/s, the host loop's shares)."""
    import numpy as np

    cases = [(f"jaxrl_par:{name}:{n}:grouped:{mode}", steps)
             for name, n, steps in (("dqn", 10, dqn_steps), ("td3", 4, td3_steps))
             for mode in OVERLAP_MODES]
    runs: dict[str, list[dict]] = {case: [] for case, _ in cases}
    for _ in range(repeats):
        for case, steps in cases:
            row = fresh(case, steps)
            if row is not None:
                runs[case].append(row)
    print(f"{'case':34s} {'steps':>7s} {'runs':>4s} {'env steps/s':>11s} "
          f"{'grad steps/s':>12s} {'env':>5s} {'device':>6s} {'host':>5s}  acts on")
    rows = []
    for case, steps in cases:
        done = runs[case]
        if not done:
            continue
        row = {"case": case, "steps": steps, "runs": len(done),
               "steps_per_second": float(np.median([r["steps_per_second"] for r in done])),
               "updates_per_second": float(np.median([r["updates_per_second"]
                                                      for r in done])),
               "busy": {k: float(np.median([r["busy"][k] for r in done]))
                        for k in ("env", "device", "host")},
               "act_device": done[0]["act_device"], "each": done}
        rows.append(row)
        busy = row["busy"]
        print(f"{case:34s} {steps:7d} {len(done):4d} {row['steps_per_second']:11.0f} "
              f"{row['updates_per_second']:12.0f} {busy['env']:5.0%} {busy['device']:6.0%} "
              f"{busy['host']:5.0%}  {row['act_device']}", flush=True)
    return rows


def fresh(case: str, steps: int) -> dict | None:
    """:func:`one_case` in a fresh process (None if it failed)."""
    out = subprocess.run([sys.executable, __file__, "--case", case, "--steps", str(steps),
                          "--torch-threads", str(TORCH_THREADS)],
                         capture_output=True, text=True, env=dict(os.environ))
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    print(f"{case} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", help="one case, library:algo:num_envs:vector_env")
    p.add_argument("--steps", type=int, default=50_000, help="env steps of --case")
    p.add_argument("--ppo-steps", type=int, default=100_000)
    p.add_argument("--sac-steps", type=int, default=30_000)
    p.add_argument("--num-envs", type=int, nargs="+", default=[8, 32])
    p.add_argument("--solve", action="store_true",
                   help="also PPO's defaults (500,000 steps, 4 envs) on gymnasium:CartPole-v1")
    p.add_argument("--td3-steps", type=int, default=30_000)
    p.add_argument("--no-ppo", action="store_true")
    p.add_argument("--no-sac", action="store_true")
    p.add_argument("--subprocesses-only", action="store_true",
                   help="only envs in subprocesses: jaxrl_par's grouped and async, SB3's "
                        "SubprocVecEnv")
    p.add_argument("--no-td3", action="store_true")
    p.add_argument("--no-async", action="store_true",
                   help="skip jaxrl_par's async cases (gymnasium's AsyncVectorEnv, a "
                        "subprocess per env), which the report only cites in a note")
    p.add_argument("--torch-threads", type=int, default=0,
                   help="SB3's torch intra-op threads (0: torch's default); on a loaded host "
                        "torch's default threads can slow it many times over")
    p.add_argument("--overlap", action="store_true",
                   help="only DQN and TD3 with overlap_learning off and on (grouped envs, "
                        "fresh processes alternated, medians of --repeats)")
    p.add_argument("--overlap-dqn-steps", type=int, default=20_000)
    p.add_argument("--overlap-td3-steps", type=int, default=5_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None,
                   help="where the results go (benchmarks/results/host_envs.json, with "
                        "--overlap host_overlap.json)")
    args = p.parse_args()
    global TORCH_THREADS
    TORCH_THREADS = args.torch_threads
    if args.case:
        print(json.dumps(one_case(args.case, args.steps)))
        return 0
    if args.overlap:
        rows = overlap_table(args.overlap_dqn_steps, args.overlap_td3_steps, args.repeats)
        _write(args.json or "benchmarks/results/host_overlap.json", rows)
        return 0
    try:
        import stable_baselines3  # noqa: F401
        peers = True
    except ImportError:
        print("stable-baselines3 is not installed: its cases are skipped "
              "(pip install stable-baselines3)", file=sys.stderr)
        peers = False
    cases = []
    for n in [] if args.no_ppo else args.num_envs:
        cases += [(f"jaxrl_par:ppo:{n}:grouped", args.ppo_steps),
                  (f"jaxrl_par:ppo:{n}:async", args.ppo_steps),
                  (f"jaxrl_par:ppo:{n}:sync", args.ppo_steps)]
        if peers:
            cases += [(f"sb3:ppo:{n}:subproc", args.ppo_steps),
                      (f"sb3:ppo:{n}:dummy", args.ppo_steps)]
    if not args.no_sac:
        cases += [(f"jaxrl_par:sac:4:{v}", args.sac_steps) for v in ("grouped", "async", "sync")]
        if peers:
            cases += [("sb3:sac:4:subproc", args.sac_steps), ("sb3:sac:4:dummy",
                                                             args.sac_steps)]
    if not args.no_td3:
        cases += [(f"jaxrl_par:td3:4:{v}", args.td3_steps) for v in ("grouped", "async", "sync")]
        if peers:
            cases += [("sb3:td3:4:subproc", args.td3_steps), ("sb3:td3:4:dummy",
                                                             args.td3_steps)]
    if args.subprocesses_only:
        cases = [(c, n) for c, n in cases if c.endswith((":grouped", ":async", ":subproc"))]
    if args.no_async:
        cases = [(c, n) for c, n in cases if not c.endswith(":async")]
    if args.solve:
        cases.append(("jaxrl_par:ppo-defaults:4:grouped", 500_000))
    rows = []
    print(f"{'case':32s} {'steps':>8s} {'steps/s':>9s} {'train s':>8s} {'compile s':>9s} "
          f"{'return':>8s} {'updates/s':>9s}  busy (env/device/host)")
    for case, steps in cases:
        defaults = case.startswith("jaxrl_par:ppo-defaults")
        row = fresh_defaults() if defaults else fresh(case, steps)
        if row is None:
            continue
        rows.append(row)
        busy = row.get("busy")
        busy_s = (f"{busy['env']:.0%}/{busy['device']:.0%}/{busy['host']:.0%}"
                  if busy else "-")
        print(f"{row['case']:32s} {row['steps']:8d} {row['steps_per_second']:9.0f} "
              f"{row['train_seconds']:8.1f} {row['compile_seconds']:9.1f} "
              f"{row['final_return']:8.1f} {row.get('updates_per_second', float('nan')):9.0f}"
              f"  {busy_s}", flush=True)
    for n in args.num_envs:
        for ours_env in ("grouped", "async"):
            ours = _find(rows, f"jaxrl_par:ppo:{n}:{ours_env}")
            peer = _find(rows, f"sb3:ppo:{n}:subproc")
            if ours and peer:
                print(f"PPO, {n} subprocess envs ({ours_env}/SubprocVecEnv): jaxrl_par / SB3 = "
                      f"{ours['steps_per_second'] / peer['steps_per_second']:.2f}x env steps/s")
    for name in ("sac", "td3"):
        for ours_env, peer_env in (("grouped", "subproc"), ("async", "subproc"),
                                   ("sync", "dummy")):
            ours = _find(rows, f"jaxrl_par:{name}:4:{ours_env}")
            peer = _find(rows, f"sb3:{name}:4:{peer_env}")
            if ours and peer:
                print(f"{name.upper()}, 4 {ours_env}/{peer_env} envs: jaxrl_par / SB3 = "
                      f"{ours['updates_per_second'] / peer['updates_per_second']:.2f}x "
                      "gradient steps/s")
    _write(args.json or "benchmarks/results/host_envs.json", rows)
    return 0


def _write(path: str, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump({"rows": rows, "cpu_count": os.cpu_count(), "torch_threads": TORCH_THREADS,
                   "load_average": os.getloadavg()}, f, indent=1)


def fresh_defaults() -> dict | None:
    """PPO's defaults on gymnasium:CartPole-v1 (the CLI's run), in a fresh process."""
    code = ("import json; from jaxrl_par.algos import ppo; "
            "from jaxrl_par.runner.training import train; "
            "r = train(ppo.make(ppo.Config(env='gymnasium:CartPole-v1')), 0, progress=False); "
            "print(json.dumps({'case': 'jaxrl_par:ppo-defaults:4:grouped', 'steps': 500000, "
            "'steps_per_second': r.steps_per_second, 'train_seconds': r.train_seconds, "
            "'compile_seconds': r.compile_seconds, "
            "'final_return': float(r.final_returns(0.05)[0])}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    print(f"ppo defaults failed:\n{out.stderr[-2000:]}", file=sys.stderr)
    return None


def _find(rows: list[dict], case: str) -> dict | None:
    return next((r for r in rows if r["case"] == case), None)


if __name__ == "__main__":
    sys.exit(main())
