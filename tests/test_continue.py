"""Continuing a finished run to a larger total (``--resume --total-timesteps N``)."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from jaxrl_par.algos import dqn
from jaxrl_par.runner.training import train

# 6 updates of 2 envs x 4 steps (8 env steps each); epsilon decays over the whole run.
SHORT = dqn.Config(env="CartPole-v1", num_envs=2, num_steps=4, total_timesteps=48,
                   buffer_size=64, batch_size=8, learning_starts=16, train_frequency=4,
                   hidden_sizes=(8,),
                   exploration_fraction=1.0)
LONG = dataclasses.replace(SHORT, total_timesteps=96)  # 12 updates


def test_a_run_continues_to_a_larger_total_with_its_schedules_re_stretched(tmp_path):
    """The first 6 updates are the short run's; the next 6 train on from its checkpoint
    with the schedules of a run started with the larger total (re-stretched, not kept).

    Epsilon is read at each update's start (env steps 8 * (k - 1) for update k):
    the short run decays it over 48 env steps, so at update 6 it is
    1 - 0.95 * 40 / 48 = 0.208333; continued, update 7 follows the 96-step schedule,
    1 - 0.95 * 48 / 96 = 0.525 (a kept horizon would have given 0.05)."""
    log = str(tmp_path / "run")
    short = train(dqn.make(SHORT), [0], num_chunks=2, progress=False, log_dir=log)
    longer = train(dqn.make(LONG), [0], num_chunks=2, progress=False, log_dir=log,
                   resume=True)
    assert longer.updates_run == 6 and not longer.interrupted
    eps = longer.metrics["epsilon"][0]
    np.testing.assert_array_equal(eps[:6], short.metrics["epsilon"][0])
    assert eps[5] == pytest.approx(1 - 0.95 * 40 / 48, rel=1e-6)
    assert eps[6] == pytest.approx(0.525, rel=1e-6)
    assert eps[11] == pytest.approx(1 - 0.95 * 88 / 96, rel=1e-6)
    with open(os.path.join(log, "metrics.jsonl")) as f:
        assert [json.loads(line)["update"] for line in f] == list(range(1, 13))
    with open(os.path.join(log, "config.json")) as f:
        assert json.load(f)["num_updates"] == 12
