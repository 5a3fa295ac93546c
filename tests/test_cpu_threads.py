"""XLA:CPU's pool size (jaxrl_par.platform.cpu_threads): set before jax starts, kept when the user
or jax already chose, and the CLI's auto choice."""

import json
import os
import subprocess
import sys

import pytest

from jaxrl_par.platform import cpu_threads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs a program, then prints limit()'s answer and the number of XLA pool threads
# (named "tf_XLAEigen" by XLA) in this process.
PROBE = """
import os, sys
from jaxrl_par.platform import cpu_threads
early = {early}
asked = cpu_threads.limit(1) if early else None
import jax, jax.numpy as jnp
jax.jit(lambda x: x @ x)(jnp.ones((64, 64))).block_until_ready()
late = None if early else cpu_threads.limit(1)
names = [open(f"/proc/self/task/{{t}}/comm").read() for t in os.listdir("/proc/self/task")]
print(asked, late, os.environ.get("NPROC"), sum("XLAEigen" in n for n in names))
"""


def _probe(early: bool, **env) -> list[str]:
    base = {k: v for k, v in os.environ.items() if k not in cpu_threads.VARIABLES}
    out = subprocess.run([sys.executable, "-c", PROBE.format(early=early)], cwd=ROOT,
                         env={**base, **env}, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_limit_before_jax_starts_gives_a_pool_of_one_thread():
    assert _probe(early=True) == ["True", "None", "1", "1"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_limit_keeps_the_users_choice_and_cannot_change_a_started_jax():
    # NPROC=3 from the user: kept (three pool threads), and limit(1) says it did not apply
    assert _probe(early=True, NPROC="3") == ["False", "None", "3", "3"]
    # after jax has run a program: nothing changes, and limit says so
    asked, late, nproc, threads = _probe(early=False)
    assert (asked, late, nproc) == ("None", "False", "None")
    if (os.cpu_count() or 1) > 1:  # XLA's default: a thread per core, untouched
        assert int(threads) > 1


def test_cli_choice(monkeypatch):
    """auto: one thread for one program at a time, XLA's default when programs run at
    once from host threads or when the environment chose; a number always wins."""
    monkeypatch.setattr(cpu_threads, "backend_started", lambda: False)
    for name in cpu_threads.VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert cpu_threads.apply("auto", concurrent=True) is None
    assert "NPROC" not in os.environ
    assert cpu_threads.apply("default", concurrent=False) is None
    assert cpu_threads.apply("auto", concurrent=False) == 1 and os.environ["NPROC"] == "1"
    monkeypatch.setenv("NPROC", "2")
    assert cpu_threads.apply("auto", concurrent=False) == 2  # the environment's choice
    monkeypatch.setenv("PORTABLE_NPROC", "4")  # XLA reads it first
    assert cpu_threads.apply("3", concurrent=True) == 3
    assert os.environ["NPROC"] == "3" and "PORTABLE_NPROC" not in os.environ


@pytest.mark.parametrize("setting", ["3x", "-1", "", "one"])
def test_bad_settings_name_the_forms(setting):
    with pytest.raises(ValueError, match="give auto"):
        cpu_threads.parse(setting)
    with pytest.raises(ValueError, match="threads >= 1"):
        cpu_threads.limit(0)


def test_runner_tips_once_about_a_pool_nobody_chose(monkeypatch, capsys):
    from jaxrl_par.algos import ppo
    from jaxrl_par.runner.training import train

    for name in cpu_threads.VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cpu_threads, "_hinted", False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    algo = ppo.make(ppo.Config(env="CartPole-v1", num_envs=4, num_steps=8, num_minibatches=1,
                               update_epochs=1, total_timesteps=64))
    train(algo, 0, progress=True)
    train(algo, 1, progress=True)
    err = capsys.readouterr().err
    assert err.count("tip: XLA:CPU runs this on its default 2 threads") == 1, err
    assert "cpu_threads.limit()" in err
    monkeypatch.setattr(cpu_threads, "_hinted", False)
    monkeypatch.setenv("NPROC", "2")  # the user chose: no tip
    assert cpu_threads.hint_once(lambda: 32) is None
    monkeypatch.delenv("NPROC")
    assert cpu_threads.hint_once(lambda: 4096) is None  # a large run: XLA's pool suits it
    assert cpu_threads.hint_once(lambda: 32) is not None
    assert cpu_threads.hint_once(lambda: 32) is None


def test_auto_gives_large_observation_batches_xlas_pool():
    """The size auto switches at, and what a run's observations count: num_envs x the
    observation's size."""
    from jaxrl_par import envs

    assert cpu_threads.auto_threads(cpu_threads.POOL_FROM_NUMBERS - 1) == 1
    assert cpu_threads.auto_threads(cpu_threads.POOL_FROM_NUMBERS) is None
    assert envs.observation_numbers("CartPole-v1", 8) == 32
    assert envs.observation_numbers("Breakout-MinAtar", 64) == 64 * 10 * 10 * 4


@pytest.mark.skipif(not cpu_threads.can_restart() or (os.cpu_count() or 1) < 2,
                    reason="restarts with os.execv; needs several cores to tell pools apart")
def test_cli_auto_restarts_a_large_run_on_xlas_pool():
    """Run as the command, with no pool chosen, Breakout-MinAtar's preset (64 envs of 400
    numbers) restarts once on XLA's pool and says so."""
    env = {k: v for k, v in os.environ.items() if k not in cpu_threads.VARIABLES}
    out = subprocess.run(
        [sys.executable, "-m", "jaxrl_par", "train", "ppo", "--env", "Breakout-MinAtar",
         "--total-timesteps", "8192", "--set", "hidden_sizes=[16]", "--json",
         "--no-compile-cache"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert summary["cpu_threads"] == cores
    assert out.stderr.count("restarting on XLA:CPU's pool") == 1, out.stderr


def test_cli_auto_restarts_only_large_runs_of_the_command_itself(capsys, monkeypatch):
    """A small run goes on without a word; a large one whose main() was called from
    Python (which cannot restart) goes on too, saying how to get XLA's pool; as the
    command it restarts. A comparison counts its largest entry, with the seeds."""
    from jaxrl_par import cli, envs
    from jaxrl_par.runner import compare

    restarts = []
    monkeypatch.setattr(cpu_threads, "restart_with_default_pool", restarts.append)
    for env, expected in [("CartPole-v1", ""), ("Breakout-MinAtar", "--cpu-threads default")]:
        args = cli._parser().parse_args(["train", "ppo", "--env", env])
        args.program_argv = None  # as main(argv) sets it
        cfg = cli._config(args)
        cli._pool_for_size(args, envs.observation_numbers(cfg.env, cfg.num_envs))
        err = capsys.readouterr().err
        assert (expected in err) if expected else err == "", err
    assert restarts == []
    args.program_argv = ["train", "ppo", "--env", "Breakout-MinAtar"]  # as the command
    cli._pool_for_size(args, envs.observation_numbers(cfg.env, cfg.num_envs))
    assert restarts == [args.program_argv]
    entries = [compare.Entry.parse(e) for e in ("ppo", "dqn")]
    # ppo's 4 envs and dqn's 10 of CartPole's 4 numbers, over 3 seeds; ppo at 512 envs
    assert cli._largest_observations("CartPole-v1", entries, [], 3) == 10 * 4 * 3
    assert cli._largest_observations("CartPole-v1", entries, ["ppo.num_envs=512"], 3) == 6144
    assert cli._largest_observations("CartPole-v1", entries, ["no_such_field=1"], 3) == 0


def test_devices_sets_the_count_before_jax_starts_and_keeps_a_users():
    """`devices(n)` asks XLA for n CPU devices in a fresh process; a count already in
    XLA_FLAGS is kept; once jax has started it changes nothing; a bad count is an error."""
    code = ("import json, os, jax\n"
            "from jaxrl_par.platform import cpu_threads\n"
            "took = cpu_threads.devices(3)\n"
            "n = len(jax.devices())\n"
            "flags = os.environ['XLA_FLAGS']\n"
            "print(json.dumps([took, n, cpu_threads.devices(5),\n"
            "                  os.environ['XLA_FLAGS'] == flags]))\n")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    for preset, expected in [(None, [True, 3, False, True]),
                             ("--xla_force_host_platform_device_count=2", [False, 2, False, True]),
                             ("--xla_force_host_platform_device_count=3", [True, 3, False, True])]:
        run_env = env if preset is None else {**env, "XLA_FLAGS": preset}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=run_env, timeout=120, check=True)
        assert json.loads(out.stdout.strip().splitlines()[-1]) == expected, preset
    with pytest.raises(ValueError, match="number of CPU devices"):
        cpu_threads.devices(0)


def test_a_request_after_jax_started_warns_and_says_why():
    """In this process jax has started: limit() and devices() change nothing and warn,
    naming the imports that start jax; not when the request is what is in effect, nor
    with warn=False."""
    import warnings

    import jax

    with pytest.warns(UserWarning, match="jax has already started"):
        assert cpu_threads.limit(7) is False
    with pytest.warns(UserWarning, match=r"devices\(7\).*importing jaxrl_par.runner.training"):
        assert cpu_threads.devices(7) is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cpu_threads.devices(len(jax.devices("cpu"))) is False
        assert cpu_threads.limit(7, warn=False) is False
        assert cpu_threads.devices(7, warn=False) is False
