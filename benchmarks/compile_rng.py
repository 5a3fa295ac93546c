"""Compile time and step time of our training chunks with jax's rolled (CPU default) and
unrolled (``jaxrl_par.platform.rng.unrolled_threefry``) Threefry lowering, side by side.

For each config the same chunk function (``jaxrl_par.runner.training.make_chunk_fn``, ``--chunk``
updates) is lowered and compiled with each rule, alternating, ``--compiles`` times each
(min and median reported), then the two compiled programs are called in turn
(``--repeats`` pairs, state carried, medians). Also checks that both programs give the
same state bits after the same number of updates.

Usage: ``taskset -c 0 python benchmarks/compile_rng.py [--repeats 9] [--compiles 2]``;
writes ``benchmarks/results/compile_rng.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, write_json

from jaxrl_par.algos import apex, dqn, ppo
from jaxrl_par.platform import rng
from jaxrl_par.runner.training import make_chunk_fn

CONFIGS = {
    "ppo CartPole 4 envs": (lambda: ppo.make(ppo.Config(env="CartPole-v1", num_envs=4,
                                                         total_timesteps=10**6)), 10),
    "ppo CartPole 64 envs": (lambda: ppo.make(ppo.Config(env="CartPole-v1", num_envs=64,
                                                          total_timesteps=10**6)), 4),
    "ppo Breakout 16 envs": (lambda: ppo.make(ppo.Config(env="Breakout-MinAtar", num_envs=16,
                                                          total_timesteps=10**6)), 1),
    "dqn CartPole": (lambda: dqn.make(dqn.Config(env="CartPole-v1")), 10),
    "apex CartPole": (lambda: apex.make(apex.Config(env="CartPole-v1")), 10),
}


def _build(algo, chunk, state, unrolled: bool):
    t = time.perf_counter()
    with rng.unrolled_threefry() if unrolled else contextlib.nullcontext():
        compiled = make_chunk_fn(algo, chunk).lower(state, jnp.int32(0)).compile()
    return compiled, time.perf_counter() - t


def bench(name: str, repeats: int, compiles: int) -> dict:
    make, chunk = CONFIGS[name]
    algo = make()
    keys = jax.random.split(jax.random.key(0), 1)
    state0 = jax.jit(jax.vmap(algo.init))(keys)
    copy = lambda: jax.tree.map(jnp.copy, state0)
    compile_s = {"rolled": [], "unrolled": []}
    programs = {}
    for _ in range(compiles):
        for mode in ("rolled", "unrolled"):
            programs[mode], secs = _build(algo, chunk, state0, mode == "unrolled")
            compile_s[mode].append(secs)
    states = {mode: copy() for mode in programs}
    for mode, c in programs.items():  # warm-up, and the bits check after one chunk
        states[mode], _ = c(states[mode], jnp.int32(0))
    same = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(
        jax.tree.leaves(jax.tree.map(_data, states["rolled"])),
        jax.tree.leaves(jax.tree.map(_data, states["unrolled"]))))
    times = {mode: [] for mode in programs}
    for _ in range(repeats):
        for mode, c in programs.items():
            t = time.perf_counter()
            states[mode], _ = jax.block_until_ready(c(states[mode], jnp.int32(0)))
            times[mode].append((time.perf_counter() - t) / chunk)
    row = {
        "config": name, "chunk_updates": chunk, "same_bits_after_one_chunk": same,
        "compile_s": {m: {"min": min(v), "median": statistics.median(v), "all": v}
                      for m, v in compile_s.items()},
        "update_ms": {m: 1000 * statistics.median(v) for m, v in times.items()},
    }
    row["compile_speedup"] = row["compile_s"]["rolled"]["min"] / row["compile_s"]["unrolled"]["min"]
    row["update_speedup"] = row["update_ms"]["rolled"] / row["update_ms"]["unrolled"]
    return row


def _data(x):
    return jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--compiles", type=int, default=2)
    p.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                 "compile_rng.json"))
    args = p.parse_args()
    rows = []
    print(f"{'config':24s} {'compile rolled':>15s} {'unrolled':>9s} {'x':>6s} "
          f"{'update ms rolled':>17s} {'unrolled':>9s} {'x':>6s}  same bits")
    for name in args.configs:
        r = bench(name, args.repeats, args.compiles)
        rows.append(r)
        c, u = r["compile_s"], r["update_ms"]
        print(f"{name:24s} {c['rolled']['min']:14.2f}s {c['unrolled']['min']:8.2f}s "
              f"{r['compile_speedup']:5.2f}x {u['rolled']:16.3f} {u['unrolled']:9.3f} "
              f"{r['update_speedup']:5.2f}x  {r['same_bits_after_one_chunk']}", flush=True)
    write_json(args.out, {"machine": machine(), "args": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
