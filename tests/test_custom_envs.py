"""A user's own JAX environment (examples/corridor.py): registered, trained, evaluated,
from Python and from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par import envs
from jaxrl_par.algos import ppo
from jaxrl_par.runner.evaluation import greedy_returns
from jaxrl_par.runner.training import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
sys.path.insert(0, ROOT)
import examples.corridor  # noqa: E402, F401  (registers Corridor-v0, from ROOT)


def test_the_example_env_has_gymnax_semantics_through_vecenv():
    env = envs.make("Corridor-v0", 3)
    state = env.reset(jax.random.split(jax.random.key(0), 3))
    keys = jax.random.split(jax.random.key(1), (20, 3))
    left = jnp.zeros(3, jnp.int32)  # into the wall: never terminates
    for t in range(20):
        state, ts = env.step(keys[t], state, left)
    np.testing.assert_array_equal(ts.truncated, True)  # the time limit, not termination
    np.testing.assert_array_equal(ts.terminated, False)
    np.testing.assert_allclose(ts.episode_return, -1.0, rtol=1e-5)  # 20 x -0.05
    state = env.reset(jax.random.split(jax.random.key(2), 3))
    finished = np.zeros(3, bool)
    for t in range(6):  # every start is at most 6 cells from the goal
        state, ts = env.step(keys[t], state, jnp.ones(3, jnp.int32))
        ended = np.asarray(ts.terminated) & ~finished
        # 1 at the goal after t + 1 steps, 0.05 paid for each of the t before
        np.testing.assert_allclose(np.asarray(ts.episode_return)[ended], 1 - 0.05 * t,
                                   rtol=1e-5)
        finished |= ended
    assert finished.all()
    assert envs.source_record("Corridor-v0") == {"env_module": "examples.corridor"}
    assert envs.source_record("CartPole-v1") == {}


@pytest.mark.xla_optimized
def test_ppo_learns_the_example_env():
    """From any start the best return is 1 - 0.05 * (cells to the goal - 1): 0.875 on
    average over the starts; a policy that dithers is cut at 20 steps."""
    algo = ppo.make(ppo.Config(env="Corridor-v0", total_timesteps=30_000))
    result = train(algo, [0, 1], progress=False)
    assert np.all(result.final_returns() >= 0.8)
    assert np.all(greedy_returns(algo, result.state) >= 0.8)


def test_a_module_that_cannot_be_imported_is_named():
    with pytest.raises(ValueError, match="registered by module 'no_such_module', which "
                                         "cannot be imported here"):
        envs.import_source("Nowhere-v0", {"env_module": "no_such_module"})
    envs.import_source("CartPole-v1", {"env_module": "no_such_module"})  # known: no import


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "jaxrl_par", *args], check=False,
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def test_the_cli_trains_with_import_and_evaluates_without(tmp_path):
    run = str(tmp_path / "run")
    missing = _cli("train", "ppo", "--env", "Corridor-v0", cwd=EXAMPLES)
    assert missing.returncode == 2 and "--import the module that registers it" in missing.stderr
    trained = _cli("train", "ppo", "--env", "Corridor-v0", "--import", "corridor",
                   "--total-timesteps", "3e4", "--log-dir", run, "--json", "--no-progress",
                   "--no-compile-cache", cwd=EXAMPLES)
    assert trained.returncode == 0, trained.stderr
    summary = json.loads(trained.stdout.strip().splitlines()[-1])
    assert summary["env"] == "Corridor-v0" and summary["final_return"] >= 0.8
    with open(os.path.join(run, "config.json")) as f:
        assert json.load(f)["env_module"] == "corridor"
    # the run's record names the module: eval imports it without being told
    evaluated = _cli("eval", run, "--json", "--no-compile-cache", cwd=EXAMPLES)
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout.strip().splitlines()[-1])["greedy_return"] >= 0.8
