"""A real two-host run: two local processes, gloo collectives, one global mesh.

Each process owns one CPU device; ``jax.distributed`` joins them into a 2-device mesh
and a PPO run data-parallel over both must equal the same run on one device. The run is
a two-lane sweep (one seed, two learning rates), so the lanes' values are written into a
state that spans both processes. The worker is this file run as a script (``python
tests/test_multihost.py ...``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

WORKER_TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_ppo_matches_single_process(tmp_path):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"  # see conftest.py
    env["JAX_PLATFORMS"] = "cpu"
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, str(port), str(i), str(tmp_path)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for i in range(2)
    ]
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=WORKER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("two-process run timed out")
        outs.append(out)
    for i, (p, out) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, f"process {i} failed:\n{out[-4000:]}"
    got = np.load(tmp_path / "sharded.npz")
    ref = np.load(tmp_path / "reference.npz")
    assert int(got["process_count"]) == 2 and int(got["device_count"]) == 2
    names = [k for k in ref.files if k.startswith(("params", "mu"))]
    assert any(k.startswith("mu") for k in names) and any(k.startswith("params") for k in names)
    for k in names:  # parameters and Adam's first moment (linear in the gradients)
        err = np.max(np.abs(got[k] - ref[k])) / max(np.max(np.abs(ref[k])), 1e-12)
        assert err <= 1e-5, (k, err)
    np.testing.assert_allclose(got["loss"], ref["loss"], rtol=1e-5, atol=1e-6)
    # Two lanes of a sweep (seed 0 at two learning rates): each process wrote its part
    # of each lane's value, and the lanes train apart.
    assert got["loss"].shape[0] == 2 and not np.allclose(got["loss"][0], got["loss"][1])
    with open(tmp_path / "logs" / "config.json") as f:
        assert json.load(f)["hparams"] == {"learning_rate": [2.5e-4, 1e-3]}
    # Only process 0 writes logs and holds the log dir's lock; each process writes its
    # own shards of the checkpoints (orbax), and the last two are kept.
    assert sorted(os.listdir(tmp_path / "logs")) == [".lock", "checkpoints", "config.json",
                                                      "metrics.jsonl"]
    assert sorted(os.listdir(tmp_path / "logs" / "checkpoints")) == ["1", "2"]
    state_files = os.listdir(tmp_path / "logs" / "checkpoints" / "2" / "state")
    assert {"ocdbt.process_0", "ocdbt.process_1"} <= set(state_files)
    assert (tmp_path / "logs" / ".lock").read_text().count("pid ") == 1


def _worker(port: int, process_id: int, out_dir: str) -> None:
    """Each process first trains the one-device reference on its own device (process 1
    keeps it), then both train data-parallel over the two processes."""
    # Join before importing jaxrl_par: importing gymnax creates arrays, after which
    # jax.distributed.initialize refuses (see jaxrl_par.parallel.initialize).
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)

    import dataclasses

    import numpy as np

    from jaxrl_par import axes, parallel
    from jaxrl_par.algos import ppo
    from jaxrl_par.runner.training import train

    cfg = ppo.Config(num_envs=4, num_steps=8, num_minibatches=2, update_epochs=1,
                     total_timesteps=4 * 8 * 2, hidden_sizes=(8, 8), max_grad_norm=1e6,
                     sweep=("learning_rate",))
    lanes = {"learning_rate": [2.5e-4, 1e-3]}  # two lanes of seed 0

    def dump(path, state, loss, **extra):
        arrays = {"loss": np.asarray(loss), **extra}
        for p, x in jax.tree_util.tree_flatten_with_path(state.params)[0]:
            arrays["params" + jax.tree_util.keystr(p)] = np.asarray(x)
        for p, x in jax.tree_util.tree_flatten_with_path(state.opt_state)[0]:
            if "mu" in jax.tree_util.keystr(p):
                arrays["mu" + jax.tree_util.keystr(p)] = np.asarray(x)
        np.savez(path, **arrays)

    # Both processes train the reference on their own device, so they reach the sharded
    # run's first cross-process step (the checkpoint store's set-up) together, within
    # the coordination service's 30 s barrier timeout, however loaded the machine.
    ref = train(ppo.make(cfg), [0, 0], num_chunks=2, progress=False, hparams=lanes)
    if process_id == 1:
        dump(os.path.join(out_dir, "reference.npz"), ref.state, ref.metrics["loss"])
    dp = ppo.make(dataclasses.replace(cfg, axis_name=axes.DATA))
    out = train(dp, [0, 0], num_chunks=2, progress=False, devices=2,
                log_dir=os.path.join(out_dir, "logs"), hparams=lanes)
    host = parallel.unreplicate(parallel.to_host(out.state))  # every process calls it
    if process_id == 0:
        dump(os.path.join(out_dir, "sharded.npz"), host, out.metrics["loss"],
             process_count=jax.process_count(), device_count=jax.device_count())


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
