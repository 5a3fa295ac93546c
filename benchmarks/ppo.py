"""PPO training throughput: jaxrl_par vs rejax vs the random-action ceiling, side by side.

For each setting the same env, network (two 64-64 tanh MLPs, actor and critic) and
hyperparameters run in one process, interleaved, several repeats, medians:

* ``ceiling``: gymnax's vmapped ``step`` with uniformly random actions (no policy), built
  with jax's rolled and with our unrolled Threefry lowering; the faster one counts.
* ``rollout``: PPO's own rollout: actor inference, action sampling and env step, no
  learning (the critic runs afterwards, batched, as part of the update).
* ``ours``: ``K`` full PPO updates (rollout + 4 epochs x 4 minibatches) in one scan.
* ``rejax``: ``K`` rejax PPO ``train_iteration``s in one scan (rejax 0.1.3 unpacks the old
  5-value gymnax step, so its env is wrapped here to return ``terminated | truncated``).

Compile time is measured apart: each update scan traced, lowered and compiled in a fresh
process of its own, ours and rejax alternated (``--compile-rounds`` rounds, median); the
first build in a process pays costs that a second build reuses, so timing both in one
process favours whichever goes second (``compile_seconds_in_process`` in the JSON keeps
that figure, ours built first). Final return: with ``--returns``, both train CartPole with
4 envs to 5e5 steps; ours is the mean return of episodes finished in the last 5% of
updates, rejax's its own greedy evaluation at the end (128 episodes).

Whole programs (``--whole-program``): the update scans above are what the throughput
is measured on, but users compile whole runs. This mode trains ours (``train()``, as
the CLI) and rejax (``jax.jit(PPO.train)``, with and without its final evaluation) on
CartPole-v1 with 4 envs to 5e5 steps, each in a fresh process, and reports compile and
wall seconds (``benchmarks/results/ppo_whole_program.json``).

Usage: ``python benchmarks/ppo.py [--quick] [--repeats 5] [--returns]``; writes
``benchmarks/results/ppo.json``. ``python benchmarks/ppo.py --whole-program
[--compile-rounds 4]``. Pin to one core for steadier figures: ``taskset -c 0``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))  # for benchmarks/common.py, imported next
from common import (
    USERS_POOL,
    FiveValueStep,
    as_users_run,
    compile_timed,
    interleaved,
    machine,
    most_devices,
    pool_env,
    write_json,
)

from jaxrl_par import envs
from jaxrl_par.algos import ppo
from jaxrl_par.algos.config import apply_overrides
from jaxrl_par.platform import cpu_threads

HP = {"num_steps": 128, "update_epochs": 4, "num_minibatches": 4, "learning_rate": 2.5e-4,
      "gamma": 0.99, "gae_lambda": 0.95, "clip_eps": 0.2, "vf_coef": 0.5, "ent_coef": 0.01,
      "max_grad_norm": 0.5}


def make_rejax(env_id: str, num_envs: int, total_timesteps: int, hp: dict = HP, **options):
    """rejax's PPO with the hyperparameters ``hp`` (our names) and the two 64-64 tanh
    MLPs; ``options`` are further rejax fields (e.g. ``normalize_rewards=True``)."""
    import gymnax
    from rejax import PPO

    env, params = gymnax.make(env_id)
    return PPO.create(
        env=FiveValueStep(env), env_params=params, num_envs=num_envs,
        num_steps=hp["num_steps"], num_epochs=hp["update_epochs"],
        num_minibatches=hp["num_minibatches"], learning_rate=hp["learning_rate"],
        gamma=hp["gamma"], gae_lambda=hp["gae_lambda"], clip_eps=hp["clip_eps"],
        vf_coef=hp["vf_coef"], ent_coef=hp["ent_coef"], max_grad_norm=hp["max_grad_norm"],
        total_timesteps=total_timesteps, eval_freq=total_timesteps,
        skip_initial_evaluation=True, normalize_observations=False,
        agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)}, **options,
    )


def ours_config(env_id: str, num_envs: int, total_timesteps: int, hp: dict = HP,
                **options) -> ppo.Config:
    """Our PPO config matching :func:`make_rejax` (``options``: further Config fields)."""
    return ppo.Config(env=env_id, num_envs=num_envs, total_timesteps=total_timesteps,
                      torso="mlp", hidden_sizes=(64, 64), activation="tanh", **hp, **options)


def build(who: str, env_id: str, num_envs: int, updates: int, overrides=()):
    """``(fn, state, algo)``: ``updates`` PPO updates of ``who`` ("ours" or "rejax") in one
    scan, ``fn(state) -> (state, _)``, and the initial state. ``overrides``
    (``["field=value", ...]``) change our Config."""
    steps = num_envs * HP["num_steps"] * updates
    if who == "ours-cores":
        return data_parallel_scan(
            apply_overrides(ours_config(env_id, num_envs, steps), list(overrides)), updates)
    if who == "ours":
        algo = ppo.make(apply_overrides(ours_config(env_id, num_envs, steps), list(overrides)))
        return (lambda s: jax.lax.scan(lambda c, _: algo.update(c), s, None, length=updates),
                algo.init(jax.random.key(0)), algo)
    algo = make_rejax(env_id, num_envs, steps)
    return (lambda ts: jax.lax.scan(lambda c, _: (algo.train_iteration(c), None), ts, None,
                                    length=updates),
            algo.init_state(jax.random.key(0)), algo)


def data_parallel_scan(cfg: ppo.Config, updates: int):
    """``(fn, state, algo)`` as :func:`build`, for our PPO data-parallel over this
    process's devices (``--devices N`` in the CLI; as many as divide ``cfg.num_envs``):
    the runner's sharded chunk (``parallel.data_parallel.make_chunk_fn``), one device's
    updates up to float rounding (tests/test_parallel_devices.py). On a CPU the devices
    are ``XLA_FLAGS``' forced host devices, one per core, each running its part of the
    program on a thread of its own. ``fn`` calls the chunk inside the caller's jit,
    where its donation of the state does not apply, so ``fn`` can be timed repeatedly on
    one state."""
    from jaxrl_par import axes, parallel
    from jaxrl_par.parallel import data_parallel

    algo = ppo.make(dataclasses.replace(cfg, axis_name=axes.DATA))
    mesh = parallel.make_mesh(most_devices(cfg.num_envs, len(jax.devices())))
    state = data_parallel.Sharded(algo, mesh).init(jax.random.split(jax.random.key(0), 1))
    chunk = data_parallel.make_chunk_fn(algo, mesh, updates, state)
    return (lambda s: chunk(s, 0)), state, algo


def rollout_scan(algo, updates: int):
    """``fn(state) -> (state, sums)``: ``updates`` of PPO's own rollouts (policy inference
    and env steps, learning skipped) in one scan, each from the state's env state."""
    rollout = ppo.make_rollout(algo.config)

    def fn(s):
        def body(st, k):
            env_state, (_, _, extras, ts) = rollout(st, k)
            return st.replace(env_state=env_state), ts.reward.sum() + extras.log_prob.sum()

        return jax.lax.scan(body, s, jax.random.split(s.key, updates))

    return fn


def compile_in_fresh_processes(env_id: str, num_envs: int, updates: int, rounds: int) -> dict:
    """Compile seconds of the two update scans, each traced, lowered and compiled in a
    process of its own (nothing cached from the other's build; the persistent compilation
    cache off), alternated ours, rejax, rejax, ours, ... so neither always goes first.
    Returns every time and the medians."""
    env = dict(os.environ, JAX_ENABLE_COMPILATION_CACHE="false")
    times: dict[str, list[float]] = {"ours": [], "rejax": []}
    for r in range(rounds):
        for who in ("ours", "rejax") if r % 2 == 0 else ("rejax", "ours"):
            out = subprocess.run(
                [sys.executable, __file__, "--compile-one", f"{who}:{env_id}:{num_envs}:{updates}"],
                env=env, capture_output=True, text=True, check=True)
            times[who].append(float(out.stdout.strip().splitlines()[-1]))
    return {"all": times, **{k: float(np.median(v)) for k, v in times.items()}}


def compile_one(spec: str) -> None:
    """``--compile-one who:env:num_envs:updates``: prints the seconds of one build."""
    who, env_id, num_envs, updates = spec.split(":")
    fn, state, _ = build(who, env_id, int(num_envs), int(updates))
    print(compile_timed(fn, state, ours=who == "ours")[1])


def bench_setting(env_id: str, num_envs: int, updates: int, repeats: int,
                  fresh_rounds: int) -> dict:
    steps = num_envs * HP["num_steps"] * updates
    ours, state, algo = build("ours", env_id, num_envs, updates)
    theirs, rstate, _ = build("rejax", env_id, num_envs, updates)

    genv = envs.make(env_id, num_envs)
    gstep = jax.vmap(genv.env.step, in_axes=(0, 0, 0, None))

    def ceiling(key):
        k0, key = jax.random.split(key)
        _, st = jax.vmap(genv.env.reset, in_axes=(0, None))(
            jax.random.split(k0, num_envs), genv.params)

        def body(c, k):
            st, acc = c
            ka, ks = jax.random.split(k)
            a = jax.random.randint(ka, (num_envs,), 0, genv.num_actions)
            _, st, r, _, _, _ = gstep(jax.random.split(ks, num_envs), st, a, genv.params)
            return (st, acc + r.sum()), None

        keys = jax.random.split(key, HP["num_steps"] * updates)
        (_, acc), _ = jax.lax.scan(body, (st, 0.0), keys)
        return acc

    rollout = rollout_scan(algo, updates)
    c_ours, t_ours = compile_timed(ours, state, ours=True)
    c_rejax, t_rejax = compile_timed(theirs, rstate)
    # The ceiling is built both ways and the faster one counts (the stricter ceiling):
    # jax's rolled Threefry loop is the faster at many envs, our unrolled one at few. Each
    # is compiled in a fresh function so that no lowering of jax's inner jitted functions
    # is shared between the two builds.
    c_ceil_rolled, _ = compile_timed(lambda k: ceiling(k), jax.random.key(1))
    c_ceil_unrolled, _ = compile_timed(lambda k: ceiling(k), jax.random.key(1), ours=True)
    c_roll, _ = compile_timed(rollout, state, ours=True)
    med = interleaved({
        "ours": (c_ours, (state,)),
        "rejax": (c_rejax, (rstate,)),
        "ceiling_rolled": (c_ceil_rolled, (jax.random.key(1),)),
        "ceiling_unrolled": (c_ceil_unrolled, (jax.random.key(1),)),
        "rollout": (c_roll, (state,)),
    }, repeats)
    med["ceiling"] = min(med["ceiling_rolled"], med["ceiling_unrolled"])
    sps = {k: steps / v for k, v in med.items()}
    return {
        "env": env_id, "num_envs": num_envs, "updates_timed": updates, "env_steps_timed": steps,
        "steps_per_second": sps,
        "ratio_ours_over_rejax": sps["ours"] / sps["rejax"],
        "rollout_over_ceiling": sps["rollout"] / sps["ceiling"],
        # in this process, ours built first (it pays the process's first-build costs)
        "compile_seconds_in_process": {"ours": t_ours, "rejax": t_rejax},
        "compile_seconds": compile_in_fresh_processes(env_id, num_envs, updates, fresh_rounds),
    }


def rejax_whole_run(algo, seed: int) -> tuple[float, float, float]:
    """``(compile_s, wall_s, final_return)`` of rejax's ``jax.jit(algo.train)``: compiled
    and run once, the wall time including the compile; the final return is the mean of its
    last evaluation's returns, None when its evaluation returns no ``(lengths, returns)``
    (replaced by a constant)."""
    import time

    t = time.perf_counter()
    train_fn = jax.jit(algo.train).lower(jax.random.key(seed)).compile()
    compile_s = time.perf_counter() - t
    _, evaluation = jax.block_until_ready(train_fn(jax.random.key(seed)))
    final = (float(np.asarray(evaluation[1])[-1].mean()) if isinstance(evaluation, tuple)
             else None)
    return compile_s, time.perf_counter() - t, final


def final_returns(total_timesteps: int, seed: int = 0) -> dict:
    """Full training of both on CartPole-v1 with 4 envs; end-of-training return and the
    full-run wall clock including compilation (each compiled for the whole run)."""
    import time

    from jaxrl_par.runner.training import train

    cfg = ours_config("CartPole-v1", 4, total_timesteps)
    t = time.perf_counter()
    res = train(ppo.make(cfg), seed, progress=False, num_chunks=1)
    ours_wall = time.perf_counter() - t
    rejax_compile, rejax_wall, rejax_final = rejax_whole_run(
        make_rejax("CartPole-v1", 4, total_timesteps), seed)
    return {
        "total_timesteps": total_timesteps, "seed": seed,
        "ours_final_return": float(res.final_returns()[0]),
        "rejax_final_return": rejax_final,
        "ours_compile_seconds": res.compile_seconds, "rejax_compile_seconds": rejax_compile,
        "ours_wall_seconds": ours_wall, "rejax_wall_seconds": rejax_wall,
    }


def updates_timed(num_envs: int) -> int:
    """Updates per timed call: about 0.3-1 s of training, more updates for fewer envs."""
    return max(1, min(20, 40_000 // (num_envs * HP["num_steps"]) or 1))


def speed_one(spec: str) -> dict:
    """``--speed-one who:env:num_envs:updates:repeats``: the update scan of ``who`` built
    and timed alone in this process (``repeats`` calls, median); env steps/s."""
    who, env_id, num_envs, updates, repeats = spec.split(":")
    fn, state, _ = build(who, env_id, int(num_envs), int(updates))
    compiled, _ = compile_timed(fn, state, ours=who.startswith("ours"))
    seconds = interleaved({who: (compiled, (state,))}, int(repeats))[who]
    return {"steps_per_second": int(num_envs) * HP["num_steps"] * int(updates) / seconds}


#: ``--as-users-run``'s runs beside ours on one device (whose pool the CLI's
#: ``--cpu-threads auto`` picks for each setting, in :func:`as_users_run_grid`), and
#: their XLA:CPU set-ups (``common.pool_env`` arguments): ours data-parallel over one CPU
#: device per core with one thread each (the CLI's ``--devices N``), rejax XLA's default.
AS_USERS_RUN = {"ours-cores": (1, os.cpu_count()), "rejax": (None,)}


def purejaxrl_command(spec: str) -> list[str] | None:
    """The command that times PureJaxRL's unmodified ``ppo.py`` for ``spec``
    (``ENV:NUM_ENVS:UPDATES:REPEATS``) in its own environment
    (``benchmarks/purejaxrl_ppo.py``), from ``$PUREJAXRL_PYTHON`` (that environment's
    interpreter) and ``$PUREJAXRL_DIR`` (a checkout at commit 31756b1); None when either
    is unset."""
    python, where = os.environ.get("PUREJAXRL_PYTHON"), os.environ.get("PUREJAXRL_DIR")
    if not python or not where:
        return None
    env_id, n, updates, repeats = spec.split(":")
    return [python, os.path.join(os.path.dirname(os.path.abspath(__file__)), "purejaxrl_ppo.py"),
            "--dir", where, "--env", env_id, "--num-envs", n, "--updates", updates,
            "--repeats", repeats]


def as_users_run_grid(settings, rounds: int, repeats: int, cores: bool = True) -> list[dict]:
    """Ours and each run of :data:`AS_USERS_RUN` in fresh processes, not pinned, with the
    XLA:CPU set-up its users get; the order reversed every other round. Medians over rounds of
    each process's median, and each of ours over rejax's. ``cores=False`` leaves out
    ``ours-cores`` (one device per core)."""
    import statistics

    rows = []
    for env_id, n in settings:
        updates = updates_timed(n)
        spec = f"{env_id}:{n}:{updates}:{repeats}"
        setups = {"ours": (cpu_threads.auto_threads(envs.observation_numbers(env_id, n)),),
                  **{k: v for k, v in AS_USERS_RUN.items() if cores or k != "ours-cores"}}
        if purejaxrl_command(spec) is not None:
            setups["purejaxrl"] = (None,)  # XLA's default pool, as its users get it
        else:
            print("PureJaxRL skipped: set PUREJAXRL_PYTHON and PUREJAXRL_DIR "
                  "(benchmarks/purejaxrl_ppo.py)", flush=True)

        def command(who, spec=spec):
            if who == "purejaxrl":
                return purejaxrl_command(spec)
            return [sys.executable, __file__, "--speed-one", f"{who}:{spec}"]

        runs = as_users_run(command, rounds, setups=setups)
        sps = {who: [x["steps_per_second"] for x in v] for who, v in runs.items()}
        med = {k: statistics.median(v) for k, v in sps.items()}
        ratios = {who: med[who] / med["rejax"] for who in med if who != "rejax"}
        if "purejaxrl" in med:
            ratios.update({f"{who}/purejaxrl": med[who] / med["purejaxrl"]
                           for who in ("ours", "ours-cores") if who in med})
        rows.append({"env": env_id, "num_envs": n, "updates_timed": updates,
                     "steps_per_second": sps, "median": med, "ratio_over_rejax": ratios})
        print(f"{env_id:18s} {n:5d} " + " ".join(f"{k} {v:,.0f}" for k, v in med.items())
              + " | " + " ".join(f"{k}/rejax {v:.2f}" for k, v in ratios.items())
              + f" | {sps}", flush=True)
    return rows


WHOLE_RUNS = ("ours", "rejax", "rejax_no_eval")


def whole_one(who: str, total_timesteps: int) -> dict:
    """``--whole-one``: one whole training run of ``who`` on CartPole-v1 with 4 envs, as a
    user runs it, in this (fresh) process: compile seconds, wall seconds with compilation,
    final return.

    * ``ours``: :func:`jaxrl_par.runner.training.train` with its defaults (20 chunks asked for, as
      the CLI), which compiles the init and the chunk programs; final return as in
      :func:`final_returns`.
    * ``rejax``: ``jax.jit(PPO.train)``, the program rejax users compile, with its greedy
      evaluation at the end (128 episodes; its final return).
    * ``rejax_no_eval``: the same with the evaluation made a constant, so that only the
      training is compiled (no return recorded).
    """
    import time

    import jax.numpy as jnp

    from jaxrl_par.runner.training import train

    t = time.perf_counter()
    if who == "ours":
        res = train(ppo.make(ours_config("CartPole-v1", 4, total_timesteps)), 0, progress=False)
        return {"compile_s": res.compile_seconds, "wall_s": time.perf_counter() - t,
                "final_return": float(res.final_returns()[0])}
    algo = make_rejax("CartPole-v1", 4, total_timesteps)
    if who == "rejax_no_eval":
        algo = algo.replace(eval_callback=lambda algo, ts, rng: jnp.float32(0.0))
    compile_s, wall_s, final = rejax_whole_run(algo, 0)
    return {"compile_s": compile_s, "wall_s": wall_s, "final_return": final}


def whole_program(rounds: int, total_timesteps: int, users_pools: bool = False) -> dict:
    """Each of :data:`WHOLE_RUNS` in a fresh process per round (persistent compilation
    cache off), the order rotated each round; medians. ``users_pools``: each process
    with the XLA:CPU pool its library's users get (``common.USERS_POOL``), else this
    process's environment (e.g. under ``taskset``)."""
    import statistics

    def env_of(who: str) -> dict:
        base = pool_env(*USERS_POOL[who.split("_")[0]]) if users_pools else dict(os.environ)
        return {**base, "JAX_ENABLE_COMPILATION_CACHE": "false"}

    runs: dict[str, list[dict]] = {who: [] for who in WHOLE_RUNS}
    for r in range(rounds):
        order = WHOLE_RUNS[r % 3:] + WHOLE_RUNS[:r % 3]
        for who in order:
            out = subprocess.run(
                [sys.executable, __file__, "--whole-one", f"{who}:{total_timesteps}"],
                env=env_of(who), capture_output=True, text=True, check=True)
            runs[who].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(who, runs[who][-1], flush=True)
    medians = {who: {k: statistics.median(x[k] for x in v) for k in ("compile_s", "wall_s")}
               for who, v in runs.items()}
    return {"total_timesteps": total_timesteps, "runs": runs, "medians": medians}


def main_job(rounds: int) -> dict:
    """README's main job against PureJaxRL's, each run as its README runs it, in fresh
    processes alternated (the order reversed every other round), nothing cached: ours
    ``jaxrl-par train ppo --env CartPole-v1 --no-compile-cache``, PureJaxRL
    ``python purejaxrl/ppo.py`` (``$PUREJAXRL_PYTHON``, in ``$PUREJAXRL_DIR``). Wall
    seconds of each whole process, imports and compile included (medians), and each
    process's final return (:func:`final_return_of`)."""
    import shutil
    import time

    python, where = os.environ.get("PUREJAXRL_PYTHON"), os.environ.get("PUREJAXRL_DIR")
    if not python or not where:
        raise SystemExit("--main-job needs PUREJAXRL_PYTHON and PUREJAXRL_DIR "
                         "(benchmarks/purejaxrl_ppo.py says how)")
    cli = [shutil.which("jaxrl-par")] if shutil.which("jaxrl-par") else [sys.executable, "-m",
                                                                         "jaxrl_par"]
    commands = {
        "ours": ([*cli, "train", "ppo", "--env", "CartPole-v1", "--no-compile-cache",
                  "--no-progress", "--json"], None),
        "purejaxrl": ([python, "purejaxrl/ppo.py"], where),
    }
    runs: dict[str, list[float]] = {who: [] for who in commands}
    finals: dict[str, list[float | None]] = {who: [] for who in commands}
    for r in range(rounds):
        for who in list(commands) if r % 2 == 0 else list(commands)[::-1]:
            command, cwd = commands[who]
            env = {k: v for k, v in os.environ.items() if k not in ("NPROC", "PORTABLE_NPROC")}
            t = time.perf_counter()
            out = subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True,
                                 text=True)
            runs[who].append(time.perf_counter() - t)
            finals[who].append(final_return_of(who, out.stdout, 500_000))
            print(r, who, f"{runs[who][-1]:.1f} s", f"final return {finals[who][-1]}", flush=True)
    return {"wall_s": runs, "median_wall_s": {k: statistics.median(v) for k, v in runs.items()},
            "final_return": finals}


def final_return_of(who: str, stdout: str, total_timesteps: int) -> float | None:
    """The final return of a main-job process from its stdout: ours the CLI's ``--json``
    ``final_return`` (episodes finished in the last 5% of updates); PureJaxRL's the mean
    of the ``episodic return`` lines its ``ppo.py`` prints at global steps past 95% of
    ``total_timesteps``. None when no episode is found."""
    lines = stdout.strip().splitlines()
    if who == "ours":
        return json.loads(lines[-1])["final_return"] if lines else None
    found = (re.search(r"global step=(\d+), episodic return=([-\d.eE+]+)", x) for x in lines)
    tail = [float(m[2]) for m in found if m and int(m[1]) >= 0.95 * total_timesteps]
    return statistics.fmean(tail) if tail else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="small settings, 2 repeats, 2 compile rounds")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--returns", action="store_true", help="also train both to 5e5 steps")
    p.add_argument("--settings", default=None,
                   help="comma-separated ENV:NUM_ENVS pairs instead of the default grid")
    p.add_argument("--compile-rounds", type=int, default=4,
                   help="fresh processes per library for the compile time (alternated)")
    p.add_argument("--compile-one", default=None, help=argparse.SUPPRESS)  # a child process
    p.add_argument("--whole-program", action="store_true",
                   help="only the whole-program comparison: ours, rejax and rejax without "
                        "its final evaluation, each trained to 5e5 steps on CartPole-v1 "
                        "(4 envs) in fresh processes, --compile-rounds rounds; with "
                        "--as-users-run each with its users' XLA:CPU pool, not pinned")
    p.add_argument("--whole-one", default=None, help=argparse.SUPPRESS)  # a child process
    p.add_argument("--as-users-run", action="store_true",
                   help="throughput only, each library in fresh processes with the XLA:CPU "
                        "set-up its users get (ours with the CLI's auto pool on one "
                        "device, and one thread on each of one device per core; rejax "
                        "XLA's default pool), not pinned: "
                        "--compile-rounds rounds of --repeats calls")
    p.add_argument("--no-cores", action="store_true",
                   help="with --as-users-run: leave out ours on one CPU device per core")
    p.add_argument("--speed-one", default=None, help=argparse.SUPPRESS)  # a child process
    p.add_argument("--main-job", action="store_true",
                   help="README's main job against PureJaxRL's ppo.py, whole processes")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "ppo.json"))
    args = p.parse_args()
    if args.compile_one:
        compile_one(args.compile_one)
        return
    if args.whole_one:
        who, steps = args.whole_one.split(":")
        print(json.dumps(whole_one(who, int(steps))))
        return
    if args.speed_one:
        print(json.dumps(speed_one(args.speed_one)))
        return
    if args.main_job:
        result = main_job(args.compile_rounds)
        out = args.out.replace("ppo.json", "ppo_main_job.json")
        write_json(out, {"machine": machine(), **result})
        print(f"wrote {out}: median wall s {result['median_wall_s']}")
        return
    if args.whole_program:
        steps = 100_000 if args.quick else 500_000
        result = whole_program(2 if args.quick else args.compile_rounds, steps,
                               users_pools=args.as_users_run)
        out = args.out.replace("ppo.json", "ppo_whole_program_as_users_run.json"
                               if args.as_users_run else "ppo_whole_program.json")
        write_json(out, {"machine": machine(), "hyperparameters": HP, **result})
        print(f"wrote {out}\n")
        print("| run | compile s | wall s, compile included | final return |")
        print("|---|---:|---:|---|")
        for who, m in result["medians"].items():
            finals = [x["final_return"] for x in result["runs"][who]]
            shown = ", ".join(f"{f:.1f}" for f in finals) if None not in finals else "-"
            print(f"| {who} | {m['compile_s']:.1f} | {m['wall_s']:.1f} | {shown} |")
        return
    settings = [("CartPole-v1", n) for n in (4, 64, 256, 1024, 4096)] + [("Breakout-MinAtar", 256)]
    if args.quick:
        settings = [("CartPole-v1", 4), ("CartPole-v1", 256)]
        args.repeats, args.compile_rounds = 2, 2
    if args.settings:
        items = (item.rsplit(":", 1) for item in args.settings.split(","))
        settings = [(e, int(n)) for e, n in items]
    if args.as_users_run:
        rows = as_users_run_grid(settings, args.compile_rounds, args.repeats,
                                 cores=not args.no_cores)
        out = args.out.replace("ppo.json", "ppo_as_users_run.json")
        write_json(out, {"machine": machine(), "hyperparameters": HP, "settings": rows})
        print(f"wrote {out}\n")
        print("| env | num_envs | ours, 1 device | ours, a device per core | rejax | "
              "PureJaxRL | ours/rejax | ours/PureJaxRL | per core/rejax | every process |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in rows:
            m, a, q = r["median"], r["steps_per_second"], r["ratio_over_rejax"]
            pj = f"{m['purejaxrl']:,.0f}" if "purejaxrl" in m else "-"
            pj_ratio = f"{q['ours/purejaxrl']:.2f}" if "ours/purejaxrl" in q else "-"
            cores = (f"{m['ours-cores']:,.0f}", f"{q['ours-cores']:.2f}") if "ours-cores" in m \
                else ("-", "-")
            print(f"| {r['env']} | {r['num_envs']} | {m['ours']:,.0f} | {cores[0]} "
                  f"| {m['rejax']:,.0f} | {pj} | {q['ours']:.2f} | {pj_ratio} | "
                  f"{cores[1]} | "
                  + "; ".join(f"{w}: " + ", ".join(f"{x / 1e3:.0f}k" for x in a[w]) for w in a)
                  + " |")
        return
    rows = []
    print(f"{'env':18s} {'envs':>5s} {'ours/s':>10s} {'rejax/s':>10s} {'ratio':>6s} "
          f"{'rollout/s':>10s} {'ceiling/s':>10s} {'roll/ceil':>9s} {'compile ours/rejax':>19s}")
    for env_id, n in settings:
        updates = updates_timed(n)
        r = bench_setting(env_id, n, updates, args.repeats, args.compile_rounds)
        rows.append(r)
        s = r["steps_per_second"]
        print(f"{env_id:18s} {n:5d} {s['ours']:10,.0f} {s['rejax']:10,.0f} "
              f"{r['ratio_ours_over_rejax']:6.2f} {s['rollout']:10,.0f} {s['ceiling']:10,.0f} "
              f"{r['rollout_over_ceiling']:9.2f} "
              f"{r['compile_seconds']['ours']:8.1f} / {r['compile_seconds']['rejax']:5.1f} s",
              flush=True)
    out = {"machine": machine(), "hyperparameters": HP, "settings": rows}
    if args.returns:
        out["final_returns"] = final_returns(100_000 if args.quick else 500_000)
        print("final return (CartPole-v1, 4 envs):", out["final_returns"])
    write_json(args.out, out)
    print(f"wrote {args.out}\n")
    print("| env | num_envs | ours steps/s | rejax steps/s | ours/rejax | rollout steps/s | "
          "ceiling steps/s | rollout/ceiling | compile ours / rejax (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        s = r["steps_per_second"]
        print(f"| {r['env']} | {r['num_envs']} | {s['ours']:,.0f} | {s['rejax']:,.0f} | "
              f"{r['ratio_ours_over_rejax']:.2f} | {s['rollout']:,.0f} | {s['ceiling']:,.0f} | "
              f"{r['rollout_over_ceiling']:.2f} | {r['compile_seconds']['ours']:.1f} / "
              f"{r['compile_seconds']['rejax']:.1f} |")


if __name__ == "__main__":
    main()
