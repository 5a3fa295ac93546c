"""Faults survived: a CLI run with ``--log-dir`` killed with SIGKILL at random moments
(starting up, compiling, training, writing a checkpoint), 20 times in a row, then
continued with ``--resume``: each start continues from the last complete checkpoint (no
checkpoint is ever found damaged: orbax renames a checkpoint into place only once it is
complete), and the run ends bit-identical to one that was never killed."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# DQN with a replay: 200 updates in chunks of 5, a checkpoint of the whole state after
# every chunk (written in the background, so kills land during writes too).
RUN = ["train", "dqn", "--env", "CartPole-v1", "--total-timesteps", "20000", "--set",
       "num_envs=10", "--set", "num_steps=10", "--set", "buffer_size=20000", "--set",
       "learning_starts=500", "--chunks", "40", "--checkpoint-seconds", "0",
       "--no-progress"]
KILLS = 20


def _cli(argv, cache):
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = cache
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    code = f"import sys\nfrom jaxrl_par.cli import main\nsys.exit(main({argv!r}))"
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _has_checkpoint(log: str) -> bool:
    saved = os.path.join(log, "checkpoints")
    return os.path.isdir(saved) and any(d.isdigit() for d in os.listdir(saved))


def _final_state(log: str):
    import jax

    from jaxrl_par.runner.runs import load_run

    run = load_run(log)
    return run.updates_done, [np.asarray(x) for x in jax.tree.leaves(run.state.params)]


@pytest.mark.slow
def test_twenty_random_kills_then_resume_end_as_never_killed(tmp_path):
    cache = str(tmp_path / "cache")
    reference = str(tmp_path / "reference")
    proc = _cli([*RUN, "--log-dir", reference], cache)
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    rng = random.Random(0)
    log = str(tmp_path / "killed")
    starts = []
    for _ in range(KILLS):
        resume = _has_checkpoint(log)
        proc = _cli([*RUN, "--log-dir", log, *(["--resume"] if resume else [])], cache)
        time.sleep(rng.uniform(3.0, 40.0))  # start-up, compile, training
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        assert "is damaged" not in err and "Traceback" not in err, err[-3000:]
        starts.append((resume, proc.returncode))
    proc = _cli([*RUN, "--log-dir", log, *(["--resume"] if _has_checkpoint(log) else [])],
                cache)
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    assert "is damaged" not in err
    with open(os.path.join(reference, "metrics.jsonl")) as f:
        want = [json.loads(line) for line in f]
    with open(os.path.join(log, "metrics.jsonl")) as f:
        got = [json.loads(line) for line in f]
    assert got == want
    done, params = _final_state(log)
    ref_done, ref_params = _final_state(reference)
    assert done == ref_done == 200
    for a, b in zip(params, ref_params, strict=True):
        np.testing.assert_array_equal(a, b)
    # Some kills landed after a checkpoint (those starts resumed), some before the first.
    assert any(r for r, _ in starts), starts
