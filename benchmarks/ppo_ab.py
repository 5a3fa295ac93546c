"""A/B of two PPO configs in one process: which one trains faster, and by how much.

Both update scans are built as ``jaxrl_par.runner.training`` builds them (inside
``rng.unrolled_threefry``) from ``benchmarks/ppo.py``'s settings (network and
hyperparameters), with ``--a`` and ``--b`` overriding Config fields. They are then called
in alternation, ``--rounds`` rounds, and the medians compared: the load of a shared
machine hits both alike, which separate processes do not get (on the 2-core CPU hosts,
cross-process runs of one program scatter by up to 1.7x).

    python benchmarks/ppo_ab.py --settings CartPole-v1:4,CartPole-v1:4096 \\
        --a gae_method=scan --b gae_method=associative

Prints one row per setting (B's speed over A's, and each round's ratio range) and writes
``benchmarks/results/ppo_ab.json``. Pin to one core for steadier CPU figures: ``taskset -c 0``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax

sys.path.insert(0, os.path.dirname(__file__))
import ppo as bench  # benchmarks/ppo.py
from common import compile_timed, machine, time_call, write_json


def build(env_id: str, num_envs: int, updates: int, overrides: list[str]):
    """``(compiled, state, compile_seconds)``: ``updates`` PPO updates in one scan."""
    fn, state, _ = bench.build("ours", env_id, num_envs, updates, overrides)
    compiled, seconds = compile_timed(fn, state, ours=True)
    return compiled, state, seconds


def ab_setting(env_id: str, num_envs: int, a: list[str], b: list[str], rounds: int) -> dict:
    updates = bench.updates_timed(num_envs)
    steps = num_envs * bench.HP["num_steps"] * updates
    fa, sa, ca = build(env_id, num_envs, updates, a)
    fb, sb, cb = build(env_id, num_envs, updates, b)
    time_call(fa, sa), time_call(fb, sb)  # warm
    ta, tb = [], []
    for r in range(rounds):
        order = ((fa, sa, ta), (fb, sb, tb)) if r % 2 == 0 else ((fb, sb, tb), (fa, sa, ta))
        for f, s, out in order:
            out.append(time_call(f, s))
    ratios = sorted(x / y for x, y in zip(ta, tb))
    return {
        "env": env_id, "num_envs": num_envs, "updates_timed": updates, "env_steps_timed": steps,
        "a": a, "b": b, "rounds": rounds,
        "steps_per_second": {"a": steps / statistics.median(ta), "b": steps / statistics.median(tb)},
        "b_over_a": statistics.median(ta) / statistics.median(tb),
        "round_ratios": ratios,
        "compile_seconds": {"a": ca, "b": cb},  # in one process, A built first
        "seconds": {"a": ta, "b": tb},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", default="CartPole-v1:4,CartPole-v1:4096",
                   help="comma-separated ENV:NUM_ENVS pairs")
    p.add_argument("--a", action="append", default=[], metavar="FIELD=VALUE",
                   help="a Config override for A (repeatable)")
    p.add_argument("--b", action="append", default=[], metavar="FIELD=VALUE",
                   help="a Config override for B (repeatable)")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                 "ppo_ab.json"))
    args = p.parse_args()
    if args.a == args.b:
        p.error("--a and --b give the same config: name what B changes, e.g. "
                "--a gae_method=scan --b gae_method=associative")
    settings = [(e, int(n)) for e, n in (s.rsplit(":", 1) for s in args.settings.split(","))]
    print(f"A: {args.a or 'defaults'}  B: {args.b or 'defaults'}  "
          f"({jax.default_backend()}, {args.rounds} rounds)")
    print(f"{'env':18s} {'envs':>5s} {'A steps/s':>12s} {'B steps/s':>12s} {'B/A':>6s} "
          f"{'rounds B/A':>13s} {'compile A/B (s)':>16s}")
    rows = []
    t0 = time.perf_counter()
    for env_id, n in settings:
        r = ab_setting(env_id, n, args.a, args.b, args.rounds)
        rows.append(r)
        s = r["steps_per_second"]
        print(f"{env_id:18s} {n:5d} {s['a']:12,.0f} {s['b']:12,.0f} {r['b_over_a']:6.3f} "
              f"{r['round_ratios'][0]:6.3f}-{r['round_ratios'][-1]:.3f} "
              f"{r['compile_seconds']['a']:7.1f} / {r['compile_seconds']['b']:.1f}", flush=True)
    write_json(args.out, {"machine": machine(), "hyperparameters": bench.HP, "settings": rows,
                          "command": " ".join(sys.argv),
                          "wall_seconds": time.perf_counter() - t0})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
