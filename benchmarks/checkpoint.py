"""What checkpointing costs a run: DQN with a 1e6-transition replay, trained with and
without a log dir (an orbax checkpoint of the whole state, replay included, after every
chunk), the two interleaved (A B A B ...) on the same compiled programs.

    python benchmarks/checkpoint.py                       # 3 repeats, 20 chunks
    python benchmarks/checkpoint.py --repeats 5 --total-timesteps 400000
    python benchmarks/checkpoint.py --checkpoint-seconds 0   # a checkpoint every chunk

The figures are the median and the fastest training time (``TrainResult.train_seconds``:
the chunk loop, compile excluded) of each case and their ratios (the fastest is the run
least disturbed by other load on a shared host); the target is a ratio <= 1.05. Writes
benchmarks/results/checkpoint.json (or --out).
"""

from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import platform
import shutil
import statistics
import tempfile

import jax

from jaxrl_par.algos import dqn
from jaxrl_par.runner import memory
from jaxrl_par.runner.training import train


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--buffer-size", type=int, default=1_000_000)
    p.add_argument("--total-timesteps", type=int, default=200_000)
    p.add_argument("--chunks", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--checkpoint-seconds", type=float, default=30.0,
                   help="train's checkpoint_seconds (0: a checkpoint after every chunk)")
    p.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"
                                        / "checkpoint.json"))
    args = p.parse_args()
    cfg = dqn.Config(env="CartPole-v1", buffer_size=args.buffer_size,
                     total_timesteps=args.total_timesteps)
    algo = dqn.make(cfg)
    state_bytes = memory.tree_bytes(jax.eval_shape(algo.init, jax.random.key(0)))
    train(algo, [0], num_chunks=args.chunks, progress=False)  # compile, not timed
    times: dict[str, list[float]] = {"no log dir": [], "log dir (orbax)": []}
    scratch = tempfile.mkdtemp(prefix="jaxrl_par_ckpt_bench_")
    try:
        for r in range(args.repeats):
            plain = train(algo, [0], num_chunks=args.chunks, progress=False)
            times["no log dir"].append(plain.train_seconds)
            logged = train(algo, [0], num_chunks=args.chunks, progress=False,
                           log_dir=f"{scratch}/run{r}",
                           checkpoint_seconds=args.checkpoint_seconds or None)
            times["log dir (orbax)"].append(logged.train_seconds)
            shutil.rmtree(f"{scratch}/run{r}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    ratio = med["log dir (orbax)"] / med["no log dir"]
    best_ratio = best["log dir (orbax)"] / best["no log dir"]
    print(f"DQN CartPole-v1, replay {args.buffer_size:,} transitions (state "
          f"{memory.format_bytes(state_bytes)}), {args.total_timesteps:,} steps in "
          f"{args.chunks} chunks, checkpoint_seconds {args.checkpoint_seconds:g}, median of "
          f"{args.repeats}:")
    print(f"{'case':<18}{'median s':>10}{'fastest s':>11}   runs")
    for k, v in times.items():
        print(f"{k:<18}{med[k]:>10.2f}{best[k]:>11.2f}   {', '.join(f'{x:.2f}' for x in v)}")
    print(f"checkpointing adds {100 * (ratio - 1):+.1f}% (medians), "
          f"{100 * (best_ratio - 1):+.1f}% (fastest runs) to the training time "
          "(target <= +5%)")
    record = {"date": datetime.date.today().isoformat(), "host": platform.node(),
              "cpu": platform.processor(), "backend": jax.default_backend(),
              "buffer_size": args.buffer_size, "state_bytes": state_bytes,
              "total_timesteps": args.total_timesteps, "chunks": args.chunks,
              "checkpoint_seconds": args.checkpoint_seconds,
              "repeats": args.repeats, "train_seconds": times, "median": med,
              "fastest": best, "ratio": ratio, "fastest_ratio": best_ratio}
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
