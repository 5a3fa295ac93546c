"""``jaxrl_par.platform.activations.tanh`` against ``jnp.tanh`` on CPU, side by side.

Part 1: the activation alone on ``[rows, 64]`` float32 (``L`` applications in one jitted
scan, reported per application, minus nothing: the same scan with ``x * c`` in place of
the activation is printed as the floor). Part 2: PPO updates (two 64-64 tanh MLPs, as in
``benchmarks/ppo.py``) built with each ``tanh``, interleaved. Medians of ``--repeats``.

Usage: ``taskset -c 0 python benchmarks/activations.py [--quick]``; writes
``benchmarks/results/activations.json``.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
from common import compile_timed, interleaved, machine, write_json

from jaxrl_par import networks
from jaxrl_par.platform import activations

TANHS = {"ours": activations.tanh, "jnp": jnp.tanh}


def elementwise(rows_list, repeats, length=128):
    out = []
    for rows in rows_list:
        x = jax.random.normal(jax.random.key(0), (rows, 64)) * 2

        def scan_of(act, length=length):
            def run(x):
                def body(c, _):
                    return c + 1e-3 * act(x + c), None
                return jax.lax.scan(body, jnp.zeros_like(x), None, length=length)[0].sum()
            return run

        cases = {k: (compile_timed(scan_of(f), x)[0], (x,)) for k, f in TANHS.items()}
        cases["floor"] = (compile_timed(scan_of(lambda v: v * 1.0001), x)[0], (x,))
        med = {k: v / length * 1e6 for k, v in interleaved(cases, repeats).items()}
        row = {"rows": rows, "us": med, "speedup": (med["jnp"] - med["floor"])
               / (med["ours"] - med["floor"])}
        out.append(row)
        print(f"[{rows:5d}, 64] us: ours {med['ours']:7.1f}  jnp.tanh {med['jnp']:7.1f}  "
              f"floor {med['floor']:6.1f}  (above the floor: {row['speedup']:.2f}x)", flush=True)
    return out


def ppo_updates(settings, repeats):
    from jaxrl_par.algos import ppo

    out = []
    for label in settings:
        env, n = label.rsplit(":", 1)
        n = int(n)
        updates = max(1, min(8, 40_000 // (n * 128)))
        cases = {}
        for name, act in TANHS.items():
            saved = networks.ACTIVATIONS["tanh"]
            networks.ACTIVATIONS["tanh"] = act
            try:
                cfg = ppo.Config(env=env, num_envs=n, total_timesteps=n * 128 * 8, torso="mlp",
                                 hidden_sizes=(64, 64), activation="tanh")
                algo = ppo.make(cfg)
                state = algo.init(jax.random.key(0))

                def run(s, algo=algo, updates=updates):
                    return jax.lax.scan(lambda c, _: algo.update(c), s, None, length=updates)
                cases[name] = (compile_timed(run, state, ours=True)[0], (state,))
            finally:
                networks.ACTIVATIONS["tanh"] = saved
        med = {k: v / updates * 1e3 for k, v in interleaved(cases, repeats).items()}
        row = {"setting": label, "ms_per_update": med, "speedup": med["jnp"] / med["ours"]}
        out.append(row)
        print(f"PPO {label:22s} ms/update: ours {med['ours']:8.2f}  jnp.tanh {med['jnp']:8.2f}"
              f"  {row['speedup']:.2f}x", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="one size each, 3 repeats")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                 "activations.json"))
    a = p.parse_args()
    rows_list = [128, 1024, 4096]
    settings = ["CartPole-v1:4", "CartPole-v1:64", "CartPole-v1:256", "CartPole-v1:1024",
                "CartPole-v1:4096", "Breakout-MinAtar:256"]
    if a.quick:
        rows_list, settings, a.repeats = [1024], ["CartPole-v1:4"], 3
    print("Part 1: tanh on [rows, 64] float32, us per application")
    elem = elementwise(rows_list, a.repeats)
    print("\nPart 2: PPO updates built with each tanh")
    upd = ppo_updates(settings, a.repeats)
    write_json(a.out, {"machine": machine(), "elementwise": elem, "ppo_updates": upd})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
