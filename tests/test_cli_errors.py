"""Errors a user can cause end the CLI with one line naming the fix and exit code 2, and
leave what was on disk as it was; only a bug prints a traceback (and asks to report it).

Each case runs the CLI in a subprocess, as a user would; a fault that cannot be made
for real here (a full disk, no network, a package not installed) is injected into that
process before ``main`` runs. The runs that train share one compile cache.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["train", "ppo", "--env", "CartPole-v1", "--total-timesteps", "256", "--set",
        "num_envs=4", "--set", "num_steps=16", "--set", "num_minibatches=2", "--set",
        "update_epochs=1", "--chunks", "4", "--checkpoint-seconds", "0",
        "--no-progress"]  # 4 updates, one per chunk, each checkpointed


def _env(cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = cache  # the CLI's compile cache, shared by these runs
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def cli(argv: list[str], cache: str, before: str = "", timeout: float = 300
        ) -> subprocess.CompletedProcess:
    """``jaxrl-par ARGV`` in a subprocess, after the Python statements ``before``."""
    code = f"{before}\nimport sys\nfrom jaxrl_par.cli import main\nsys.exit(main({argv!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env=_env(cache), timeout=timeout, check=False)


def assert_one_line_error(out: subprocess.CompletedProcess, *words: str) -> str:
    """Exit code 2, no traceback, and a last stderr line ``jaxrl-par: error: ...`` holding
    ``words``; returns that line."""
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith("jaxrl-par: error: "), out.stderr[-3000:]
    for w in words:
        assert w in line, line
    return line


@pytest.fixture(scope="session")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory, cache) -> str:
    """A tiny PPO run of 4 updates in 4 chunks, with its log dir (checkpoints 3 and 4)."""
    log = str(tmp_path_factory.mktemp("runs") / "finished")
    out = cli([*TINY, "--log-dir", log], cache)
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(os.listdir(os.path.join(log, "checkpoints"))) == ["3", "4"]
    return log


def _tree(path: str) -> dict[str, bytes]:
    """Every file under ``path`` (but the lock) and its bytes."""
    files = {}
    for root, _, names in os.walk(path):
        for n in names:
            if n != ".lock":
                p = os.path.join(root, n)
                with open(p, "rb") as f:
                    files[os.path.relpath(p, path)] = f.read()
    return files


def _damage(log: str, step: int) -> None:
    """Cuts every array file of checkpoint ``step`` to nothing (a disk that lost them)."""
    state = os.path.join(log, "checkpoints", str(step), "state")
    for root, _, names in os.walk(state):
        for n in names:
            if n not in ("_CHECKPOINT_METADATA", "commit_success.txt"):
                open(os.path.join(root, n), "w").close()


def test_a_log_dir_that_is_a_file(tmp_path, cache):
    path = tmp_path / "notadir"
    path.write_text("keep me")
    out = cli([*TINY, "--log-dir", str(path)], cache)
    assert_one_line_error(out, str(path), "is a file, not a directory", "give --log-dir")
    assert path.read_text() == "keep me"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_log_dir(tmp_path, cache):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        out = cli([*TINY, "--log-dir", str(parent / "run")], cache)
    finally:
        parent.chmod(0o700)
    assert_one_line_error(out, "cannot write", "give a --log-dir you can write to")


def test_a_read_only_log_dir_injected(tmp_path, cache):
    """The same for root (who writes anywhere): the log dir's first write fails with
    EROFS, as on a read-only mount."""
    log = str(tmp_path / "run")
    before = ("import errno, os\nreal = os.mkdir\n"
              "def mkdir(path, *a, **k):\n"
              f"    if str(path).startswith({log!r}):\n"
              "        raise OSError(errno.EROFS, 'Read-only file system', path)\n"
              "    return real(path, *a, **k)\n"
              "os.mkdir = mkdir\n")
    out = cli([*TINY, "--log-dir", log], cache, before)
    assert_one_line_error(out, "cannot write", "Read-only file system",
                          "give a --log-dir you can write to")


def test_a_full_disk_keeps_what_was_written(finished_run, tmp_path, cache):
    """The disk fills while a resumed, longer run appends its metrics: one line, and the
    log dir still holds the run as it was (its checkpoints, its metrics)."""
    log = str(tmp_path / "run")
    shutil.copytree(finished_run, log)
    before_files = _tree(log)
    before = ("import errno\nfrom jaxrl_par.runner import records\n"
              "def full(path, *a, **k):\n"
              "    raise OSError(errno.ENOSPC, 'No space left on device', path)\n"
              "records.append_rows = full\n")
    argv = [a if a != "256" else "320" for a in TINY]  # 5 updates: one more
    out = cli([*argv, "--log-dir", log, "--resume"], cache, before)
    assert_one_line_error(out, "no space left on the device", "--resume continues")
    after = _tree(log)
    for name, data in before_files.items():
        if name.startswith("checkpoints") or name == "metrics.jsonl":
            assert after.get(name) == data, name


def _rows_without_time(path: str) -> list[dict]:
    """metrics.jsonl's rows without ``seconds``, the one value a rerun cannot repeat."""
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


def test_a_damaged_newest_checkpoint_resumes_from_the_one_before(finished_run, tmp_path,
                                                                  cache):
    log = str(tmp_path / "run")
    shutil.copytree(finished_run, log)
    rows = _rows_without_time(os.path.join(finished_run, "metrics.jsonl"))
    _damage(log, 4)
    out = cli([*TINY, "--log-dir", log, "--resume"], cache)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    damaged = [line for line in out.stderr.splitlines() if "is damaged" in line]
    assert len(damaged) == 1 and "checkpoints/4" in damaged[0], out.stderr
    assert "trying the one before it" in damaged[0]
    # update 4 trained again, to the same values (its wall-clock seconds aside)
    assert _rows_without_time(os.path.join(log, "metrics.jsonl")) == rows
    assert os.listdir(os.path.join(log, "checkpoints-damaged")) == ["4"]  # kept aside
    # All damaged: one line each, then the error; nothing is deleted (moved aside).
    _damage(log, 3)
    _damage(log, 4)
    before = _tree(log)
    out = cli([*TINY, "--log-dir", log, "--resume"], cache)
    assert_one_line_error(out, "could be read", "start the run anew")
    after = _tree(log)
    assert sorted(after.values()) == sorted(before.values())
    assert sorted(os.listdir(os.path.join(log, "checkpoints-damaged"))) == ["3", "4", "4.1"]


def test_resume_of_a_missing_or_empty_dir_is_an_error(tmp_path, cache):
    missing = tmp_path / "missing"
    out = cli([*TINY, "--log-dir", str(missing), "--resume"], cache)
    assert_one_line_error(out, "holds no checkpoint to resume", "leave out --resume")
    assert not missing.exists()  # not created by the attempt
    empty = tmp_path / "empty"
    empty.mkdir()
    out = cli([*TINY, "--log-dir", str(empty), "--resume"], cache)
    assert_one_line_error(out, "holds no checkpoint to resume")
    assert sorted(os.listdir(empty)) in ([], [".lock"])


def test_a_missing_optional_package(tmp_path, cache):
    """``--env brax:ant`` without brax (hidden from the process) names the install."""
    out = cli(["train", "ppo", "--env", "brax:ant", "--no-progress"], cache,
              "import sys\nsys.modules['brax'] = None\n")
    assert_one_line_error(out, "pip install 'jaxrl_par[brax]'")


def test_an_env_that_needs_a_download_while_offline(tmp_path, cache):
    """gymnax's MNIST bandit downloads MNIST when first built; offline, one line says so."""
    before = ("import urllib.error\nfrom gymnax.utils import load_mnist\n"
              "def offline(*a, **k):\n"
              "    raise urllib.error.URLError('[Errno -3] Temporary failure in name "
              "resolution')\n"
              "load_mnist._download = offline\n")
    out = cli(["train", "ppo", "--env", "MNISTBandit-bsuite", "--total-timesteps", "512",
               "--no-progress"], cache, before)
    assert_one_line_error(out, "needs a download", "no network")


def test_a_bug_prints_its_traceback_and_asks_for_a_report(tmp_path, cache):
    before = ("from jaxrl_par.runner import training\n"
              "def broken(*a, **k):\n"
              "    raise RuntimeError('an internal error')\n"
              "training.train = broken\n")
    out = cli([*TINY], cache, before)
    assert out.returncode == 1
    assert "Traceback" in out.stderr and "RuntimeError: an internal error" in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("jaxrl-par: this is a bug")


def test_ctrl_c_while_a_fresh_run_compiles_claims_nothing_kept(tmp_path, cache):
    """Ctrl-C during the first compile of a new log dir: exit 130, and the message does
    not say that the (nonexistent) log dir's contents were kept; the dir is gone."""
    log = tmp_path / "fresh"
    argv = [a for a in TINY if a != "--no-progress"] + ["--log-dir", str(log),
                                                        "--no-compile-cache"]
    # pytest-xdist's workers may ignore SIGINT, and a child inherits that: the child gives
    # Python's Ctrl-C handler back first, as a shell's foreground command has it.
    code = ("import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
            f"from jaxrl_par.cli import main\nsys.exit(main({argv!r}))")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=_env(cache))
    try:
        err = ""  # "compiling ..." ends its line only once the compile is done
        deadline = time.monotonic() + 240
        while "compiling" not in err and time.monotonic() < deadline:
            c = proc.stderr.read(1)
            if not c:
                break
            err += c
        assert "compiling" in err, err
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err + rest
    assert "stopped by Ctrl-C" in rest and "kept" not in rest, rest
    assert not log.exists()
