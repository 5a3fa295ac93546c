"""A hyperparameter sweep as one vmapped program against the loop a user writes without it.

For PPO and DQN on CartPole-v1, eight learning rates (seed 0 each):

* ``sweep``: ``Config(sweep=("learning_rate",))`` and ``train(..., hparams=...)``: one
  compile, the eight lanes trained at once;
* ``loop``: eight configs, each made and trained alone (each compiles: the learning rate
  is a constant of its program);
* ``seeds``: the default config with eight seeds vmapped, the runner's throughput
  without a sweep, to show what holding the values in the state costs.

And side by side with a peer: rejax's PPO holds its learning rate as a pytree field, so
its documented sweep is ``jax.vmap`` over ``algo.replace(learning_rate=lr).train(key)``.
Both at the same settings (``benchmarks/ppo.py``'s ``HP``, 4 envs, two 64-64 tanh MLPs,
the learning rate held constant as rejax has no annealing), eight learning rates, seed 0:
compile seconds, and training env steps/s as the median of interleaved repeats (ours:
``train``'s loop without its compile; rejax: its compiled call, with its evaluation
callback made a no-op so that only training is timed).

Reported: wall time of the whole sweep (compile included) for ``sweep`` and ``loop`` and
their ratio; compile seconds; training env steps/s of ``sweep`` and ``seeds`` as the
median of interleaved repeats. Run it pinned to one core (``taskset -c 0``) for steadier
figures.

    python benchmarks/sweep.py [--total-timesteps 200000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import jax
import jax.numpy as jnp
import ppo as ppo_bench  # benchmarks/ppo.py: both libraries' PPO built alike
from common import compile_timed, machine, time_call, write_json

from jaxrl_par.algos import dqn, ppo
from jaxrl_par.runner.training import train

RATES = [3e-3, 2e-3, 1e-3, 5e-4, 2.5e-4, 1e-4, 5e-5, 2.5e-5]


def _run(algo, seeds, **kw):
    t = time.perf_counter()
    result = train(algo, seeds, progress=False, **kw)
    return result, time.perf_counter() - t


def bench(name: str, module, total: int, repeats: int) -> dict:
    base = {"total_timesteps": total}
    sweep_algo = module.make(module.Config(sweep=("learning_rate",), **base))
    hparams = {"learning_rate": RATES}
    sweep, sweep_wall = _run(sweep_algo, [0] * len(RATES), hparams=hparams)
    loop_wall, loop_compile, loop_returns = 0.0, 0.0, []
    for lr in RATES:
        one, wall = _run(module.make(module.Config(learning_rate=lr, **base)), [0])
        loop_wall += wall
        loop_compile += one.compile_seconds
        loop_returns.append(float(one.final_returns()[0]))
    seeds_algo = module.make(module.Config(**base))
    seeds_first, _ = _run(seeds_algo, list(range(len(RATES))))
    speed = {"sweep": [], "seeds": []}
    for _ in range(repeats):  # interleaved: sweep, seeds, sweep, seeds...
        speed["sweep"].append(_run(sweep_algo, [0] * len(RATES),
                                   hparams=hparams)[0].steps_per_second)
        speed["seeds"].append(_run(seeds_algo, list(range(len(RATES))))[0].steps_per_second)
    return {
        "algo": name, "env": "CartPole-v1", "lanes": len(RATES), "total_timesteps": total,
        "learning_rates": RATES,
        "sweep_wall_s": sweep_wall, "loop_wall_s": loop_wall,
        "loop_over_sweep_wall": loop_wall / sweep_wall,
        "sweep_compile_s": sweep.compile_seconds, "loop_compile_s": loop_compile,
        "seeds_compile_s": seeds_first.compile_seconds,
        "sweep_steps_per_s": statistics.median(speed["sweep"]),
        "seeds_steps_per_s": statistics.median(speed["seeds"]),
        "sweep_over_seeds_speed": statistics.median(speed["sweep"])
        / statistics.median(speed["seeds"]),
        "sweep_final_returns": [float(x) for x in sweep.final_returns()],
        "loop_final_returns": loop_returns,
    }


def against_rejax(total: int, repeats: int) -> dict:
    """Our sweep and rejax's vmapped sweep of :data:`RATES` at the same settings."""
    rates = jnp.float32(RATES)
    cfg = ppo_bench.ours_config("CartPole-v1", 4, total, ppo_bench.HP, anneal_lr=False,
                                sweep=("learning_rate",))
    ours = ppo.make(cfg)
    first, _ = _run(ours, [0] * len(RATES), hparams={"learning_rate": RATES})
    peer = ppo_bench.make_rejax("CartPole-v1", 4, total, ppo_bench.HP).replace(
        eval_callback=lambda algo, ts, rng: jnp.float32(0.0))

    def rejax_sweep(lrs, keys):
        # The final actor and critic parameters: outputs that depend on all the training.
        ts, _ = jax.vmap(lambda lr, k: peer.replace(learning_rate=lr).train(k))(lrs, keys)
        return ts.actor_ts.params, ts.critic_ts.params

    keys = jnp.stack([jax.random.key(0)] * len(RATES))
    compiled, rejax_compile = compile_timed(rejax_sweep, rates, keys)
    time_call(compiled, rates, keys)  # warm-up
    steps = total // (4 * ppo_bench.HP["num_steps"]) * 4 * ppo_bench.HP["num_steps"]
    speed = {"ours": [], "rejax": []}
    for _ in range(repeats):
        speed["ours"].append(_run(ours, [0] * len(RATES),
                                  hparams={"learning_rate": RATES})[0].steps_per_second)
        speed["rejax"].append(len(RATES) * steps / time_call(compiled, rates, keys))
    o, r = statistics.median(speed["ours"]), statistics.median(speed["rejax"])
    return {"algo": "ppo", "env": "CartPole-v1", "lanes": len(RATES), "num_envs": 4,
            "total_timesteps": total, "ours_compile_s": first.compile_seconds,
            "rejax_compile_s": rejax_compile, "ours_steps_per_s": o, "rejax_steps_per_s": r,
            "ours_over_rejax": o / r, "all": speed,
            "ours_final_returns": [float(x) for x in first.final_returns()]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-timesteps", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--algos", default="ppo,dqn")
    p.add_argument("--no-rejax", action="store_true", help="skip the side-by-side with rejax")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "sweep.json"))
    args = p.parse_args()
    modules = {"ppo": ppo, "dqn": dqn}
    rows = [bench(n, modules[n], args.total_timesteps, args.repeats)
            for n in args.algos.split(",")]
    print(f"{'algo':5s} {'lanes':>5s} {'sweep wall':>10s} {'loop wall':>9s} {'ratio':>6s} "
          f"{'compile sweep/loop':>18s} {'sweep steps/s':>13s} {'seeds steps/s':>13s} "
          f"{'ratio':>6s}")
    for r in rows:
        print(f"{r['algo']:5s} {r['lanes']:5d} {r['sweep_wall_s']:9.1f}s {r['loop_wall_s']:8.1f}s "
              f"{r['loop_over_sweep_wall']:5.2f}x {r['sweep_compile_s']:8.1f}s/"
              f"{r['loop_compile_s']:6.1f}s"
              f"   {r['sweep_steps_per_s']:13,.0f} {r['seeds_steps_per_s']:13,.0f} "
              f"{r['sweep_over_seeds_speed']:5.2f}x")
        print(f"      final returns by learning rate, sweep: "
              f"{np.round(r['sweep_final_returns'], 1).tolist()}")
        print(f"      final returns by learning rate, loop:  "
              f"{np.round(r['loop_final_returns'], 1).tolist()}")
    peer = None if args.no_rejax else against_rejax(args.total_timesteps, args.repeats)
    if peer:
        print(f"\nPPO sweep of {peer['lanes']} learning rates against rejax's vmapped sweep "
              f"(same settings, constant learning rate):")
        print(f"  ours  {peer['ours_steps_per_s']:12,.0f} steps/s, compile "
              f"{peer['ours_compile_s']:.1f} s")
        print(f"  rejax {peer['rejax_steps_per_s']:12,.0f} steps/s, compile "
              f"{peer['rejax_compile_s']:.1f} s")
        print(f"  ours / rejax: {peer['ours_over_rejax']:.2f}x")
    write_json(args.out, {"machine": machine(), "rows": rows, "rejax": peer})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
