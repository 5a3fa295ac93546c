"""PPO against Brax's own PPO trainer on Brax envs, side by side in one process.

Both train the same Brax env (``brax.envs.get_environment(name, backend=...)``; ours
through its ``"brax:<name>:<backend>"`` id) at one config, so that each update does the
same work: ``num_envs`` envs step ``unroll`` steps (Brax: ``batch_size * num_minibatches
= num_envs``, one unroll per training step), then ``epochs`` passes of ``minibatches``
gradient steps over that batch; tanh MLPs of 64-64 for policy and value, observation
normalisation, Adam at a constant 3e-4 without gradient clipping, an unclipped value
loss, advantages normalised per minibatch, gamma 0.97, lambda 0.95, clip 0.2, entropy
1e-2, 1,000-step episodes whose time limit is not a termination. What still differs:
at the time limit Brax's GAE drops the step that reached it (its default; its
``bootstrap_on_timeout`` needs a ``time_out`` field that Brax's own envs do not set),
ours bootstraps from the observation reached; Brax's policy is a tanh-squashed
Gaussian with a state-dependent scale, ours a Gaussian with a learned scale per action,
clipped to [-1, 1]; Brax's auto-reset returns an env to the *first* initial state it
drew (one reset per env for the whole run), ours draws a new one at every episode end
(a reset computed beside every step).

Reported per env: training env steps/s, the median over the epochs after the first
two (Brax's ``training/sps``, which its ``train`` measures around each compiled
training epoch, evaluation excluded; ours the same per compiled chunk from
``TrainResult.chunk_seconds``; see ``WARM_EPOCHS``), in ``--repeats`` alternated runs
(medians of those); compile seconds (Brax compiles inside ``train``, in every run: the
time of its first two epochs beyond what the steady rate gives them, median; ours
measured apart, in the first run, since later runs reuse the compiled program); and
the greedy return at the end (Brax: its own deterministic evaluation, 16 episodes;
ours ``evaluate.greedy_returns``, 16 episodes). Repeat ``r`` trains seed ``--seed + r``
on both sides, so the returns are those of ``--repeats`` seeds (one seed alone can be a
lucky one for either side).

Brax 0.14.2's ``train`` calls ``jax.device_put_replicated``, which jax 0.10 removed:
a shim here replaces it for the run (the trainer is otherwise unchanged).

    taskset -c 0 python benchmarks/brax_ppo.py [--envs fast,inverted_pendulum:positional]
        [--repeats 3] [--epochs 5] [--num-envs 128] [--out benchmarks/results/brax_ppo.json]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, write_json

from jaxrl_par.algos import ppo
from jaxrl_par.envs import brax_envs
from jaxrl_par.runner.evaluation import greedy_returns
from jaxrl_par.runner.training import train

#: (env, backend) -> env steps per repeat (split into ``--epochs`` epochs)
STEPS = {"fast": 819_200, "inverted_pendulum:positional": 409_600, "ant:positional": 81_920}
HP = {"num_envs": 128, "unroll": 32, "minibatches": 4, "epochs": 4, "learning_rate": 3e-4,
      "gamma": 0.97, "gae_lambda": 0.95, "clip_eps": 0.2, "ent_coef": 1e-2,
      "hidden": (64, 64)}
EVAL_EPISODES = 16
#: Epochs left out of the steady rate. Brax's trainer compiles its epoch program twice on
#: jax 0.10-0.11: the parameters and env states its first epoch returns are placed on
#: another mesh axis and with other weak types than the ones it started from (jax's
#: cache-miss explanations), so its second epoch's time holds a second compile.
#: Ours compiles once, ahead; the same epochs are left out of both.
WARM_EPOCHS = 2


def _device_put_replicated(x, devices):
    """What ``jax.device_put_replicated`` did: a leading axis of ``len(devices)``, one
    row per device, placed as ``jax.pmap`` (a shim over ``shard_map`` since jax 0.10)
    places its outputs, so that Brax's second epoch does not compile the program again
    for inputs placed otherwise."""
    axis = "_internal_pmap_axis_name"  # the mesh axis of jax's pmap shim
    sharding = jax.sharding.NamedSharding(jax.sharding.Mesh(np.asarray(devices), (axis,)),
                                          jax.sharding.PartitionSpec(axis))
    return jax.tree.map(
        lambda a: jax.device_put(jnp.stack([jnp.asarray(a)] * len(devices)), sharding), x)


def brax_env(spec: str):
    """Brax's own env for ``"<name>[:<backend>]"``: the one our ``"brax:<spec>"`` id wraps."""
    env, _ = brax_envs.factory(f"brax:{spec}")()
    return env.env


def brax_record(brax_train, prefill_steps: int = 0, **kwargs) -> dict:
    """Runs one of Brax's trainers (``brax_train(**kwargs)``, its ``progress_fn`` ours)
    and reads the run as the tables do: ``training/sps`` per epoch and their median after
    ``WARM_EPOCHS``; compile seconds, the time of the first ``WARM_EPOCHS`` epochs beyond
    what the steady rate gives their steps (``prefill_steps``: env steps Brax takes before
    its first epoch, counted in its step numbers, e.g. SAC's random-action prefill, whose
    seconds its walltime also holds); and the final deterministic evaluation's return."""
    if not hasattr(jax, "device_put_replicated"):  # removed in jax 0.10
        jax.device_put_replicated = _device_put_replicated
    records = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        brax_train(progress_fn=lambda step, metrics: records.append((int(step), dict(metrics))),
                   **kwargs)
    trained = [r for r in records if "training/sps" in r[1]]  # records[0]: eval before training
    sps = [float(r[1]["training/sps"]) for r in trained]
    walltime = np.asarray([float(r[1]["training/walltime"]) for r in trained])
    done = np.asarray([r[0] for r in trained]) - prefill_steps
    steady = statistics.median(sps[WARM_EPOCHS:])
    return {"env_steps": int(done[-1]) + prefill_steps, "steps_per_s": steady,
            "epoch_steps_per_s": sps,
            "compile_s": float(walltime[WARM_EPOCHS - 1] - done[WARM_EPOCHS - 1] / steady),
            "greedy_return": float(trained[-1][1]["eval/episode_reward"])}


def run_brax(spec: str, steps: int, epochs: int, seed: int) -> dict:
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as brax_ppo
    from flax import linen

    networks = functools.partial(
        ppo_networks.make_ppo_networks, policy_hidden_layer_sizes=HP["hidden"],
        value_hidden_layer_sizes=HP["hidden"], activation=linen.tanh)
    n, m = HP["num_envs"], HP["minibatches"]
    return brax_record(
        brax_ppo.train, environment=brax_env(spec), num_timesteps=steps,
        num_evals=epochs + 1, episode_length=1000, num_envs=n, unroll_length=HP["unroll"],
        batch_size=n // m, num_minibatches=m, num_updates_per_batch=HP["epochs"],
        learning_rate=HP["learning_rate"], entropy_cost=HP["ent_coef"],
        discounting=HP["gamma"], gae_lambda=HP["gae_lambda"], clipping_epsilon=HP["clip_eps"],
        normalize_observations=True, reward_scaling=1.0, max_grad_norm=None,
        normalize_advantage=True, vf_loss_coefficient=0.5, num_eval_envs=EVAL_EPISODES,
        deterministic_eval=True, network_factory=networks, seed=seed)


def run_ours(spec: str, steps: int, epochs: int, seed: int) -> dict:
    cfg = ppo.Config(
        env=f"brax:{spec}", total_timesteps=steps, num_envs=HP["num_envs"],
        num_steps=HP["unroll"], num_minibatches=HP["minibatches"],
        update_epochs=HP["epochs"], learning_rate=HP["learning_rate"], anneal_lr=False,
        gamma=HP["gamma"], gae_lambda=HP["gae_lambda"], clip_eps=HP["clip_eps"],
        clip_value_loss=False, vf_coef=0.5, ent_coef=HP["ent_coef"], max_grad_norm=0.0,
        normalize_advantages=True, normalize_obs=True, normalize_rewards=False,
        hidden_sizes=HP["hidden"], activation="tanh")
    algo = ppo.make(cfg)
    return ours_record(algo, train(algo, seed, progress=False, num_chunks=epochs),
                       cfg.num_envs * cfg.num_steps)


def ours_record(algo, res, per_update: int) -> dict:
    """One run of ours as the tables read it: env steps/s per chunk (an epoch) and
    their median after ``WARM_EPOCHS``, compile seconds, greedy return."""
    ends = np.asarray(res.chunk_ends)
    secs = np.diff(np.asarray(res.chunk_seconds), prepend=0.0)
    sps = (np.diff(ends, prepend=0) * per_update / secs).tolist()
    greedy = greedy_returns(algo, res.state, num_envs=EVAL_EPISODES)
    return {"env_steps": int(ends[-1]) * per_update,
            "steps_per_s": statistics.median(sps[WARM_EPOCHS:]), "epoch_steps_per_s": sps,
            "compile_s": res.compile_seconds, "greedy_return": float(greedy.mean())}


def _returns(runs: list[dict]) -> str:
    return ", ".join(f"{x['greedy_return']:.0f}" for x in runs)


def alternate(specs: list[str], steps_of: dict, per_update: int, args, run_brax,
              run_ours) -> list[dict]:
    """For each env: ``args.repeats`` runs of each trainer, alternated (B O, O B, ...),
    repeat ``r`` on seed ``args.seed + r``; a row of the runs and the median rates."""
    rows = []
    for spec in specs:
        if spec not in steps_of:
            raise SystemExit(f"unknown env {spec!r}; one of {', '.join(steps_of)}")
        steps = max(1, round(steps_of[spec] * args.scale / (per_update * args.epochs))) \
            * per_update * args.epochs
        runs = {"brax": [], "ours": []}
        for r in range(args.repeats):
            order = (("brax", run_brax), ("ours", run_ours))
            for who, fn in order if r % 2 == 0 else order[::-1]:
                out = fn(spec, steps, args.epochs, args.seed + r)  # seed r: returns vary
                runs[who].append(out)
                print(f"  {spec} {who} run {r}: {out['steps_per_s']:,.0f} steps/s, "
                      f"greedy {out['greedy_return']:.1f}", flush=True)
        med = {w: statistics.median(o["steps_per_s"] for o in runs[w]) for w in runs}
        rows.append({"env": spec, "env_steps": steps, "brax": runs["brax"], "ours": runs["ours"],
                     "brax_steps_per_s": med["brax"], "ours_steps_per_s": med["ours"],
                     "ratio": med["ours"] / med["brax"]})
    return rows


def report(rows: list[dict], trainer: str, args, hp: dict) -> None:
    """Prints the markdown table and writes ``args.out``."""
    print(f"\n| env | env steps | Brax {trainer} steps/s | ours steps/s | ours/Brax | compile "
          "Brax / ours (s) | greedy return Brax / ours |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for row in rows:
        b, o = row["brax"], row["ours"]
        # Ours: the first run's (later ones reuse the runner's compiled program); Brax
        # compiles in every run (new closures each call): the median.
        compile_s = [statistics.median(x["compile_s"] for x in b), o[0]["compile_s"]]
        print(f"| {row['env']} | {row['env_steps']:,} | {row['brax_steps_per_s']:,.0f} | "
              f"{row['ours_steps_per_s']:,.0f} | {row['ratio']:.2f} | {compile_s[0]:.1f} / "
              f"{compile_s[1]:.1f} | {_returns(b)} / {_returns(o)} |")
    write_json(args.out, {"machine": machine(), "hp": {**hp, "hidden": list(hp["hidden"])},
                          "repeats": args.repeats, "epochs": args.epochs, "rows": rows})
    print(f"wrote {args.out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", default=",".join(STEPS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=5,
                    help=f"epochs (chunks) per run, > {WARM_EPOCHS}")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the env steps")
    ap.add_argument("--num-envs", type=int, default=HP["num_envs"],
                    help="envs per update, both trainers (a multiple of 4; a GPU wants thousands)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/brax_ppo.json")
    args = ap.parse_args()
    if args.num_envs < 1 or args.num_envs % HP["minibatches"]:
        raise SystemExit(f"--num-envs={args.num_envs}: give a positive multiple of "
                         f"{HP['minibatches']} (the minibatches split the envs for Brax)")
    HP["num_envs"] = args.num_envs
    if args.epochs <= WARM_EPOCHS:
        raise SystemExit(f"--epochs must be > {WARM_EPOCHS}: the first {WARM_EPOCHS} include "
                         "Brax's compiles")
    rows = alternate(args.envs.split(","), STEPS, HP["num_envs"] * HP["unroll"], args,
                     run_brax, run_ours)
    report(rows, "PPO", args, HP)


if __name__ == "__main__":
    main()
