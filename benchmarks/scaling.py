"""Weak, strong and population scaling of data-parallel training over 1..N devices.

* weak: a fixed per-device batch (``envs_per_device`` envs each), so the global batch
  grows with the devices; ideal = constant steps/s per device (efficiency 100%).
* strong: a fixed global batch split over more devices; ideal = d times the 1-device rate.
* population: ``P`` seeds sharded over the ``pop`` axis (one seed per device), reported as
  env steps/s over all seeds and seeds trained per hour.

Env steps/s are measured by the runner (``TrainResult.steps_per_second``: compilation
excluded). On CPU, ``--fake-devices N`` splits the SAME cores into N XLA devices: the
numbers only prove that the script works, they say nothing about scaling. Run it on
GPUs/TPUs (``benchmarks/gpu.sh``) for real figures. Target there: weak-scaling efficiency
>= 90% from 1 to 8 devices for PPO.

    python benchmarks/scaling.py --quick --fake-devices 4
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny settings, devices 1..2")
    p.add_argument("--fake-devices", type=int, default=0,
                   help="CPU only: split the host into N XLA devices (proves the script)")
    p.add_argument("--max-devices", type=int, default=0, help="largest device count (0: all)")
    p.add_argument("--envs-per-device", type=int, default=0)
    p.add_argument("--num-steps", type=int, default=0)
    p.add_argument("--updates", type=int, default=0, help="PPO updates per measurement")
    p.add_argument("--algos", default="ppo,apex")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "results", "scaling.json"))
    return p.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None and ARGS.fake_devices:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={ARGS.fake_devices}")

import jax

from jaxrl_par import axes
from jaxrl_par.algos import ppo
from jaxrl_par.runner.training import train

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import machine, write_json

SEED_RUN_STEPS = 500_000  # seeds/hour: full 5e5-step CartPole runs trained per hour


def _powers_of_two(n: int) -> list[int]:
    out, d = [], 1
    while d <= n:
        out.append(d)
        d *= 2
    return out


def _measure(make, cfg, devices: int, seeds: int = 1, pop: int = 1) -> dict:
    """Trains in 3 chunks; the rate is taken from chunk 1's end to the last chunk's end,
    so compilation and first-call warm-up are excluded (the runner's own figure is kept
    as ``steps_per_s_runner``)."""
    algo = make(cfg)
    stamps: list[tuple[int, float]] = []
    result = train(algo, list(range(seeds)), num_chunks=3, progress=False, devices=devices,
                   pop=pop, callback=lambda u, _: stamps.append((u, time.perf_counter())))
    (u0, t0), (u1, t1) = stamps[0], stamps[-1]
    if u1 > u0:
        sps = (u1 - u0) * algo.env_steps_per_update * seeds / (t1 - t0)
    else:
        sps = result.steps_per_second
    return {"devices": devices, "pop": pop, "seeds": seeds, "steps_per_s": sps,
            "steps_per_s_per_device": sps / devices, "steps_per_s_runner":
            result.steps_per_second, "compile_s": result.compile_seconds,
            "train_s": result.train_seconds}


def _ppo_cfg(num_envs: int, s) -> ppo.Config:
    return ppo.Config(num_envs=num_envs, num_steps=s.num_steps, num_minibatches=4,
                      update_epochs=2 if s.quick else 4,
                      total_timesteps=num_envs * s.num_steps * s.updates, axis_name=axes.DATA)


def _apex_cfg(num_actors: int, s):
    from jaxrl_par.algos import apex

    steps = 8
    return apex.Config(num_actors=num_actors, num_steps=steps,
                       total_timesteps=num_actors * steps * s.updates,
                       buffer_size=4096, batch_size=64, learning_starts=0,
                       learner_steps_per_iteration=2,  # fixed, whatever apex.Config's default
                       axis_name=axes.DATA)


def _scaling(name, make, cfg_fn, counts, s) -> dict:
    per_dev = s.envs_per_device
    weak = [_measure(make, cfg_fn(per_dev * d, s), d) for d in counts]
    strong = [_measure(make, cfg_fn(per_dev * counts[-1], s), d) for d in counts]
    for rows in (weak, strong):
        base = rows[0]["steps_per_s"]
        for r in rows:
            # weak: ideal is d x the 1-device rate (d times the work at the same speed);
            # strong: ideal is also d x (the same work d times faster).
            ideal = base * r["devices"]
            r["efficiency"] = r["steps_per_s"] / ideal
    return {"algo": name, "weak": weak, "strong": strong}


def _population(counts, s) -> list[dict]:
    rows = []
    for p in counts:  # one seed per device, seeds sharded over `pop`
        r = _measure(ppo.make, _ppo_cfg(s.envs_per_device, s), devices=p, seeds=p, pop=p)
        r["seeds_per_hour"] = 3600.0 * r["steps_per_s"] / SEED_RUN_STEPS
        rows.append(r)
    base = rows[0]["steps_per_s"]
    for r in rows:
        r["efficiency"] = r["steps_per_s"] / (base * r["pop"])
    return rows


def _table(title, rows, extra=()):
    print(f"\n{title}")
    cols = ["devices", "pop", "seeds", "steps_per_s", "steps_per_s_per_device", "efficiency",
            *extra, "compile_s"]
    heads = {"steps_per_s": "steps/s", "steps_per_s_per_device": "steps/s/device",
             "efficiency": "efficiency", "seeds_per_hour": "5e5-step seeds/hour",
             "compile_s": "compile s"}
    widths = [max(len(heads.get(c, c)), 8) for c in cols]
    print("  ".join(f"{heads.get(c, c):>{w}s}" for c, w in zip(cols, widths, strict=True)))
    for r in rows:
        cells = []
        for c, w in zip(cols, widths, strict=True):
            v = r[c]
            if c == "efficiency":
                cells.append(f"{100 * v:>{w - 1}.0f}%")
            elif isinstance(v, float):
                cells.append(f"{v:>{w},.1f}" if v < 100 else f"{v:>{w},.0f}")
            else:
                cells.append(f"{v:>{w}}")
        print("  ".join(cells))


def main(a) -> None:
    platform = jax.default_backend()
    n = len(jax.devices()) if not a.max_devices else min(a.max_devices, len(jax.devices()))
    s = argparse.Namespace(
        quick=a.quick,
        envs_per_device=a.envs_per_device or (4 if a.quick else 2048 if platform != "cpu" else 64),
        num_steps=a.num_steps or (16 if a.quick else 64 if platform != "cpu" else 32),
        updates=a.updates or (6 if a.quick else 30),
    )
    counts = _powers_of_two(min(n, 2) if a.quick else n)
    fake = platform == "cpu" and len(jax.devices()) > 1
    note = ("CPU with fake XLA devices sharing the same cores: these numbers prove the script "
            "runs; they do not measure scaling." if platform == "cpu" else
            f"{len(jax.devices())} {jax.devices()[0].device_kind} device(s)")
    print(f"scaling benchmark on {platform}: devices {counts}, {s.envs_per_device} envs/device, "
          f"{s.num_steps} steps/rollout, {s.updates} updates per point\nNOTE: {note}")
    results = {"machine": machine(), "note": note, "fake_devices": fake,
               "settings": vars(s), "algos": [], "population": [], "skipped": []}
    wanted = a.algos.split(",")
    if "ppo" in wanted:
        r = _scaling("ppo", ppo.make, _ppo_cfg, counts, s)
        results["algos"].append(r)
        _table("PPO weak scaling (fixed per-device batch)", r["weak"])
        _table("PPO strong scaling (fixed global batch)", r["strong"])
        results["population"] = _population(counts, s)
        _table("PPO population scaling (one seed per device)", results["population"],
               extra=("seeds_per_hour",))
    if "apex" in wanted:
        try:
            from jaxrl_par.algos import apex
        except ImportError as e:
            msg = f"apex skipped: jaxrl_par.algos.apex is not available ({e})"
            print(msg)
            results["skipped"].append(msg)
        else:
            try:
                r = _scaling("apex", apex.make, _apex_cfg, counts, s)
                results["algos"].append(r)
                _table("Ape-X weak scaling (fixed per-device actors and replay shard)", r["weak"])
                _table("Ape-X strong scaling (fixed global actors)", r["strong"])
            except Exception as e:  # report it; the PPO rows still stand
                msg = f"apex skipped: {type(e).__name__}: {e}"
                print(msg)
                results["skipped"].append(msg)
    write_json(a.out, results)
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main(ARGS)
