"""Every Python snippet of README.md and docs/*.md runs. The README's main example runs as
written (with a smaller training budget) and its comments hold: shapes, seeds, no
recompilation for the same algorithm and seed count. The others run in a directory
holding a small trained run at ``runs/cartpole``; those that need 8 devices or a
multi-host start-up run in a subprocess set up for them."""

import glob
import os
import re
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
README = os.path.join(ROOT, "README.md")
BUDGET = "total_timesteps=500_000"
SECOND_TRAIN = "result = train(algo, seeds=[4, 5, 6, 7],"
EIGHT_DEVICES = "devices=8"
MULTI_HOST = "parallel.initialize()"


def _snippets() -> list[tuple[str, str]]:
    """``(file:index, code)`` of every ```python block in README.md and docs/*.md."""
    out = []
    for path in [README, *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]:
        with open(path) as f:
            blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.DOTALL)
        out += [(f"{os.path.basename(path)}:{i}", b) for i, b in enumerate(blocks)]
    return out


def _python_block() -> str:
    main = [code for _, code in _snippets() if SECOND_TRAIN in code]
    assert len(main) == 1, "the README's main Python example: update this test if it is split"
    return main[0]


def _run_in_subprocess(code: str, tmp_path, env: dict | None = None) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [os.path.abspath(ROOT), os.environ.get("PYTHONPATH", "")]),
        # quick compiles, as tests/conftest.py sets in this process
        "JAX_DISABLE_MOST_OPTIMIZATIONS": "1", **(env or {})}
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{code}\n{out.stderr[-3000:]}"


OTHER = [(name, code) for name, code in _snippets() if SECOND_TRAIN not in code]


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory):
    """A directory holding ``runs/cartpole``: PPO on CartPole, 2 seeds, 6 updates."""
    from jaxrl_par import ppo, train

    root = tmp_path_factory.mktemp("snippets")
    train(ppo.make(ppo.Config(env="CartPole-v1", total_timesteps=4 * 128 * 6)), [0, 1],
          log_dir=str(root / "runs" / "cartpole"), progress=False)
    return root


@pytest.mark.parametrize("name,code", OTHER, ids=[n for n, _ in OTHER])
def test_documented_snippet_runs(name, code, trained_dir, tmp_path, monkeypatch):
    """Each snippet as written; the 8-device one with a small PPO (the budget it is
    written with runs in the slow test below), the multi-host one as a one-process
    cluster on this machine (its documented ``(coordinator, num_processes,
    process_id)`` form)."""
    if EIGHT_DEVICES in code:
        small = code.replace("ppo.Config(num_envs=2048,", "ppo.Config(num_envs=64, num_steps=8, "
                             "total_timesteps=64 * 8 * 2,")
        assert small != code, "update the 8-device snippet's budget replacement"
        _run_in_subprocess(small, tmp_path, {
            "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"})
    elif MULTI_HOST in code:
        with socket.socket() as s:
            s.bind(("localhost", 0))
            port = s.getsockname()[1]
        _run_in_subprocess(code.replace(MULTI_HOST, f'parallel.initialize("localhost:{port}", '
                                                    '1, 0)'), tmp_path)
    else:
        monkeypatch.chdir(trained_dir)
        exec(compile(code, name, "exec"), {})  # noqa: S102 (the docs' own example)


@pytest.mark.slow
def test_eight_device_snippet_as_written(tmp_path):
    """docs/scaling.md's `train(algo, seeds=[0, 1], devices=8, pop=2)` at its own 2,048
    envs (one update of 262,144 env steps per seed)."""
    code = [c for _, c in OTHER if EIGHT_DEVICES in c]
    assert len(code) == 1
    _run_in_subprocess(code[0], tmp_path, {
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"})


def test_readme_python_example(tmp_path, monkeypatch):
    code = _python_block()
    assert code.count(BUDGET) == 2 and code.count(SECOND_TRAIN) == 1  # the runs, the sweep
    code = code.replace(BUDGET, "total_timesteps=4 * 128 * 6")  # 6 updates
    first, rest = code.split(SECOND_TRAIN)
    second, last = (SECOND_TRAIN + rest).split("from jaxrl_par.runner.runs import")
    monkeypatch.chdir(tmp_path)  # the example writes runs/cartpole
    compiled = []
    real_compile = jax.stages.Lowered.compile

    def counting_compile(self, *args, **kwargs):
        compiled.append(self)
        return real_compile(self, *args, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", counting_compile)
    ns: dict = {}
    exec(first, ns)  # noqa: S102 (the README's own example)
    assert compiled, "the first train compiles"
    before = len(compiled)
    exec(second, ns)  # noqa: S102
    assert len(compiled) == before  # "same algo object and seed count: no recompile"
    exec("from jaxrl_par.runner.runs import" + last, ns)  # noqa: S102

    result, run = ns["result"], ns["run"]
    updates = ns["algo"].num_updates
    assert updates == 6
    assert result.env_steps.shape == (updates,) and result.returns.shape == (4, updates)
    assert result.seeds == [4, 5, 6, 7] and run.seeds == [4, 5, 6, 7]
    assert {"checkpoints", "config.json", "metrics.jsonl"} <= set(os.listdir("runs/cartpole"))
    for a, b in zip(jax.tree.leaves(run.state.params), jax.tree.leaves(result.state.params),
                    strict=True):
        assert a.shape[0] == 4
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    greedy = ns["greedy_returns"](run.algo, run.state)
    assert greedy.shape == (4,)
    np.testing.assert_array_equal(ns["env_steps"], result.env_steps)  # the logged curves
    np.testing.assert_array_equal(ns["metrics"]["episode_return"], result.returns)
    np.testing.assert_array_equal(ns["metrics"]["loss"], result.metrics["loss"])
    sweep = ns["sweep"]  # "4 lanes ... [4] each, lane by lane"
    assert sweep.seeds == [0, 1, 0, 1] and sweep.final_returns().shape == (4,)
    np.testing.assert_array_equal(sweep.hparams["learning_rate"],
                                  np.float32([1e-3, 1e-3, 2.5e-4, 2.5e-4]))
    rows = ns["hyper"].summarize(sweep.hparams, sweep.final_returns(), sweep.seeds)
    assert [(r["hparams"], r["seeds"]) for r in rows] == [
        ({"learning_rate": 1e-3}, [0, 1]), ({"learning_rate": 2.5e-4}, [0, 1])]
