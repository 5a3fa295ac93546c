"""Population based training over a sweep's lanes (jaxrl_par.runner.pbt)."""

import json
import os

import jax
import numpy as np
import pytest
from killed import train_killed_after

from jaxrl_par.algos import ppo
from jaxrl_par.runner import pbt as pbt_lib
from jaxrl_par.runner.pbt import PBT
from jaxrl_par.runner.training import train

TINY = {"num_envs": 4, "num_steps": 16, "num_minibatches": 2, "update_epochs": 2,
        "total_timesteps": 4 * 16 * 8}


def test_the_worst_lanes_take_a_best_lanes_values_times_a_factor():
    score = np.array([1.0, 5.0, 3.0, -np.inf, 4.0, 0.0, 2.0, 4.5])
    lanes = {"learning_rate": np.float32([1, 2, 3, 4, 5, 6, 7, 8]) * 1e-4,
             "gamma": np.float32([0.99] * 8)}
    cfg = ppo.Config(sweep=("learning_rate", "gamma"))
    source, new = pbt_lib.exploit_explore(PBT(interval=1, factors=(1.25,)), score, lanes,
                                          np.random.default_rng(0), cfg)
    # fraction 0.25 of 8: the 2 worst (lanes 3 and 5) copy from the 2 best (lanes 1 and 7).
    assert [i for i in range(8) if source[i] != i] == [3, 5]
    assert set(source[[3, 5]]) <= {1, 7}
    for i in (3, 5):
        assert new["learning_rate"][i] == np.float32(lanes["learning_rate"][source[i]] * 1.25)
        assert new["gamma"][i] == np.float32(0.99)  # 0.99 * 1.25 > 1: the parent's value
    kept = [i for i in range(8) if i not in (3, 5)]
    np.testing.assert_array_equal(new["learning_rate"][kept], lanes["learning_rate"][kept])
    source, same = pbt_lib.exploit_explore(PBT(interval=1), np.full(8, -np.inf), lanes,
                                           np.random.default_rng(0))
    assert list(source) == list(range(8))  # no episode finished anywhere: no step
    np.testing.assert_array_equal(same["learning_rate"], lanes["learning_rate"])


def test_apply_copies_whole_states_and_folds_the_copies_keys():
    algo = ppo.make(ppo.Config(sweep=("learning_rate",), **TINY))
    state = jax.vmap(algo.init)(jax.random.split(jax.random.key(0), 4))
    params = jax.tree.map(np.asarray, state.params)
    keys = np.asarray(jax.random.key_data(state.key))
    source = np.array([0, 0, 2, 2])
    new = pbt_lib.apply(state, source, {"learning_rate": np.float32([1, 2, 3, 4])})
    for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), b[source])
    new_keys = np.asarray(jax.random.key_data(new.key))
    np.testing.assert_array_equal(new_keys[[0, 2]], keys[[0, 2]])  # kept lanes: as they were
    assert not np.array_equal(new_keys[1], keys[0])  # a copy does not replay its parent
    np.testing.assert_array_equal(np.asarray(new.hparams["learning_rate"]),
                                  np.float32([1, 2, 3, 4]))


def test_pbt_run_logs_its_steps_and_a_resume_makes_the_same_ones(tmp_path):
    algo = ppo.make(ppo.Config(sweep=("learning_rate",), **TINY))
    hparams = {"learning_rate": [1e-6, 3e-3, 1e-6, 1e-3]}
    full = train(algo, [0, 1, 2, 3], hparams=hparams, pbt=PBT(interval=2), progress=False)
    schedule = full.metrics["hparams/learning_rate"]  # [S, U]
    assert schedule.shape == (4, 8)
    np.testing.assert_array_equal(schedule[:, 0], np.float32(hparams["learning_rate"]))
    np.testing.assert_array_equal(full.hparams["learning_rate"], schedule[:, -1])
    assert not np.array_equal(schedule[:, 0], schedule[:, -1])  # it exploited

    log = str(tmp_path / "run")
    train_killed_after(4, algo, [0, 1, 2, 3], hparams=hparams, pbt=PBT(interval=2),
                       progress=False, log_dir=log)
    with open(os.path.join(log, "pbt.jsonl"), "a") as f:  # a step logged, not checkpointed
        f.write(json.dumps({"update": 6, "source": [0, 0, 0, 0], "hparams": {}}) + "\n")
    resumed = train(algo, [0, 1, 2, 3], hparams=hparams, pbt=PBT(interval=2),
                    progress=False, log_dir=log, resume=True)
    assert resumed.updates_run == 4
    for a, b in zip(jax.tree.leaves(full.state.params), jax.tree.leaves(resumed.state.params),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for k, v in full.metrics.items():
        np.testing.assert_array_equal(v, resumed.metrics[k])
    with open(os.path.join(log, "pbt.jsonl")) as f:
        steps = [json.loads(line) for line in f]
    assert [s["update"] for s in steps] == [2, 4, 6]
    for step in steps:  # each step's values are what the lanes trained with next
        u = step["update"]
        np.testing.assert_array_equal(np.float32(step["hparams"]["learning_rate"]),
                                      schedule[:, u])
        for lane, src in enumerate(step["source"]):
            if src != lane:
                ratio = schedule[lane, u] / schedule[src, u - 1]
                assert min(abs(ratio - f) for f in (0.8, 1.25)) < 1e-5


def test_pbt_errors_name_the_fix_before_compiling():
    plain = ppo.make(ppo.Config(**TINY))
    swept = ppo.make(ppo.Config(sweep=("learning_rate",), **TINY))
    with pytest.raises(ValueError, match="pbt needs swept hyperparameters"):
        train(plain, [0, 1], pbt=PBT(interval=2), progress=False)
    with pytest.raises(ValueError, match="at least two lanes"):
        train(swept, [0], hparams={"learning_rate": [1e-3]}, pbt=PBT(interval=2),
              progress=False)
    with pytest.raises(ValueError, match="would never exploit"):
        train(swept, [0, 1], hparams={"learning_rate": [1e-3, 1e-4]}, pbt=PBT(interval=8),
              progress=False)
    for bad, message in [({"interval": 0}, "PBT.interval=0"),
                         ({"interval": 2, "fraction": 0.7}, "PBT.fraction=0.7"),
                         ({"interval": 2, "factors": (0.8, -1.0)}, "PBT.factors")]:
        with pytest.raises(ValueError, match=message):
            PBT(**bad)


def test_cli_pbt(tmp_path, capsys):
    from jaxrl_par.cli import main

    argv = ["train", "ppo", "--total-timesteps", str(TINY["total_timesteps"]),
            "--set", "num_envs=4", "--set", "num_steps=16", "--set", "num_minibatches=2",
            "--sweep", "learning_rate=1e-6,3e-3", "--seeds", "2", "--pbt", "2", "--json",
            "--no-progress", "--no-compile-cache", "--log-dir", str(tmp_path / "run")]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr()[0].strip().splitlines()[-1])
    assert len(summary["hparams"]["learning_rate"]) == 4
    with open(tmp_path / "run" / "pbt.jsonl") as f:
        assert [json.loads(line)["update"] for line in f] == [2, 4, 6]
    assert main(["train", "ppo", "--pbt", "2", "--no-progress", "--no-compile-cache"]) == 2
    assert "pbt needs swept hyperparameters" in capsys.readouterr().err
