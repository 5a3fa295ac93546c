"""The loggers (TensorBoard, W&B) write every update's scalars per seed and their mean,
against env steps; a missing package is an error naming the extra that installs it."""

from __future__ import annotations

import glob
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import toy_algo

from jaxrl_par.runner import loggers
from jaxrl_par.runner.listeners import Chunk
from jaxrl_par.runner.training import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY = toy_algo.Config(env="ProbeObsAction-v0")  # 23 updates


def test_scalars_per_seed_and_mean_against_env_steps():
    chunk = Chunk(start=2, end=4, num_updates=10, env_steps_per_update=10,
                  rows={"loss": np.array([[1.0, np.nan], [3.0, 5.0]])}, state=None)
    got = list(loggers.scalars(chunk))
    # updates 3 and 4 end at 3 * 10 and 4 * 10 env steps; the mean leaves NaN out:
    # (1 + 3) / 2 = 2, then seed 1's 5 alone.
    assert got == [(30, {"loss/seed_0": 1.0, "loss/seed_1": 3.0, "loss/mean": 2.0}),
                   (40, {"loss/seed_1": 5.0, "loss/mean": 5.0})]


def _events(directory: str) -> dict[str, list[tuple[int, float]]]:
    """``tag -> [(step, value)]`` of the scalars in the TensorBoard event files of
    ``directory``, read record by record (TFRecord: length, its CRC, the Event, its CRC)."""
    from tensorboardX.proto import event_pb2

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
            pos += 12 + length + 4
            for v in event.summary.value:
                out.setdefault(v.tag, []).append((event.step, v.simple_value))
    return out


def test_tensorboard_event_file_holds_the_scalars(tmp_path):
    pytest.importorskip("tensorboardX")
    algo = toy_algo.make(TOY)
    logger = loggers.TensorBoardLogger(str(tmp_path / "tb"))
    result = train(algo, [0, 1], num_chunks=4, progress=False, listeners=[logger])
    events = _events(str(tmp_path / "tb"))
    steps = [int(s) for s in result.env_steps]
    loss = result.metrics["loss"]
    assert [s for s, _ in events["loss/seed_0"]] == steps
    np.testing.assert_allclose([v for _, v in events["loss/seed_0"]], loss[0], rtol=1e-6)
    np.testing.assert_allclose([v for _, v in events["loss/seed_1"]], loss[1], rtol=1e-6)
    np.testing.assert_allclose([v for _, v in events["loss/mean"]], loss.mean(axis=0),
                               rtol=1e-6)


def test_a_missing_logger_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    with pytest.raises(ImportError, match=r"pip install 'jaxrl_par\[tensorboard\]'"):
        loggers.TensorBoardLogger("unused")
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r"pip install 'jaxrl_par\[wandb\]'"):
        loggers.WandbLogger("unused")
    with pytest.raises(ValueError, match="--logger tensorboard writes into the run's log dir"):
        loggers.from_names(["tensorboard"], None)


def test_cli_without_the_tensorboard_extra_is_one_line(tmp_path):
    code = ("import sys\nsys.modules['tensorboardX'] = None\nfrom jaxrl_par.cli import main\n"
            f"sys.exit(main(['train', 'ppo', '--logger', 'tensorboard', '--log-dir', "
            f"{str(tmp_path / 'run')!r}, '--no-progress']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        "jaxrl-par: error: --logger tensorboard needs tensorboardX: pip install "
        "'jaxrl_par[tensorboard]'")


def test_wandb_offline_logs_the_scalars(tmp_path, monkeypatch):
    """Offline (no network): the run is written to disk, and what it was given to log
    (recorded on the way in) is every update's scalars with env steps as x axis."""
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logged = []
    real_log = wandb.sdk.wandb_run.Run.log

    def log(self, data, *args, **kwargs):
        logged.append(dict(data))
        return real_log(self, data, *args, **kwargs)

    monkeypatch.setattr(wandb.sdk.wandb_run.Run, "log", log)
    algo = toy_algo.make(TOY)
    logger = loggers.WandbLogger(str(tmp_path), {"env": TOY.env})
    result = train(algo, [0, 1], num_chunks=4, progress=False, listeners=[logger])
    runs = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(runs) == 1 and os.path.getsize(runs[0]) > 0
    assert [row["env_steps"] for row in logged] == [int(s) for s in result.env_steps]
    loss = result.metrics["loss"]
    np.testing.assert_allclose([row["loss/seed_1"] for row in logged], loss[1], rtol=1e-6)
    np.testing.assert_allclose([row["loss/mean"] for row in logged], loss.mean(axis=0),
                               rtol=1e-6)


def test_progress_bar_keeps_the_last_return_when_no_episode_ends(recwarn):
    """The bar shows the mean return of the chunk's last quarter; a chunk whose last
    quarter finished no episode (long episodes, short chunks) keeps the figure before,
    with no NaN shown and no warning."""
    from jaxrl_par.runner.listeners import ProgressBar

    bar = ProgressBar(num_updates=16, env_steps_per_update=10)

    def chunk(start, returns):
        rows = {"episode_return": np.array([returns], np.float64)}
        return Chunk(start=start, end=start + len(returns), num_updates=16,
                     env_steps_per_update=10, rows=rows, state=None)

    bar.on_chunk(chunk(0, [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0]))
    assert bar.postfix["ret"] == "75.0"  # the last quarter: 70 and 80
    bar.on_chunk(chunk(8, [500.0] + [np.nan] * 7))  # an episode ended early, none late
    assert bar.postfix["ret"] == "75.0"
    bar.close()
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
