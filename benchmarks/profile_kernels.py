"""Where a compiled PPO rollout or update spends its time, kernel by kernel.

Builds PPO's rollout (``--part rollout``: acting and env steps only) or its whole update
(``--part update``) for one env and ``num_envs``, as ``benchmarks/ppo.py`` does, runs it
under ``jax.profiler`` and prints the XLA kernels (thunks on CPU) that took the most
time, per env step or per update, with their HLO names. ``--hlo NAME`` prints the HLO
line of a kernel, to see what it computes (e.g. which op a ``ynn_fusion`` is).

On XLA:CPU each kernel call also carries a fixed profiler overhead, so with few envs
(small kernels) the table overstates the small kernels. And XLA:CPU runs independent
kernels at the same time, even on one pinned core, so a kernel's time includes its
wait for the others: the kernels' times can sum to more than the wall time, and a
kernel made much shorter can leave the wall time as it was. Use it to find candidates;
decide with wall-time A/Bs (``benchmarks/ppo.py``).

Usage: ``taskset -c 0 python benchmarks/profile_kernels.py --env CartPole-v1 --num-envs
4096 --part rollout [--top 15] [--hlo ynn_fusion.1]``. Writes nothing.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile

import jax

sys.path.insert(0, os.path.dirname(__file__))
import ppo as ppo_bench
from common import compile_timed


def build(env_id: str, num_envs: int, part: str, updates: int):
    """``(compiled, state)``: PPO's rollout or update, ``updates`` of them in a scan."""
    fn, state, algo = ppo_bench.build("ours", env_id, num_envs, updates)
    if part == "rollout":
        fn = ppo_bench.rollout_scan(algo, updates)
    compiled, _ = compile_timed(fn, state, ours=True)
    return compiled, state


def kernel_times(compiled, state, calls: int) -> tuple[collections.Counter, collections.Counter]:
    """Total microseconds and call counts per profiler event name over ``calls`` calls."""
    jax.block_until_ready(compiled(state))  # warm-up
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            for _ in range(calls):
                jax.block_until_ready(compiled(state))
        path = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)[0]
        with gzip.open(path) as f:
            events = json.load(f)["traceEvents"]
    total, count = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("ph") == "X":
            total[e["name"]] += e.get("dur", 0)
            count[e["name"]] += 1
    return total, count


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--part", choices=("rollout", "update"), default="rollout")
    p.add_argument("--updates", type=int, default=2, help="updates (or rollouts) per call")
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--hlo", action="append", default=[], help="print this kernel's HLO line")
    a = p.parse_args()
    compiled, state = build(a.env, a.num_envs, a.part, a.updates)
    total, count = kernel_times(compiled, state, a.calls)
    per, unit = a.calls * a.updates, "update"
    if a.part == "rollout":
        per, unit = per * ppo_bench.HP["num_steps"], "step"
    # Host-side and wrapper events (Python frames, executor waits, loops) are not kernels.
    skip = re.compile(r"^(\$|ThunkExecutor|PjitFunction|CommonPjRt|while)")
    kernels = [(n, t) for n, t in total.most_common() if not skip.match(n)]
    print(f"{a.env}, {a.num_envs} envs, PPO {a.part}: "
          f"{sum(t for _, t in kernels) / per:.1f} us per {unit} in kernels")
    for name, t in kernels[:a.top]:
        print(f"{t / per:10.1f} us/{unit}  {count[name] / per:7.2f} calls/{unit}  {name}")
    text = compiled.as_text()
    for name in a.hlo:
        for line in text.splitlines():
            if re.search(r"%" + re.escape(name) + r" = ", line):
                print(f"{name}: {line.strip()[:400]}")


if __name__ == "__main__":
    main()
