"""Kernel launches per PPO update, ours against rejax, counted in the compiled programs.

Where small batches are latency-bound (a GPU at a few envs, and a CPU too), an update's
time follows the number of kernels it launches more than its arithmetic. This reads the
compiled HLO of one update (``Compiled.as_text()``) and counts, recursively from the
entry computation, every instruction that runs as a kernel of its own (a fusion, a
product, a sort, a scatter, a copy, ...), each loop's body times its known trip count.
It also lists each loop: its trip count, the kernels of one iteration, and the jax
source it came from (the op_name of its metadata).

    python benchmarks/kernel_counts.py --settings CartPole-v1:4,CartPole-v1:4096

Counts are a property of the compiled program, so they are exact and noise-free, but
they do not weigh kernels by their run time: use them to see where launches go, and
time changes with ``benchmarks/ppo.py``. Writes ``benchmarks/results/kernel_counts.json``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

import jax

sys.path.insert(0, os.path.dirname(__file__))
import ppo as bench  # benchmarks/ppo.py
from common import compile_timed, machine, write_json

# Instructions that launch no kernel of their own: plumbing, and the control flow whose
# callees are counted instead.
NOT_KERNELS = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while",
    "conditional", "call", "opt-barrier", "after-all", "add-dependency", "partition-id",
    "replica-id", "domain",
})
_HEADER = re.compile(r"^(?:ENTRY )?%([\w.\-]+) .*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT )?%[\w.\-]+ = (.*?) ([a-z][a-z0-9\-]*)\((.*)$")


def parse(hlo: str) -> tuple[str, dict[str, list[tuple[str, str]]]]:
    """``(entry name, {computation: [(opcode, rest of line)]})`` from HLO text."""
    comps: dict[str, list[tuple[str, str]]] = {}
    entry, current = None, None
    for line in hlo.splitlines():
        if current is None:
            m = _HEADER.match(line)
            if m:
                current = m.group(1)
                comps[current] = []
                if line.startswith("ENTRY"):
                    entry = current
            continue
        if line.strip() == "}":
            current = None
            continue
        m = _INSTR.match(line)
        if m:
            comps[current].append((m.group(2), m.group(3)))
    if entry is None:
        raise ValueError("no ENTRY computation in the HLO text")
    return entry, comps


def _callee(rest: str, attr: str) -> str | None:
    m = re.search(attr + r"=%([\w.\-]+)", rest)
    return m.group(1) if m else None


def count(hlo: str) -> dict:
    """``{"kernels": launches of one call, "loops": [...]}``; a conditional counts its
    most expensive branch, a loop without a known trip count counts one iteration (and
    is marked ``"trip_count": None``)."""
    entry, comps = parse(hlo)
    loops: list[dict] = []
    memo: dict[str, int] = {}

    def kernels(name: str, depth: int) -> int:
        if name in memo and depth > 0:
            return memo[name]
        total = 0
        for opcode, rest in comps[name]:
            if opcode == "while":
                trip = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', rest)
                n = int(trip.group(1)) if trip else None
                body = kernels(_callee(rest, "body"), depth + 1)
                cond = kernels(_callee(rest, "condition"), depth + 1)
                source = re.search(r'op_name="([^"]*)"', rest)
                loops.append({"depth": depth, "trip_count": n, "kernels_per_iteration":
                              body + cond, "source": source.group(1) if source else ""})
                total += (n or 1) * (body + cond)
            elif opcode == "conditional":
                branches = re.search(r"branch_computations=\{([^}]*)\}", rest)
                names = ([b.strip().lstrip("%") for b in branches.group(1).split(",")]
                         if branches else [c for c in (_callee(rest, "true_computation"),
                                                       _callee(rest, "false_computation"))
                                           if c])
                total += max((kernels(b, depth + 1) for b in names), default=0)
            elif opcode == "call":
                total += kernels(_callee(rest, "to_apply"), depth + 1)
            elif opcode not in NOT_KERNELS:
                total += 1
        memo[name] = total
        return total

    return {"kernels": kernels(entry, 0), "loops": loops}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", default="CartPole-v1:4,CartPole-v1:4096",
                   help="comma-separated ENV:NUM_ENVS pairs")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a Config override for ours (repeatable)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                 "kernel_counts.json"))
    args = p.parse_args()
    rows = []
    print(f"backend {jax.default_backend()}; kernel launches per PPO update")
    for item in args.settings.split(","):
        env_id, n = item.rsplit(":", 1)
        row = {"env": env_id, "num_envs": int(n)}
        for who in ("ours", "rejax"):
            fn, state, _ = bench.build(who, env_id, int(n), 1,
                                       args.set if who == "ours" else ())
            compiled, _ = compile_timed(fn, state, ours=who == "ours")
            row[who] = count(compiled.as_text())
        rows.append(row)
        print(f"{env_id} {n} envs: ours {row['ours']['kernels']:,} rejax "
              f"{row['rejax']['kernels']:,}")
        for who in ("ours", "rejax"):
            for loop in row[who]["loops"]:
                if loop["trip_count"] and loop["trip_count"] > 1:
                    print(f"  {who:5s} {'  ' * loop['depth']}{loop['trip_count']:>5} x "
                          f"{loop['kernels_per_iteration']:>4}  {loop['source'][-70:]}")
    write_json(args.out, {"machine": machine(), "overrides": args.set, "settings": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
