"""gymnax-blines' own PPO beside ours, on the same envs, budgets and seeds.

gymnax's README quotes one return per environment for gymnax-blines' agents ("PPO, ES
(R: ...)"); the agents it ships are one seed each. This runs gymnax-blines' ``train.py``
unmodified on each env's ``agents/<env>/ppo.yaml`` for every seed, each in a fresh
process, and our PPO with its preset (``jaxrl_par/presets/ppo.toml``) on the same seeds,
so the two libraries' returns sit side by side.

gymnax-blines needs an environment of its own: gymnax 0.0.9 (its ``step`` returns five
values), and tfp-nightly (tensorflow-probability 0.25's JAX substrate does not import
with jax 0.10)::

    python3 -m venv /tmp/gb && /tmp/gb/bin/pip install "jax==0.10.2" "gymnax==0.0.9" \\
        flax optax dotmap tqdm pyyaml tfp-nightly
    git clone https://github.com/RobertTLange/gymnax-blines && \\
        git -C gymnax-blines checkout 3f029d6
    python benchmarks/gymnax_blines.py --dir gymnax-blines --python /tmp/gb/bin/python

Its ``utils/models.py`` imports ``evosax.NetworkMapper``, which evosax 0.3.2 no longer
has and which only its ES agents use; the runs get a stand-in module of that
name on ``PYTHONPATH`` instead of evosax. Each run writes its pickle into a temporary
folder, not into the checkout.

Returns, per seed:
- gymnax-blines: the last entry of its ``log_return``, the mean return of 164 episodes
  with sampled actions, evaluated every ``evaluate_every_epochs`` steps;
- ours: the same kind of figure (sampled actions, one episode in each of 164 envs, each
  seed from its own start states) after the whole budget, and the greedy policy's.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from common import machine, write_json

ENVS = ("CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCar-v0")
EPISODES = 164  # gymnax-blines' num_test_rollouts
COMMIT = "3f029d6"
READ_LOG = ("import json, pickle, sys; d = pickle.load(open(sys.argv[1], 'rb')); "
            "print(json.dumps([float(x) for x in d['log_return']]))")


def run_theirs(directory: pathlib.Path, python: str, env: str, seed: int) -> dict:
    """gymnax-blines' ``train.py`` for ``env`` and ``seed`` in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        stub = pathlib.Path(tmp, "stub")
        stub.mkdir()
        (stub / "evosax.py").write_text("NetworkMapper = {}  # only gymnax-blines' ES uses it\n")
        process_env = {**os.environ, "PYTHONPATH": str(stub)}
        t = time.perf_counter()
        subprocess.run([python, str(directory / "train.py"), "-config",
                        str(directory / "agents" / env / "ppo.yaml"), "-seed", str(seed)],
                       cwd=tmp, env=process_env, check=True, capture_output=True)
        wall = time.perf_counter() - t
        log = subprocess.run([python, "-c", READ_LOG, str(pathlib.Path(tmp, "agents", env,
                                                                      "ppo.pkl"))],
                             env=process_env, check=True, capture_output=True, text=True)
    returns = json.loads(log.stdout.strip().splitlines()[-1])
    return {"final": returns[-1], "log_return": returns, "wall_seconds": wall}


def run_ours(env: str, seeds: list[int]) -> dict:
    """Our PPO with ``env``'s preset, the seeds vmapped in one program."""
    from jaxrl_par import algos, presets
    from jaxrl_par.runner.evaluation import greedy_returns
    from jaxrl_par.runner.training import train

    cfg = presets.config("ppo", env)
    algo = algos.get("ppo").make(cfg)
    t = time.perf_counter()
    result = train(algo, seeds, progress=False, num_chunks=10)
    wall = time.perf_counter() - t
    sampled = greedy_returns(algo._replace(act=algo.sample), result.state,
                             num_envs=EPISODES)
    greedy = greedy_returns(algo, result.state, num_envs=EPISODES)
    return {"final": [float(x) for x in sampled], "greedy": [float(x) for x in greedy],
            "training_return": [float(x) for x in result.final_returns()],
            "env_steps": int(cfg.num_updates * cfg.batch_size), "wall_seconds": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True, type=pathlib.Path,
                   help=f"a checkout of RobertTLange/gymnax-blines (commit {COMMIT})")
    p.add_argument("--python", required=True, help="the interpreter of its environment")
    p.add_argument("--envs", default=",".join(ENVS))
    p.add_argument("--seeds", type=int, default=4, help="seeds 0..N-1 for both")
    p.add_argument("--out", default="benchmarks/results/gymnax_blines.json")
    args = p.parse_args()
    seeds = list(range(args.seeds))
    rows = []
    print(f"{'env':<16}{'gymnax-blines per seed (mean)':<44}{'ours per seed (mean)':<44}"
          f"{'ours greedy':>12}", flush=True)
    for env in args.envs.split(","):
        theirs = [run_theirs(args.dir, args.python, env, s) for s in seeds]
        ours = run_ours(env, seeds)
        row = {"env": env, "seeds": seeds, "episodes": EPISODES,
               "gymnax_blines": {"final": [r["final"] for r in theirs],
                                 "log_return": [r["log_return"] for r in theirs],
                                 "wall_seconds": [r["wall_seconds"] for r in theirs]},
               "ours": ours}
        rows.append(row)

        def cell(values):
            return (", ".join(f"{v:.1f}" for v in values)
                    + f" ({statistics.fmean(values):.1f})")

        print(f"{env:<16}{cell(row['gymnax_blines']['final']):<44}{cell(ours['final']):<44}"
              f"{statistics.fmean(ours['greedy']):>12.1f}", flush=True)
    write_json(args.out, {"rows": rows, "meta": {**machine(), "gymnax_blines_commit": COMMIT,
                                                 "command": " ".join(sys.argv)}})


if __name__ == "__main__":
    main()
