"""BENCHMARKS.md's summary table, regenerated from fresh measurements on this machine.

``python -m benchmarks report --quick|--full`` runs each benchmark script of
:data:`JOBS` (``benchmarks/ppo.py``, ``sb3_ppo.py``, ``apex.py``,
``purejaxrl_dqn.py``, ``sac.py``, ``td3.py``, ``brax_ppo.py``, ``brax_sac.py``,
``replay.py``, ``host_envs.py`` and ``jaxrl-par compare``) as a subprocess, with small
fixed settings for ``--quick`` and the report's own settings for ``--full``; each writes
its JSON under ``benchmarks/results/<quick|full>/``. Every line of :data:`LINES` reads
one figure of ours and one of the peer from that JSON (:class:`Figures`) and is recorded
with the machine, the date, the commit and the command that made it, in
``benchmarks/results/report_<quick|full>.json``. The Markdown table rendered from that
record (:func:`render`) replaces the text between :data:`START` and :data:`END` in
BENCHMARKS.md; the prose around it stays.

A job whose peer package is missing is skipped with a note, as are the PureJaxRL lines
when no PureJaxRL checkout (``$PUREJAXRL_DIR``, else a clone of its public repository at
commit :data:`PUREJAXRL_COMMIT` in ``~/.cache/jaxrl_par``) or no interpreter with its
dependencies (``$PUREJAXRL_PYTHON``: gymnax 0.0.9, distrax, brax, navix; flashbax 0.1.3 and
wandb for its DQN) is at hand. Lines without a
benchmark yet are kept as "not measured yet", with the command that will fill them.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

ROOT = pathlib.Path(__file__).resolve().parent.parent
START, END = "<!-- summary:start -->", "<!-- summary:end -->"
PUREJAXRL_REPO = "https://github.com/luchris429/purejaxrl"
PUREJAXRL_COMMIT = "31756b1"
MEASURED, SKIPPED, PENDING, FAILED = "measured", "skipped", "not measured yet", "failed"


class Job(NamedTuple):
    """One benchmark process. ``quick``/``full``: its arguments after the interpreter, with
    ``{dir}`` standing for the results folder; ``output``: the JSON file it writes there
    (None: the last line of its stdout is the JSON); ``needs``: the peer's modules."""

    key: str
    quick: tuple[str, ...]
    full: tuple[str, ...]
    output: str | None
    needs: tuple[str, ...] = ()
    purejaxrl: bool = False  # needs a PureJaxRL checkout and interpreter


class Figures(NamedTuple):
    """One line's figures: ``ours`` and the peer's (``theirs``) in ``unit``; ``ratio`` > 1
    where ours is ahead (the peer's time over ours for times); the returns reached by
    each, where the run records them; ``note`` what else the line needs said."""

    ours: float
    theirs: float
    unit: str
    ratio: float
    ours_return: float | None = None
    peer_return: float | None = None
    note: str = ""


class Line(NamedTuple):
    """One row of the summary: ``read`` takes the job's JSON to its :class:`Figures`
    (None: the run holds no such figure); ``pending``: why the row has no job yet."""

    key: str
    what: str
    peer: str
    job: str | None
    read: Callable[[dict], Figures | None] | None = None
    pending: str = ""
    command: str = ""  # for a pending line: the command that fills it, if not --only KEY


# --- readers: one job's JSON -> Figures --------------------------------------------------


def _ppo_setting(data: dict, env: str) -> dict | None:
    return next((r for r in data["settings"] if r["env"] == env), None)


def ppo_throughput(env: str, peer: str) -> Callable[[dict], Figures | None]:
    """PPO update scans, each library in fresh processes as its users run it
    (``ppo.py --as-users-run``): env steps/s, ours on one device."""

    def read(data: dict) -> Figures | None:
        row = _ppo_setting(data, env)
        if row is None or peer not in row["median"]:
            return None
        ours, theirs = row["median"]["ours"], row["median"][peer]
        return Figures(ours, theirs, "env steps/s", ours / theirs,
                       note=f"{row['num_envs']} envs; update scans, no return")

    return read


def ppo_main_job(data: dict) -> Figures:
    """README's main job against PureJaxRL's ``ppo.py``: whole-process wall seconds."""
    ours, theirs = data["median_wall_s"]["ours"], data["median_wall_s"]["purejaxrl"]
    finals = data.get("final_return", {})
    return Figures(ours, theirs, "s", theirs / ours, _mean(finals.get("ours")),
                   _mean(finals.get("purejaxrl")), note="5e5 steps, whole process")


def _mean(xs) -> float | None:
    xs = [x for x in xs or [] if x is not None]
    return statistics.fmean(xs) if xs else None


def dqn_throughput(data: dict) -> Figures:
    """DQN at rejax's config, each in fresh processes (``apex.py --speed-only
    --as-users-run``): training env steps/s."""
    ours, theirs = data["median"]["ours"], data["median"]["rejax"]
    return Figures(ours, theirs, "env steps/s", ours / theirs,
                   note="1e5 steps, evaluation off, no return")


def dqn_purejaxrl(data: dict) -> Figures:
    """DQN at PureJaxRL's ``dqn.py`` config (``purejaxrl_dqn.py``): env steps/s of ours
    (``train()``) and of PureJaxRL's compiled run, each in fresh processes, compile
    apart; greedy returns at the end, the training returns in the note."""
    med, comp = data["median_steps_per_second"], data["compile_s"]
    greedy, finals = data.get("greedy_return", {}), data["final_return"]
    train_ours, train_peer = _mean(finals.get("ours")), _mean(finals.get("purejaxrl"))
    trained = ("" if train_ours is None or train_peer is None else
               f"; training returns {train_ours:,.1f} / {train_peer:,.1f}")
    return Figures(med["ours"], med["purejaxrl"], "env steps/s", med["ours"] / med["purejaxrl"],
                   _mean(greedy.get("ours")), _mean(greedy.get("purejaxrl")),
                   note=f"{data['steps']:,} steps, 10 envs; compile {comp['ours']:.0f} s / "
                        f"{comp['purejaxrl']:.0f} s apart; greedy returns" + trained)


def ppo_sb3(data: dict) -> Figures:
    """PPO with the CLI's CartPole preset (``sb3_ppo.py``): env steps/s of ours
    (``train()``, gymnax in the program) and of SB3 on a DummyVecEnv of gymnasium envs at
    the same hyperparameters, fresh processes; the final training returns of both."""
    med, finals = data["median_steps_per_second"], data["final_return"]
    threads = {r.get("torch_threads") for r in data["runs"]["sb3"]}
    return Figures(med["ours"], med["sb3"], "env steps/s", med["ours"] / med["sb3"],
                   _mean(finals.get("ours")), _mean(finals.get("sb3")),
                   note=f"{data['steps']:,} steps, {data['hyperparameters']['num_envs']} envs; "
                        f"compile {data['compile_s']:.0f} s apart; SB3 torch threads "
                        + ", ".join(str(t) for t in sorted(threads, key=str)))


def sac_rejax(data: dict) -> Figures:
    """SAC on Pendulum (``sac.py``): training env steps/s and greedy returns at the end."""
    med = data["median_env_steps_per_s"]
    ours_return = _mean([r["greedy_return"] for r in data["runs"]["ours"]])
    return Figures(med["ours"], med["rejax"], "env steps/s", med["ours"] / med["rejax"],
                   ours_return, data["rejax_quality"]["greedy_return"],
                   note=f"{data['steps']:,} steps x {data['seeds']} seed(s), greedy returns")


def td3_rejax(data: dict) -> Figures:
    """TD3 on Pendulum (``td3.py``): training env steps/s and greedy returns at the end
    (128 episodes per seed on each side)."""
    med, greedy = data["median_env_steps_per_s"], data["greedy_return"]
    return Figures(med["td3"], med["rejax"], "env steps/s", med["td3"] / med["rejax"],
                   greedy["td3"], greedy["rejax"],
                   note=f"{data['steps']:,} steps x {data['seeds']} seed(s), greedy returns")


def _host_case(data: dict, case: str) -> dict | None:
    return next((r for r in data["rows"] if r["case"] == case), None)


def _finite(x: float | None) -> float | None:
    return None if x is None or x != x else x  # NaN: no episode finished


def _ours_in_subprocesses(data: dict, algo: str, n) -> tuple[dict | None, str]:
    """Our case of ``algo`` on ``n`` envs in subprocesses as users run it: the default
    ``grouped`` vector env where the run has it (older runs: ``async``), and a note
    with the other one's ratio to SB3's SubprocVecEnv."""
    ours = _host_case(data, f"jaxrl_par:{algo}:{n}:grouped")
    other = _host_case(data, f"jaxrl_par:{algo}:{n}:async")
    if ours is None:
        return other, ""
    peer = _host_case(data, f"sb3:{algo}:{n}:subproc")
    note = ""
    if other is not None and peer is not None:
        note = (f"a subprocess per core; a subprocess per env (async) "
                f"{other['steps_per_second'] / peer['steps_per_second']:.2f}x")
    return ours, note


def host_ppo_sb3(data: dict) -> Figures | None:
    """PPO on gymnasium CartPole in subprocesses (``host_envs.py``): ours on its default
    vector env (:func:`_ours_in_subprocesses`) against SB3 on SubprocVecEnv at the most
    envs both ran; env steps/s and the return of the last episodes; the other env
    counts' ratios in the note."""
    pairs = {}
    for row in data["rows"]:
        lib, algo, n, _ = row["case"].split(":")
        if (lib, algo) == ("jaxrl_par", "ppo") and int(n) not in pairs:
            ours, note = _ours_in_subprocesses(data, "ppo", n)
            peer = _host_case(data, f"sb3:ppo:{n}:subproc")
            if ours is not None and peer is not None:
                pairs[int(n)] = (ours, peer, note)
    if not pairs:
        return None
    n = max(pairs)
    ours, peer, note = pairs[n]
    others = ", ".join(f"{k} envs {o['steps_per_second'] / p['steps_per_second']:.2f}x"
                       for k, (o, p, _) in sorted(pairs.items()) if k != n)
    return Figures(ours["steps_per_second"], peer["steps_per_second"], "env steps/s",
                   ours["steps_per_second"] / peer["steps_per_second"],
                   _finite(ours["final_return"]), _finite(peer["final_return"]),
                   note="; ".join(filter(None, [f"{n} envs, {ours['steps']:,} steps", note,
                                                others,
                                                f"compile {ours['compile_seconds']:.0f} s apart"])))


def _host_replay_learner(data: dict, algo: str) -> Figures | None:
    """A replay learner (``sac``, ``td3``) on gymnasium Pendulum, 4 envs in subprocesses
    (``host_envs.py``): ours on its default vector env (:func:`_ours_in_subprocesses`)
    against SB3 on SubprocVecEnv; env steps/s and the last episodes' return; the note
    gives the ratio of gradient (critic) steps/s."""
    ours, vec_note = _ours_in_subprocesses(data, algo, 4)
    peer = _host_case(data, f"sb3:{algo}:4:subproc")
    if ours is None or peer is None:
        return None
    updates = ""
    if ours.get("updates_per_second") and peer.get("updates_per_second"):
        updates = (f"gradient steps/s {ours['updates_per_second']:,.0f} / "
                   f"{peer['updates_per_second']:,.0f} = "
                   f"{ours['updates_per_second'] / peer['updates_per_second']:.2f}x")
    return Figures(ours["steps_per_second"], peer["steps_per_second"], "env steps/s",
                   ours["steps_per_second"] / peer["steps_per_second"],
                   _finite(ours["final_return"]), _finite(peer["final_return"]),
                   note="; ".join(filter(None, [
                       f"4 envs, {ours['steps']:,} steps", vec_note, updates,
                       f"compile {ours['compile_seconds']:.0f} s apart"])))


def host_sac_sb3(data: dict) -> Figures | None:
    """SAC on gymnasium Pendulum in subprocesses against SB3 (:func:`_host_replay_learner`)."""
    return _host_replay_learner(data, "sac")


def host_td3_sb3(data: dict) -> Figures | None:
    """TD3 on gymnasium Pendulum in subprocesses against SB3 (:func:`_host_replay_learner`):
    one critic step per env step, an actor step per two, on both sides."""
    return _host_replay_learner(data, "td3")


def brax(data: dict) -> Figures:
    """Ours against Brax's trainer (``brax_ppo.py``/``brax_sac.py``), the first env:
    steady-state env steps/s and greedy returns at the end."""
    row = data["rows"][0]
    return Figures(row["ours_steps_per_s"], row["brax_steps_per_s"], "env steps/s",
                   row["ratio"], _mean([r["greedy_return"] for r in row["ours"]]),
                   _mean([r["greedy_return"] for r in row["brax"]]),
                   note=f"{row['env']}, {row['env_steps']:,} steps, greedy returns")


def _replay_rows(data: dict) -> list[dict]:
    return [r for r in data["rows"] if r["transition"] == "minatar"] or data["rows"]


def replay_copy(data: dict) -> Figures | None:
    """The uniform add of 256 MinAtar rows against XLA's plain copy of the same bytes
    into a ring as large; ratio = copy time / our time (the target: >= 0.5)."""
    row = next((r for r in _replay_rows(data) if r["op"] == "uniform add 256"
                and "xla_floor_us" in r), None)
    if row is None:
        return None
    return Figures(row["ours_us"], row["xla_floor_us"], "us", row["xla_floor_us"] / row["ours_us"],
                   note=f"{row['transition']} rows, capacity 2^{row['capacity'].bit_length() - 1}"
                        f", flashbax {row['flashbax_us']:.1f} us")


def replay_flashbax(data: dict) -> Figures | None:
    """Every other replay row against flashbax, in a training scan: the least speedup,
    and where the run has it, how far flashbax's uniform sample is from a bare gather of
    the same rows (``--copy-floor``)."""
    rows = [r for r in data["rows"] if not (r["transition"] == "minatar"
                                            and r["op"] == "uniform add 256")]
    if not rows:
        return None
    low = min(rows, key=lambda r: r["speedup"])
    floor = next((r for r in rows if r["op"].startswith("uniform sample")
                  and "xla_floor_us" in r), None)
    return Figures(low["ours_us"], low["flashbax_us"], "us", low["speedup"],
                   note=f"least of {len(rows)} rows: {low['transition']} {low['op']}, "
                        f"2^{low['capacity'].bit_length() - 1}"
                        + (f"; {floor['op']}: flashbax {floor['flashbax_over_xla_floor']:.1f}x "
                           f"a bare gather of its rows, ours {floor['speedup']:.1f}x flashbax"
                           if floor else ""))


def paradigms(data: dict) -> Figures | None:
    """``jaxrl-par compare``: the fastest entry against the slowest (the table below the
    summary lists every entry)."""
    rows = data["rows"]
    if len(rows) < 2:
        return None
    fast = max(rows, key=lambda r: r["steps_per_second"])
    slow = min(rows, key=lambda r: r["steps_per_second"])
    return Figures(fast["steps_per_second"], slow["steps_per_second"], "env steps/s",
                   fast["steps_per_second"] / slow["steps_per_second"], fast["final_return"],
                   slow["final_return"],
                   note=f"{fast['entry']} (fastest) over {slow['entry']} (slowest), "
                        f"{rows[0]['env']}")


# --- what runs ---------------------------------------------------------------------------

COMPARE_QUICK = ("ppo", "a2c", "a3c@threads", "dqn", "impala", "apex")
JOBS: tuple[Job, ...] = (
    Job("ppo", ("benchmarks/ppo.py", "--as-users-run", "--settings",
                "CartPole-v1:4,Breakout-MinAtar:256",
                "--compile-rounds", "1", "--repeats", "3", "--no-cores", "--out",
                "{dir}/ppo.json"),
        ("benchmarks/ppo.py", "--as-users-run", "--settings",
         "CartPole-v1:4,Breakout-MinAtar:256", "--compile-rounds", "3", "--repeats", "3",
         "--out", "{dir}/ppo.json"),
        "ppo_as_users_run.json", needs=("rejax",)),
    Job("ppo-main-job", ("benchmarks/ppo.py", "--main-job", "--compile-rounds", "1",
                         "--out", "{dir}/ppo.json"),
        ("benchmarks/ppo.py", "--main-job", "--compile-rounds", "3", "--out", "{dir}/ppo.json"),
        "ppo_main_job.json", purejaxrl=True),
    Job("sb3-ppo", ("benchmarks/sb3_ppo.py", "--steps", "40960", "--rounds", "1", "--out",
                    "{dir}/sb3_ppo.json"),
        ("benchmarks/sb3_ppo.py", "--steps", "150000", "--rounds", "3", "--out",
         "{dir}/sb3_ppo.json"), "sb3_ppo.json", needs=("stable_baselines3",)),
    Job("purejaxrl-dqn", ("benchmarks/purejaxrl_dqn.py", "--steps", "200000", "--rounds", "1",
                          "--repeats", "1", "--out", "{dir}/purejaxrl_dqn.json"),
        ("benchmarks/purejaxrl_dqn.py", "--steps", "500000", "--rounds", "3", "--repeats", "3",
         "--out", "{dir}/purejaxrl_dqn.json"), "purejaxrl_dqn.json", purejaxrl=True),
    Job("dqn", ("benchmarks/apex.py", "--speed-only", "--as-users-run", "--repeats", "1"),
        ("benchmarks/apex.py", "--speed-only", "--as-users-run", "--repeats", "3"),
        None, needs=("rejax",)),
    Job("sac", ("benchmarks/sac.py", "--repeats", "1", "--seeds", "1", "--steps", "15000",
                "--out", "{dir}/sac.json"),
        ("benchmarks/sac.py", "--repeats", "3", "--seeds", "2", "--steps", "30000",
         "--out", "{dir}/sac.json"), "sac.json", needs=("rejax",)),
    Job("brax-ppo", ("benchmarks/brax_ppo.py", "--envs", "fast", "--repeats", "1", "--epochs",
                     "3", "--scale", "0.25", "--out", "{dir}/brax_ppo.json"),
        ("benchmarks/brax_ppo.py", "--envs", "fast", "--repeats", "3", "--out",
         "{dir}/brax_ppo.json"), "brax_ppo.json", needs=("brax",)),
    Job("brax-sac", ("benchmarks/brax_sac.py", "--envs", "fast", "--repeats", "1", "--epochs",
                     "3", "--scale", "0.25", "--out", "{dir}/brax_sac.json"),
        ("benchmarks/brax_sac.py", "--envs", "fast", "--repeats", "3", "--out",
         "{dir}/brax_sac.json"), "brax_sac.json", needs=("brax",)),
    Job("replay", ("benchmarks/replay.py", "--in-scan", "--copy-floor", "--kinds", "minatar",
                   "--capacities", "131072", "--skip-any-size", "--repeats", "7", "--calls",
                   "5", "--out", "{dir}/replay_in_scan.json"),
        ("benchmarks/replay.py", "--in-scan", "--copy-floor", "--capacities", "1048576",
         "--repeats", "5", "--calls", "5", "--out", "{dir}/replay_in_scan.json"),
        "replay_in_scan.json", needs=("flashbax",)),
    Job("compare", ("-m", "jaxrl_par", "compare", *COMPARE_QUICK, "--env", "CartPole-v1",
                    "--total-timesteps", "100000", "--no-progress", "--out",
                    "{dir}/compare_cartpole.json"),
        ("-m", "jaxrl_par", "compare", "--env", "CartPole-v1", "--seeds", "4", "--target", "475",
         "--repeats", "3", "--no-progress", "--out", "{dir}/compare_cartpole.json"),
        "compare_cartpole.json"),
    Job("td3", ("benchmarks/td3.py", "--repeats", "1", "--seeds", "1", "--steps", "15000",
                "--out", "{dir}/td3.json"),
        ("benchmarks/td3.py", "--repeats", "2", "--seeds", "2", "--steps", "30000",
         "--out", "{dir}/td3.json"), "td3.json", needs=("rejax",)),
    Job("host-envs", ("benchmarks/host_envs.py", "--num-envs", "32", "--ppo-steps", "8192",
                      "--sac-steps", "6000", "--td3-steps", "6000", "--subprocesses-only",
                      "--no-async", "--json", "{dir}/host_envs.json"),
        ("benchmarks/host_envs.py", "--json", "{dir}/host_envs.json"), "host_envs.json",
        needs=("stable_baselines3",)),
)

_GPU = "needs a GPU machine; run the command there"
LINES: tuple[Line, ...] = (
    Line("ppo-rejax", "PPO, CartPole-v1", "rejax", "ppo", ppo_throughput("CartPole-v1", "rejax")),
    Line("ppo-purejaxrl", "PPO, CartPole-v1", "PureJaxRL", "ppo",
         ppo_throughput("CartPole-v1", "purejaxrl")),
    Line("ppo-rejax-breakout", "PPO, Breakout-MinAtar", "rejax", "ppo",
         ppo_throughput("Breakout-MinAtar", "rejax")),
    Line("ppo-purejaxrl-breakout", "PPO, Breakout-MinAtar", "PureJaxRL", "ppo",
         ppo_throughput("Breakout-MinAtar", "purejaxrl")),
    Line("ppo-main-job",
         "PPO, CartPole-v1 to a return of 500 (README's main job; PureJaxRL: 5e5 steps)",
         "PureJaxRL",
         "ppo-main-job", ppo_main_job),
    Line("ppo-sb3", "PPO, CartPole-v1 (the CLI's preset; SB3 on gymnasium)", "SB3 DummyVecEnv",
         "sb3-ppo", ppo_sb3),
    Line("dqn-rejax", "DQN, CartPole-v1 (rejax's config)", "rejax", "dqn", dqn_throughput),
    Line("dqn-purejaxrl", "DQN, CartPole-v1 (PureJaxRL's config)", "PureJaxRL",
         "purejaxrl-dqn", dqn_purejaxrl),
    Line("sac-rejax", "SAC, Pendulum-v1", "rejax", "sac", sac_rejax),
    Line("sac-sb3", "SAC, Pendulum-v1 on host envs (gymnasium subprocesses)",
         "SB3 SubprocVecEnv", "host-envs", host_sac_sb3),
    Line("td3-rejax", "TD3, Pendulum-v1", "rejax", "td3", td3_rejax),
    Line("td3-sb3", "TD3, Pendulum-v1 on host envs (gymnasium subprocesses)",
         "SB3 SubprocVecEnv", "host-envs", host_td3_sb3),
    Line("ppo-brax", "PPO, Brax env", "Brax's PPO trainer", "brax-ppo", brax),
    Line("sac-brax", "SAC, Brax env", "Brax's SAC trainer", "brax-sac", brax),
    Line("replay-copy", "uniform add of 256 MinAtar rows, in a scan",
         "a plain XLA copy of its bytes", "replay", replay_copy),
    Line("replay-flashbax", "every other replay op, in a scan", "flashbax", "replay",
         replay_flashbax),
    Line("host-ppo-sb3", "PPO, CartPole-v1 on host envs (gymnasium subprocesses)",
         "SB3 SubprocVecEnv", "host-envs", host_ppo_sb3),
    Line("paradigms", "paradigms against each other (`jaxrl-par compare`)", "each other",
         "compare", paradigms),
    Line("gpu", "every row above on a GPU", "as above", None, pending=_GPU,
         command="python -m benchmarks report --full"),
)


# --- the machine and the commit ----------------------------------------------------------


def machine() -> str:
    """``"<cores>-core <CPU model>, <GPUs or 'no GPU'>, jax <version>"``."""
    model = platform.processor() or platform.machine()
    try:
        for text in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name"):
                model = text.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpus = "no GPU"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        if out.strip():
            names = out.strip().splitlines()
            gpus = f"{len(names)}x {names[0]}"
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        jax_version = importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        jax_version = "?"
    return f"{os.cpu_count()}-core {model}, {gpus}, jax {jax_version}"


def commit() -> str:
    """This tree's short commit, ``+changes`` when tracked code differs from it."""
    def git(*args):
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True,
                              text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                ":!benchmarks/results", ":!BENCHMARKS.md")
    return head + ("+changes" if dirty else "")


@functools.cache
def purejaxrl() -> tuple[dict[str, str] | None, str]:
    """``(environment, "")`` that lets ``benchmarks/ppo.py`` run PureJaxRL, or ``(None,
    why not)``: ``$PUREJAXRL_DIR`` or a clone at :data:`PUREJAXRL_COMMIT` in the cache,
    and ``$PUREJAXRL_PYTHON``."""
    where = os.environ.get("PUREJAXRL_DIR")
    if not where:
        cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
        clone = cache / "jaxrl_par" / f"purejaxrl-{PUREJAXRL_COMMIT}"
        try:
            if not (clone / ".git").exists():
                subprocess.run(["git", "clone", "--quiet", PUREJAXRL_REPO, str(clone)],
                               check=True, capture_output=True, timeout=120)
            # also in a clone made before: it runs at the pinned commit, unmodified
            subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", "--force",
                            PUREJAXRL_COMMIT], check=True, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None, (f"PureJaxRL could not be fetched from {PUREJAXRL_REPO} at "
                          f"{PUREJAXRL_COMMIT}; set PUREJAXRL_DIR to a checkout of it")
        where = str(clone)
    python = os.environ.get("PUREJAXRL_PYTHON")
    if not python:
        return None, ("set PUREJAXRL_PYTHON to an interpreter with gymnax 0.0.9, distrax, brax "
                      "and navix "
                      "(benchmarks/purejaxrl_ppo.py), and flashbax 0.1.3 and wandb for its "
                      "DQN (benchmarks/purejaxrl_dqn.py)")
    return {"PUREJAXRL_DIR": where, "PUREJAXRL_PYTHON": python}, ""


# --- running -----------------------------------------------------------------------------


def command_of(job: Job, mode: str, results: pathlib.Path) -> list[str]:
    args = job.quick if mode == "quick" else job.full
    return [sys.executable, *(a.replace("{dir}", str(results)) for a in args)]


def shown(command: list[str], results: pathlib.Path) -> str:
    """The command as a user types it from the repository root."""
    parts = ["python", *command[1:]]
    rel = os.path.relpath(results, ROOT)
    return " ".join(shlex.quote(p.replace(str(results), rel)) for p in parts)


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children."""
    t = os.times()
    return t.children_user + t.children_system


def run_job(job: Job, mode: str, results: pathlib.Path, timeout: float | None,
            say: Callable[[str], None]) -> dict:
    """Runs one job; ``{"status", "note", "data", "command", "date", "seconds"}``."""
    command = command_of(job, mode, results)
    record = {"command": shown(command, results), "data": None, "note": "",
              "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")}
    missing = [m for m in job.needs if importlib.util.find_spec(m) is None]
    if missing:
        return {**record, "status": SKIPPED,
                "note": f"{', '.join(missing)} not installed (pip install -e '.[bench]')"}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if job.purejaxrl:
        extra, why = purejaxrl()
        if extra is None:
            return {**record, "status": SKIPPED, "note": why}
        env.update(extra)
    elif job.key == "ppo":
        extra, why = purejaxrl()
        if extra is None:
            record["note"] = f"PureJaxRL: {why}"
        else:
            env.update(extra)
    say(f"[{job.key}] {record['command']}")
    t, cpu, load = time.perf_counter(), _children_cpu(), os.getloadavg()[0]
    try:
        out = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**record, "status": FAILED, "note": f"stopped after {timeout:.0f} s"}
    record["seconds"] = time.perf_counter() - t
    record["cpu_seconds"] = _children_cpu() - cpu
    # The 1-minute load average before and after: above the core count, other work
    # shared the machine and the figures are not an idle machine's.
    record["load"] = [round(load, 1), round(os.getloadavg()[0], 1)]
    if out.returncode < 0:  # e.g. SIGKILL from the kernel's out-of-memory killer
        return {**record, "status": FAILED, "note": f"killed by signal {-out.returncode}"}
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {**record, "status": FAILED, "note": f"exit {out.returncode}: {last}"[:300]}
    if job.output is None:
        record["data"] = json.loads(out.stdout.strip().splitlines()[-1])
        (results / f"{job.key}.json").write_text(json.dumps(record["data"], indent=1))
    else:
        record["data"] = json.loads((results / job.output).read_text())
    say(f"[{job.key}] done in {record['seconds']:.0f} s")
    return {**record, "status": MEASURED}


def measure(mode: str, only: set[str] | None, results: pathlib.Path, timeout: float | None,
            say: Callable[[str], None] = print) -> dict:
    """Runs the jobs the selected lines need; the report record (see the module doc)."""
    results.mkdir(parents=True, exist_ok=True)
    lines = [ln for ln in LINES if only is None or ln.key in only]
    wanted = {ln.job for ln in lines if ln.job}
    where, head = machine(), commit()  # before the runs: the code they measure
    runs = {job.key: run_job(job, mode, results, timeout, say)
            for job in JOBS if job.key in wanted}
    rows = []
    for ln in lines:
        row = {"key": ln.key, "what": ln.what, "peer": ln.peer, "machine": where,
               "commit": head}
        if ln.job is None:
            rows.append({**row, "status": PENDING, "note": ln.pending, "date": "",
                         "command": ln.command
                         or f"python -m benchmarks report --{mode} --only {ln.key}"})
            continue
        run = runs[ln.job]
        busy = (f"load {run['load'][0]}-{run['load'][1]} on {os.cpu_count()} cores"
                if max(run.get("load", [0])) > (os.cpu_count() or 1) else "")
        note = "; ".join(filter(None, [run["note"], busy]))
        row.update(command=run["command"], date=run["date"], note=note)
        figures = ln.read(run["data"]) if run["status"] == MEASURED else None
        if run["status"] == MEASURED and figures is None:
            continue  # this mode's run does not hold the figure (e.g. --quick's one env)
        row["status"] = run["status"]
        if figures is not None:
            row.update(figures._asdict())
            row["note"] = "; ".join(filter(None, [figures.note, note]))
        rows.append(row)
    extra = {}
    if runs.get("compare", {}).get("status") == MEASURED:
        extra["compare"] = [{k: r[k] for k in ("entry", "paradigm", "steps_per_second",
                                               "final_return", "compile_seconds",
                                               "train_seconds", "env_steps")}
                            for r in runs["compare"]["data"]["rows"]]
    if runs.get("replay", {}).get("status") == MEASURED:
        extra["replay"] = [{k: r.get(k) for k in ("transition", "capacity", "op", "ours_us",
                                                  "flashbax_us", "speedup", "xla_floor_us")}
                           for r in runs["replay"]["data"]["rows"]]
    return {"mode": mode, "machine": where, "commit": head,
            "selected": [ln.key for ln in lines],
            "seconds": {k: v.get("seconds") for k, v in runs.items()},
            "cpu_seconds": {k: v.get("cpu_seconds") for k, v in runs.items()}, "rows": rows,
            "tables": extra}


# --- rendering ---------------------------------------------------------------------------


def _num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    if unit == "us" or abs(x) < 100:
        return f"{x:,.1f}"
    return f"{x:,.0f}"


def _ret(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def render(record: dict) -> str:
    """The Markdown that goes between the markers: the summary table, then the tables of
    the paradigms (``compare``) and of the replay ops, where the record holds them."""
    out = [f"Mode `--{record['mode']}`. Ratio > 1: ours ahead (for times, the peer's time "
           "over ours). Returns: ours / the peer's, where the run records them.", "",
           "| run | peer | ours | peer | unit | ratio | return ours / peer | machine | date "
           "| commit | command | note |",
           "|---|---|---:|---:|---|---:|---|---|---|---|---|---|"]
    for r in record["rows"]:
        if r["status"] != MEASURED:
            out.append(f"| {r['what']} | {r['peer']} | {r['status']} | | | | | "
                       f"{r['machine'] if r['status'] != PENDING else ''} | {r['date']} | "
                       f"{r['commit'] if r['status'] != PENDING else ''} | `{r['command']}` | "
                       f"{r['note']} |")
            continue
        rets = ("-" if r["ours_return"] is None and r["peer_return"] is None else
                f"{_ret(r['ours_return'])} / {_ret(r['peer_return'])}")
        out.append(f"| {r['what']} | {r['peer']} | {_num(r['ours'], r['unit'])} | "
                   f"{_num(r['theirs'], r['unit'])} | {r['unit']} | **{r['ratio']:.2f}** | "
                   f"{rets} | "
                   f"{r['machine']} | {r['date']} | {r['commit']} | `{r['command']}` | "
                   f"{r['note']} |")
    tables = record.get("tables", {})
    if tables.get("compare"):
        rows = sorted(tables["compare"], key=lambda r: -r["steps_per_second"])
        out += ["", "Paradigms on one env (`jaxrl-par compare`, the `paradigms` row):", "",
                "| entry | paradigm | env steps | env steps/s | final return | compile s |",
                "|---|---|---:|---:|---:|---:|"]
        out += [f"| {r['entry']} | {r['paradigm']} | {r['env_steps']:,} | "
                f"{r['steps_per_second']:,.0f} | {_ret(r['final_return'])} | "
                f"{r['compile_seconds']:.1f} |" for r in rows]
    if tables.get("replay"):
        out += ["", "Replay ops in a scan (the `replay` rows), us per op:", "",
                "| rows | capacity | op | ours | flashbax | flashbax / ours | XLA copy |",
                "|---|---:|---|---:|---:|---:|---:|"]
        out += [f"| {r['transition']} | 2^{r['capacity'].bit_length() - 1} | {r['op']} | "
                f"{r['ours_us']:,.1f} | {r['flashbax_us']:,.1f} | {r['speedup']:.2f} | "
                f"{_num(r.get('xla_floor_us'), 'us')} |" for r in tables["replay"]]
    return "\n".join(out)


def write_summary(report: pathlib.Path, markdown: str) -> None:
    """Replaces the text between :data:`START` and :data:`END` in ``report``."""
    text = report.read_text()
    if START not in text or END not in text.split(START, 1)[1]:
        raise ValueError(f"{report} has no {START} ... {END} block: add the two markers")
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    report.write_text(f"{head}{START}\n{markdown}\n{END}{tail}")


def merge(old: dict, new: dict) -> dict:
    """A record of some rows (``--only``) merged into an earlier one of the same mode: its
    rows and tables replace the earlier ones of the same key, the rest stays. A row the
    new record selected but holds no figure for (its job's run in this mode does not
    measure it) leaves the report, rather than keep an older run's row."""
    order = {ln.key: i for i, ln in enumerate(LINES)}
    selected = set(new.get("selected", ()))
    rows = {r["key"]: r for r in old["rows"] if r["key"] not in selected} | {
        r["key"]: r for r in new["rows"]}
    return {**old, "machine": new["machine"], "commit": new["commit"],
            "rows": sorted(rows.values(), key=lambda r: order.get(r["key"], len(order))),
            **{k: {**old.get(k, {}), **new[k]} for k in ("seconds", "cpu_seconds", "tables")}}


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="measure every row and rewrite BENCHMARKS.md's table",
                       description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--quick", action="store_const", dest="mode", const="quick",
                      help="small fixed settings (minutes)")
    mode.add_argument("--full", action="store_const", dest="mode", const="full",
                      help="the report's settings (an hour or more on 2 CPU cores)")
    mode.add_argument("--render-only", metavar="RECORD.json", default=None,
                      help="rewrite the table from a record made before, measuring nothing")
    p.add_argument("--only", default=None, metavar="KEY[,KEY]",
                   help="these rows only: " + ", ".join(ln.key for ln in LINES))
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "results"),
                   help="where the JSON goes (default benchmarks/results)")
    p.add_argument("--report", default=str(ROOT / "BENCHMARKS.md"),
                   help="the Markdown file whose marked block is rewritten")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds one benchmark process may run (default: no limit)")
    p.set_defaults(run=main)


def main(args: argparse.Namespace) -> int:
    report = pathlib.Path(args.report)
    if not report.exists():
        print(f"error: {report} does not exist; give --report FILE", file=sys.stderr)
        return 2
    if args.render_only:
        record = json.loads(pathlib.Path(args.render_only).read_text())
    else:
        only = set(args.only.split(",")) if args.only else None
        unknown = (only or set()) - {ln.key for ln in LINES}
        if unknown:
            print(f"error: unknown row {', '.join(sorted(unknown))}; one of "
                  + ", ".join(ln.key for ln in LINES), file=sys.stderr)
            return 2
        results = pathlib.Path(args.results).resolve()
        record = measure(args.mode, only, results / args.mode, args.timeout)
        path = results / f"report_{args.mode}.json"
        if only and path.exists():
            record = merge(json.loads(path.read_text()), record)
        path.write_text(json.dumps(record, indent=1))
        print(f"wrote {path}")
    try:
        write_summary(report, render(record))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote the summary table into {report}")
    return 0
