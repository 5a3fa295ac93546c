"""Ape-X's actors and learner on two devices at once, against one program on one device.

    python benchmarks/actor_learner.py                  # Breakout-MinAtar, 1 and 8 seeds
    python benchmarks/actor_learner.py --quick          # smoke run, CartPole, ~1 minute

Three ways to run the same Ape-X config (``benchmarks/apex.py``'s), timed side by side in
one process, interleaved, ``--repeats`` calls each, median env steps/s (all seeds):

* ``fused``: ``pipeline=False``, the usual update (act, add, learn) as one program;
* ``pipelined``: ``pipeline=True`` (each batch learned one update after it is acted) as
  one program on one device, the reference the two-device run equals;
* ``actor_learner``: the same pipelined algorithm through
  :class:`jaxrl_par.parallel.actor_learner.ActorLearner`, actors on the second local
  device (or, ``--actor-device cpu``, on the host CPU beside an accelerator learner),
  learner and replay on the first, both dispatched before either finishes.

On CPU the process asks XLA for two devices (``--xla_force_host_platform_device_count=2``,
set below before jax starts); each device's programs may still use XLA's intra-op
threads over all cores. Compile seconds are reported apart. Writes
``results/actor_learner.json``.
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

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=2").strip()

import jax  # after XLA_FLAGS
import jax.numpy as jnp

from jaxrl_par.algos import apex
from jaxrl_par.parallel import actor_learner
from jaxrl_par.parallel.actor_learner import ActorLearner
from jaxrl_par.runner.training import make_chunk_fn, seed_keys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apex import configs

HERE = os.path.dirname(os.path.abspath(__file__))


def pick_devices(actor_device: str) -> tuple:
    """``(learner_device, actor_device)``: the runtime's own choice (``"second"``: the
    second local device, the first again when there is one), or the first local device
    with the actors on the host's CPU (``"cpu"``: beside a GPU learner)."""
    learner, actor = actor_learner.pick_devices(True)
    return (learner, jax.devices("cpu")[0]) if actor_device == "cpu" else (learner, actor)


def runners(cfg: apex.Config, seeds: int, updates: int, devices: tuple) -> dict:
    """``name -> (call, state, compile_s)``: ``call(state) -> state`` runs ``updates``
    learning updates of every seed."""
    cfg = dataclasses.replace(cfg, learning_starts=0, total_timesteps=10**9)
    keys, _ = seed_keys(list(range(seeds)))
    out = {}
    for name, pipeline in (("fused", False), ("pipelined", True), ("actor_learner", True)):
        algo = apex.make(dataclasses.replace(cfg, pipeline=pipeline))
        state = jax.jit(jax.vmap(algo.init))(keys)
        t = time.perf_counter()
        if name == "actor_learner":
            chunk = ActorLearner(algo, devices).compile(state, updates)

            def call(s, chunk=chunk):
                return chunk(s, 0)[0]
        else:
            chunk = make_chunk_fn(algo, updates).lower(state, jnp.int32(0)).compile()

            def call(s, chunk=chunk):
                return chunk(s, jnp.int32(0))[0]
        compile_s = time.perf_counter() - t
        state = jax.block_until_ready(call(state))  # fill the replay past a batch; warm up
        out[name] = (call, state, compile_s)
    return out


def bench(cfg: apex.Config, seeds: int, updates: int, repeats: int, devices: tuple) -> dict:
    runs = runners(cfg, seeds, updates, devices)
    steps = updates * cfg.env_steps_per_update * seeds
    rates = {name: [] for name in runs}
    for _ in range(repeats):
        for name, (call, state, c) in runs.items():
            t = time.perf_counter()
            state = jax.block_until_ready(call(state))
            rates[name].append(steps / (time.perf_counter() - t))
            runs[name] = (call, state, c)
    med = {name: statistics.median(r) for name, r in rates.items()}
    return {
        "seeds": seeds, "updates_per_call": updates,
        "env_steps_per_s": med, "all": rates,
        "actor_learner_over_fused": med["actor_learner"] / med["fused"],
        "actor_learner_over_pipelined": med["actor_learner"] / med["pipelined"],
        "compile_s": {name: c for name, (_, _, c) in runs.items()},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="Breakout-MinAtar")
    p.add_argument("--seeds", default="1,8", help="comma-separated seed counts")
    p.add_argument("--updates", type=int, default=40, help="updates per timed call")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--actor-device", choices=("second", "cpu"), default="second",
                   help="the actors' device: the second local device, or the host CPU")
    p.add_argument("--quick", action="store_true", help="CartPole, 1 seed, 2 repeats")
    p.add_argument("--out", default=os.path.join(HERE, "results", "actor_learner.json"))
    a = p.parse_args()
    if a.quick:
        a.env, a.seeds, a.updates, a.repeats = "CartPole-v1", "1", 10, 2
    cfg = configs(a.env, 10**6)["apex"]
    devices = pick_devices(a.actor_device)
    result = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
              "command": " ".join(sys.argv), "jax": jax.__version__,
              "devices": str(jax.devices()), "learner_device": str(devices[0]),
              "actor_device": str(devices[1]), "env": a.env, "rows": []}
    print(f"learner on {devices[0]}, actors on {devices[1]}")
    print(f"{'seeds':>5s} {'fused/s':>10s} {'pipelined/s':>12s} {'actor_learner/s':>16s} "
          f"{'AL/fused':>9s} {'AL/pipelined':>13s}  compile fused / pipelined / AL (s)")
    for seeds in (int(s) for s in a.seeds.split(",")):
        row = bench(cfg, seeds, a.updates, a.repeats, devices)
        result["rows"].append(row)
        r, c = row["env_steps_per_s"], row["compile_s"]
        print(f"{seeds:5d} {r['fused']:10,.0f} {r['pipelined']:12,.0f} "
              f"{r['actor_learner']:16,.0f} {row['actor_learner_over_fused']:9.2f} "
              f"{row['actor_learner_over_pipelined']:13.2f}  {c['fused']:.1f} / "
              f"{c['pipelined']:.1f} / {c['actor_learner']:.1f}", flush=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
