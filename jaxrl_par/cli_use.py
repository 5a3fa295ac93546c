"""The commands that use a trained run: ``jaxrl-par export``, ``jaxrl-par plot`` and
``jaxrl-par eval --video/--plot`` (wired into :mod:`jaxrl_par.cli`)."""

from __future__ import annotations

import argparse
import os
import sys


def add_commands(sub) -> list[argparse.ArgumentParser]:
    """Adds ``export`` and ``plot`` to the CLI's subparsers; returns their parsers."""
    ex = sub.add_parser(
        "export", help="write a run's policy parameters (flax msgpack) and config (JSON)",
        description="Writes one seed's acting parameters of a run to a .msgpack file "
                    "(flax.serialization) with the algorithm's config as JSON beside it "
                    "(same name, .json); jaxrl_par.load_policy(path) reads them back.")
    ex.add_argument("log_dir", help="the run's --log-dir")
    ex.add_argument("-o", "--output", default="policy.msgpack", metavar="PATH",
                    help="the parameters' file (default policy.msgpack; the config goes "
                         "to PATH with .json)")
    ex.add_argument("--seed", type=int, default=None,
                    help="the seed to export (default: the best by the run's last greedy "
                         "return, recorded with --eval-every, else its first seed)")
    pl = sub.add_parser(
        "plot", help="learning curves of logged runs: return against env steps and seconds",
        description="Plots each run's return (mean over its seeds, shaded from the lowest "
                    "to the highest seed) against env steps and against training seconds.")
    pl.add_argument("log_dirs", nargs="+", metavar="LOG_DIR", help="runs' --log-dir")
    pl.add_argument("-o", "--output", default="curves.png", metavar="PATH",
                    help="the image (default curves.png; .pdf and .svg too)")
    pl.add_argument("--metric", default="episode_return",
                    help="the metrics.jsonl column to plot (default episode_return; "
                         "greedy_return for runs trained with --eval-every)")
    pl.add_argument("--label", dest="labels", action="append", default=None,
                    metavar="LABEL", help="a run's legend label (repeat once per run)")
    return [ex, pl]


def add_video_arguments(ev: argparse.ArgumentParser) -> None:
    """``eval``'s ``--video PATH``, ``--episodes N``, ``--fps`` and ``--plot PATH``."""
    ev.add_argument("--video", metavar="PATH",
                    help="also record greedy episodes of the run's best seed to PATH (.gif "
                         "with Pillow; .mp4 with pip install 'jaxrl_par[video]')")
    ev.add_argument("--episodes", type=int, default=1, metavar="N",
                    help="episodes in the --video (default 1)")
    ev.add_argument("--fps", type=int, default=30, help="frames per second of the --video")
    ev.add_argument("--plot", metavar="PATH",
                    help="also plot the run's learning curves to PATH, as jaxrl-par plot does")


def eval_video(args) -> None:
    """Records ``eval --video`` and draws ``eval --plot`` (nothing without them)."""
    out = sys.stderr if args.json else sys.stdout
    if args.plot:
        os.environ.setdefault("MPLBACKEND", "Agg")
        from jaxrl_par.runner.plots import plot_runs

        plot_runs([args.log_dir], args.plot)
        print(f"wrote {args.plot}", file=out)
    if not args.video:
        return
    if args.episodes < 1 or args.fps < 1:
        raise ValueError(f"--episodes={args.episodes} --fps={args.fps}: give numbers >= 1")
    from jaxrl_par.runner.policy import load_policy
    from jaxrl_par.runner.video import record_video

    policy = load_policy(args.log_dir)
    video = record_video(policy, args.video, episodes=args.episodes, fps=args.fps)
    print(f"{video.path}: {video.frames} frames, seed {policy.seed}, episode return(s) "
          f"{', '.join(f'{r:.1f}' for r in video.returns)}",
          file=out)


def cmd_export(args) -> int:
    from jaxrl_par.runner.policy import export_policy

    params, config = export_policy(args.log_dir, args.output, seed=args.seed)
    print(f"wrote {params} ({os.path.getsize(params):,} bytes) and {config}: "
          f"jaxrl_par.load_policy({params!r}) acts with them")
    return 0


def cmd_plot(args) -> int:
    os.environ.setdefault("MPLBACKEND", "Agg")  # a file, no window
    from jaxrl_par.runner.plots import plot_runs

    plot_runs(args.log_dirs, args.output, labels=args.labels, metric=args.metric)
    print(f"wrote {args.output}")
    return 0


COMMANDS = {"export": cmd_export, "plot": cmd_plot}
