"""Hyperparameter sweeps: lanes of (seed, values) vmapped by one compiled program."""

import json
import os

import jax
import numpy as np
import pytest
from killed import train_killed_after

from jaxrl_par.algos import a3c, apex, dqn, gorila, hyper, impala, ppo, sac, td3
from jaxrl_par.cli import main
from jaxrl_par.runner import checkpoints
from jaxrl_par.runner.training import train

PPO_TINY = {"num_envs": 4, "num_steps": 16, "num_minibatches": 2, "update_epochs": 2,
            "total_timesteps": 4 * 16 * 4}
DQN_TINY = {"num_envs": 4, "num_steps": 8, "total_timesteps": 4 * 8 * 8, "buffer_size": 256,
            "batch_size": 16, "learning_starts": 64, "train_frequency": 8,
            "target_update_period": 2, "prioritized": True, "loss": "huber"}
APEX_TINY = {"num_actors": 4, "num_steps": 4, "total_timesteps": 4 * 4 * 8, "buffer_size": 256,
             "batch_size": 16, "learner_steps_per_iteration": 2, "learning_starts": 32,
             "target_period": 2, "actor_sync_period": 2}
SAC_TINY = {"num_envs": 2, "num_steps": 8, "total_timesteps": 2 * 8 * 4, "buffer_size": 64,
            "batch_size": 8, "learning_starts": 16, "train_frequency": 4, "hidden_sizes": (8,)}
TD3_TINY = {"num_envs": 2, "num_steps": 8, "total_timesteps": 2 * 8 * 4, "buffer_size": 64,
            "batch_size": 8, "learning_starts": 16, "train_frequency": 4, "hidden_sizes": (8,)}
A3C_TINY = {"num_workers": 2, "num_envs": 2, "num_steps": 8, "total_timesteps": 2 * 2 * 8 * 4,
            "hidden_sizes": (8,)}
GORILA_TINY = {"num_workers": 2, "num_envs": 2, "num_steps": 4, "total_timesteps": 16 * 6,
               "learning_starts": 33, "batch_size": 8, "buffer_size": 32, "hidden_sizes": (8,)}
IMPALA_TINY = {"num_envs": 4, "num_steps": 8, "num_minibatches": 2, "total_timesteps": 4 * 8 * 4,
               "actor_sync_period": 3}


def _assert_lanes_equal(sweep, run, lane: int, name: str = "") -> None:
    """Lane ``lane`` of two results is the same: every leaf of the state (parameters,
    optimiser, envs, replay, keys) but the swept values bit for bit, and the metrics to
    float32 rounding. (The reported losses are reductions that XLA may fuse differently
    around a constant than around a traced value: on a Zen 2 CPU, PPO's policy_loss
    differed by ~1e-8 while the state stayed bit for bit; a lane with another value
    differs by orders more. Both must vmap the same number of lanes: XLA's code for a
    batch of 2 and of 1 may round differently, as for seeds, see
    test_train.test_seeds_vmapped_equal_single_runs.)"""
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(sweep.state.replace(hparams=None)),
                            jax.tree.leaves(run.state.replace(hparams=None)), strict=True):
        if checkpoints.is_key(x):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x)[lane], np.asarray(y)[lane],
                                      err_msg=f"{name} lane {lane} {path}")
    for k, v in run.metrics.items():
        np.testing.assert_allclose(sweep.metrics[k][lane], v[lane], rtol=1e-5, atol=1e-7,
                                   err_msg=f"{name} {k}")


@pytest.mark.parametrize("module,tiny,values", [
    (ppo, PPO_TINY, {"learning_rate": [1e-3, 3e-4], "gamma": [0.9, 0.97],
                     "gae_lambda": [0.8, 0.95], "clip_eps": [0.1, 0.3],
                     "ent_coef": [0.0, 0.02], "vf_coef": [0.25, 1.0],
                     "max_grad_norm": [0.1, 1.0]}),
    (dqn, DQN_TINY, {"learning_rate": [1e-3, 3e-4], "gamma": [0.9, 0.97], "tau": [0.5, 0.1],
                     "epsilon_start": [1.0, 0.5], "epsilon_end": [0.1, 0.01],
                     "max_grad_norm": [1.0, 10.0], "huber_delta": [1.0, 2.0],
                     "per_beta": [0.4, 0.6]}),
    (apex, APEX_TINY, {"learning_rate": [1e-3, 3e-4], "gamma": [0.9, 0.97],
                       "max_grad_norm": [1.0, 10.0], "huber_delta": [1.0, 2.0],
                       "per_beta": [0.4, 0.6]}),
    (apex, {**APEX_TINY, "pipeline": True},
     {"learning_rate": [1e-3, 3e-4], "per_beta": [0.4, 0.6]}),
    (impala, IMPALA_TINY, {"learning_rate": [1e-3, 3e-4], "gamma": [0.9, 0.97],
                           "vtrace_lambda": [0.8, 0.95], "rho_bar": [0.9, 1.3],
                           "c_bar": [0.7, 1.1], "vf_coef": [0.25, 1.0],
                           "ent_coef": [0.0, 0.02], "max_grad_norm": [0.1, 1.0]}),
    (sac, SAC_TINY, {"learning_rate": [1e-3, 3e-4], "alpha_learning_rate": [1e-3, 3e-3],
                     "gamma": [0.9, 0.97], "tau": [0.1, 0.01]}),
    (td3, TD3_TINY, {"learning_rate": [1e-3, 3e-4], "gamma": [0.9, 0.97], "tau": [0.1, 0.01],
                     "exploration_noise": [0.1, 0.3], "target_noise": [0.2, 0.1],
                     "target_noise_clip": [0.5, 0.3]}),
    (a3c, A3C_TINY, {"learning_rate": [1e-3, 3e-4], "gamma": [0.9, 0.97],
                     "vf_coef": [0.25, 1.0], "ent_coef": [0.0, 0.02],
                     "max_grad_norm": [0.1, 1.0]}),
    (gorila, GORILA_TINY, {"learning_rate": [1e-3, 3e-4], "gamma": [0.9, 0.97],
                           "max_grad_norm": [1.0, 10.0], "tau": [0.5, 0.1],
                           "epsilon_start": [1.0, 0.5], "epsilon_end": [0.1, 0.01],
                           "huber_delta": [1.0, 2.0]}),
], ids=["ppo", "dqn", "apex", "apex-pipeline", "impala", "sac", "td3", "a3c", "gorila"])
def test_each_lane_equals_a_run_with_its_values_in_the_config(module, tiny, values):
    """Every sweepable field at once, two lanes with every value different (seeds 0, 1):
    each lane is bit for bit that seed of a run with its values as plain config
    constants. The values are chosen so that Python's double-precision folding of
    constants (``1 - 0.1``, ``0.9 * 0.8``) would differ from float32 arithmetic."""
    cfg = module.Config(sweep=tuple(values), **tiny)
    hparams = {k: [v[0], v[1]] for k, v in values.items()}
    sweep = train(module.make(cfg), [0, 1], hparams=hparams, progress=False, num_chunks=2)
    assert sorted(sweep.hparams) == sorted(values)
    for lane in (0, 1):
        point = {k: v[lane] for k, v in values.items()}
        run = train(module.make(module.Config(**point, **tiny)), [0, 1], progress=False,
                    num_chunks=2)
        _assert_lanes_equal(sweep, run, lane, name=str(point))
        for k, v in point.items():
            assert sweep.hparams[k][lane] == np.float32(v)


def test_a_lane_does_not_depend_on_the_other_lanes():
    """Lane 3 (seed 1, learning rate 1e-4) of a grid of four lanes equals lane 3 of a
    run whose lanes all have 1e-4: the other lanes' values do not leak into it. The
    lanes of one seed differ, so the value is used."""
    cfg = ppo.Config(sweep=("learning_rate",), **PPO_TINY)
    algo = ppo.make(cfg)
    seeds, hparams = hyper.grid([0, 1], learning_rate=[1e-2, 1e-4])
    assert seeds == [0, 1, 0, 1]
    assert hparams == {"learning_rate": [1e-2, 1e-2, 1e-4, 1e-4]}
    grid = train(algo, seeds, hparams=hparams, progress=False)
    same = train(algo, seeds, hparams={"learning_rate": 1e-4}, progress=False)
    _assert_lanes_equal(grid, same, 3)
    assert not np.array_equal(grid.metrics["loss"][1], grid.metrics["loss"][3])


def test_sweep_errors_name_the_fix_before_compiling():
    with pytest.raises(ValueError, match="'num_envs' cannot be swept.*sweepable fields: "
                                         "learning_rate"):
        ppo.Config(sweep=("num_envs",))
    with pytest.raises(ValueError, match="give a tuple of field names"):
        ppo.Config(sweep="learning_rate")
    with pytest.raises(ValueError, match="names a field twice"):
        dqn.Config(sweep=("gamma", "gamma"))
    with pytest.raises(ValueError, match="max_grad_norm=0.0 switches its part off"):
        ppo.Config(max_grad_norm=0.0, sweep=("max_grad_norm",))
    plain = ppo.make(ppo.Config(**PPO_TINY))
    with pytest.raises(ValueError, match=r"make the algorithm with .*Config\(sweep="
                                         r"\('learning_rate',\)\)"):
        train(plain, [0, 1], hparams={"learning_rate": [1e-3, 1e-4]}, progress=False)
    swept = ppo.make(ppo.Config(sweep=("learning_rate", "max_grad_norm"), **PPO_TINY))
    bad = [({"learning_rate": [1e-3]}, "1 values for 2 lanes"),
           ({"learning_rate": [1e-3, -1.0]}, "learning_rate must be > 0"),
           ({"learning_rate": [1e-3, float("nan")]}, "learning_rate must be > 0"),
           ({"max_grad_norm": [0.5, 0.0]}, "max_grad_norm=0.0 switches its part off"),
           ({"num_envs": [4, 8]}, "sweepable fields: learning_rate")]
    for hparams, message in bad:
        with pytest.raises(ValueError, match=message):
            train(swept, [0, 1], hparams=hparams, progress=False)
    with pytest.raises(ValueError, match="acts its first batch in init"):
        apex.Config(pipeline=True, sweep=("gamma",))
    with pytest.raises(ValueError, match="give a list of values"):
        hyper.grid([0], learning_rate=1e-3)


def test_a_swept_run_resumes_with_its_values_and_refuses_others(tmp_path):
    """The values are in the checkpoint and the records: a resume without them takes
    the run's, with other ones is an error before compiling; the logs name each lane's
    values."""
    algo = ppo.make(ppo.Config(sweep=("ent_coef",), **PPO_TINY))
    log = str(tmp_path / "run")
    hparams = {"ent_coef": [0.0, 0.01]}
    first = train(algo, [0, 0], hparams=hparams, progress=False, log_dir=log)
    with open(os.path.join(log, "config.json")) as f:
        assert json.load(f)["hparams"] == {"ent_coef": [0.0, 0.01]}
    again = train(algo, [0, 0], progress=False, log_dir=log, resume=True)
    np.testing.assert_array_equal(again.hparams["ent_coef"], np.float32([0.0, 0.01]))
    np.testing.assert_array_equal(np.asarray(again.state.hparams["ent_coef"]),
                                  first.hparams["ent_coef"])
    with pytest.raises(ValueError, match=r"trained with hparams \{'ent_coef': \[0.0, 0.01\]\}"):
        train(algo, [0, 0], hparams={"ent_coef": [0.0, 0.02]}, progress=False, log_dir=log,
              resume=True)


def test_a_swept_run_killed_midway_resumes_as_if_never_stopped(tmp_path):
    """Killed after a checkpoint, resumed without hparams: the lanes' values come back
    from the checkpoint and the result equals the run that never stopped."""
    algo = ppo.make(ppo.Config(sweep=("learning_rate", "clip_eps"), **PPO_TINY))
    hparams = {"learning_rate": [1e-3, 2e-4], "clip_eps": [0.1, 0.3]}
    full = train(algo, [0, 1], hparams=hparams, progress=False, num_chunks=4)

    log = str(tmp_path / "run")
    train_killed_after(2, algo, [0, 1], hparams=hparams, progress=False, num_chunks=4,
                       log_dir=log)
    resumed = train(algo, [0, 1], progress=False, num_chunks=4, log_dir=log, resume=True)
    assert resumed.updates_run == 2
    for a, b in zip(jax.tree.leaves(full.state), jax.tree.leaves(resumed.state), strict=True):
        if not jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for k, v in full.metrics.items():
        np.testing.assert_array_equal(v, resumed.metrics[k])


def test_cli_sweep_prints_a_table_and_json_per_point(tmp_path, capsys):
    argv = ["train", "ppo", "--total-timesteps", "4096", "--set", "num_envs=4",
            "--sweep", "learning_rate=1e-3,2.5e-4", "--sweep", "ent_coef=0,0.01",
            "--seeds", "2", "--json", "--no-progress", "--no-compile-cache",
            "--log-dir", str(tmp_path / "run")]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["seeds"] == 8
    assert summary["hparams"] == {"learning_rate": [1e-3] * 4 + [2.5e-4] * 4,
                                  "ent_coef": [0.0, 0.0, 0.01, 0.01] * 2}
    points = [(row["hparams"]["learning_rate"], row["hparams"]["ent_coef"], row["seeds"])
              for row in summary["sweep"]]
    assert points == [(1e-3, 0.0, [0, 1]), (1e-3, 0.01, [0, 1]), (2.5e-4, 0.0, [0, 1]),
                      (2.5e-4, 0.01, [0, 1])]
    for row, lanes in zip(summary["sweep"], ([0, 1], [2, 3], [4, 5], [6, 7]), strict=True):
        finals = [summary["final_returns"][i] for i in lanes]
        assert row["final_return"] == pytest.approx(np.mean(finals))
    assert "learning_rate  ent_coef" in err and "best: learning_rate=" in err
    # The run's config.json holds the lanes: --config takes them, as it takes the seeds.
    with open(tmp_path / "run" / "config.json") as f:
        record = json.load(f)
    assert record["seeds"] == [0, 1] * 4 and record["config"]["sweep"] == ["learning_rate",
                                                                           "ent_coef"]
    argv = ["train", "ppo", "--config", str(tmp_path / "run" / "config.json"), "--json",
            "--no-progress", "--no-compile-cache", "--log-dir", str(tmp_path / "run"),
            "--resume"]
    assert main(argv) == 0
    again = json.loads(capsys.readouterr()[0].strip().splitlines()[-1])
    assert again["already_finished"] and again["hparams"] == summary["hparams"]
    # With --seeds, each recorded point at the new seeds.
    argv = ["train", "ppo", "--config", str(tmp_path / "run" / "config.json"), "--seed", "5",
            "--seeds", "1", "--json", "--no-progress", "--no-compile-cache", "--eval-envs", "2"]
    assert main(argv) == 0
    rerun = json.loads(capsys.readouterr()[0].strip().splitlines()[-1])
    assert rerun["hparams"] == {"learning_rate": [1e-3, 1e-3, 2.5e-4, 2.5e-4],
                                "ent_coef": [0.0, 0.01, 0.0, 0.01]}
    assert [row["seeds"] for row in rerun["sweep"]] == [[5]] * 4
    assert [row["greedy_return"] for row in rerun["sweep"]] == rerun["greedy_returns"]
    assert main(["eval", str(tmp_path / "run"), "--eval-envs", "2", "--json",
                 "--no-compile-cache"]) == 0
    evaluated = json.loads(capsys.readouterr()[0].strip().splitlines()[-1])
    assert evaluated["hparams"] == summary["hparams"] and len(evaluated["greedy_returns"]) == 8


@pytest.mark.parametrize("argv,message", [
    (["--sweep", "num_envs=4,8"], "not a sweepable ppo field; sweepable: learning_rate"),
    (["--sweep", "learning_rate"], "expects FIELD=V1,V2"),
    (["--sweep", "learning_rate=a,b"], "must be numbers"),
    (["--sweep", "gamma=0.9", "--sweep", "gamma=0.99"], "given twice"),
    (["--sweep", "gamma=0.9,1.5"], "gamma must be in"),
])
def test_cli_sweep_errors(argv, message, capsys):
    assert main(["train", "ppo", "--no-progress", "--no-compile-cache", *argv]) == 2
    assert message in capsys.readouterr().err




def test_summarize_groups_lanes_by_point_and_skips_unfinished_lanes():
    hparams = {"learning_rate": np.float32([1e-3, 1e-3, 1e-4, 1e-4]),
               "gamma": np.float32([0.9, 0.9, 0.9, 0.9])}
    rows = hyper.summarize(hparams, [10.0, 20.0, np.nan, np.nan], [0, 1, 0, 1])
    assert rows == [
        {"hparams": {"learning_rate": 1e-3, "gamma": 0.9}, "seeds": [0, 1],
         "final_return": 15.0, "final_return_std": 5.0},
        {"hparams": {"learning_rate": 1e-4, "gamma": 0.9}, "seeds": [0, 1],
         "final_return": None, "final_return_std": None}]
    assert hyper.summarize({}, [1.0, 3.0], [0, 1]) == [
        {"hparams": {}, "seeds": [0, 1], "final_return": 2.0, "final_return_std": 1.0}]


def test_set_sweep_parses_field_names():
    """``--set sweep=a,b`` gives a tuple of names (tuples of numbers parse as before)."""
    from jaxrl_par.algos.config import apply_overrides

    cfg = apply_overrides(ppo.Config(), ["sweep=learning_rate,ent_coef", "hidden_sizes=32,32"])
    assert cfg.sweep == ("learning_rate", "ent_coef") and cfg.hidden_sizes == (32, 32)
    with pytest.raises(ValueError, match="'num_envs' cannot be swept"):
        apply_overrides(ppo.Config(), ["sweep=num_envs"])


def test_sample_draws_fixed_points_within_the_ranges():
    seeds, hp = hyper.sample([0, 1], 200, seed=3, learning_rate=(1e-5, 1e-1, "log"),
                             clip_eps=(0.1, 0.3))
    assert seeds == [0, 1] * 200 and hp["learning_rate"][0] == hp["learning_rate"][1]
    lr, clip = np.asarray(hp["learning_rate"][::2]), np.asarray(hp["clip_eps"][::2])
    assert lr.min() >= 1e-5 and lr.max() <= 1e-1 and clip.min() >= 0.1 and clip.max() <= 0.3
    # Log-uniform: each of the four decades holds about a quarter of the points.
    counts = np.histogram(np.log10(lr), bins=[-5, -4, -3, -2, -1])[0]
    assert counts.min() > 30, counts
    assert hyper.sample([0, 1], 200, seed=3, learning_rate=(1e-5, 1e-1, "log"),
                        clip_eps=(0.1, 0.3)) == (seeds, hp)
    for bad in [(1e-2, 1e-3), (0.0, 1.0, "log"), (1.0, 2.0, "exp"), 0.5]:
        with pytest.raises(ValueError, match="sample: learning_rate="):
            hyper.sample([0], 2, learning_rate=bad)


def test_cli_random_search_crosses_the_grid_with_drawn_points(capsys):
    argv = ["train", "ppo", "--total-timesteps", "2048", "--set", "num_envs=4",
            "--sweep", "learning_rate=1e-4:1e-2:log", "--sweep", "ent_coef=0,0.01",
            "--points", "2", "--seeds", "2", "--json", "--no-progress", "--no-compile-cache"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr()[0].strip().splitlines()[-1])
    lr, ent = summary["hparams"]["learning_rate"], summary["hparams"]["ent_coef"]
    assert len(lr) == 8 and ent == [0.0] * 4 + [0.01] * 4
    assert lr[:4] == lr[4:] and lr[0] == lr[1] and lr[2] == lr[3] and lr[0] != lr[2]
    assert all(1e-4 <= x <= 1e-2 for x in lr)
    assert [row["seeds"] for row in summary["sweep"]] == [[0, 1]] * 4


@pytest.mark.parametrize("argv,message", [
    (["--sweep", "learning_rate=1e-4:1e-2"], "give how many points with --points N"),
    (["--points", "4"], "--points N draws values of ranges"),
    (["--sweep", "learning_rate=1e-4:1e-2:exp", "--points", "2"], "a range is LOW:HIGH"),
    (["--sweep", "learning_rate=1e-2:1e-4", "--points", "2"], "need low < high"),
])
def test_cli_random_search_errors(argv, message, capsys):
    assert main(["train", "ppo", "--no-progress", "--no-compile-cache", *argv]) == 2
    assert message in capsys.readouterr().err
