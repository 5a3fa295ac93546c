"""``benchmarks/dqn_minatar.py``'s mapping of our DQN settings onto rejax's knobs (nothing
is trained here)."""

import dataclasses
import importlib.util
import pathlib
import sys

import jax
import jax.numpy as jnp
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("benchmarks_dqn_minatar",
                                               ROOT / "benchmarks" / "dqn_minatar.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # flax's dataclasses look their module up
_spec.loader.exec_module(bench)


def test_preset_maps_to_rejax_knobs():
    kw = bench.rejax_matched(bench.ours_config(1_000_000))
    assert kw == {
        "num_envs": 8, "buffer_size": 20_000, "batch_size": 64, "fill_buffer": 2_000,
        "learning_rate": 2.5e-4, "gamma": 0.99, "eps_start": 1.0, "eps_end": 0.05,
        "exploration_fraction": 0.25,
        "num_epochs": 1,  # 8 envs / a gradient step per 8 env steps
        "target_update_freq": 2_000,  # 250 gradient steps * 8 env steps each
        "polyak": 0.0,  # tau 1: a hard copy
        "max_grad_norm": 10.0, "ddqn": True, "agent": "DuelingQNetwork",
        "agent_kwargs": {"activation": "relu"}}


def test_other_frequencies_and_polyak():
    cfg = dataclasses.replace(bench.ours_config(1_000_000), train_frequency=4, tau=0.25,
                              target_update_period=100, dueling=False)
    kw = bench.rejax_matched(cfg)
    # 8 envs / 4 env steps per gradient step = 2; 100 * 4 = 400 env steps; 1 - 0.25
    assert (kw["num_epochs"], kw["target_update_freq"], kw["polyak"], kw["agent"]) == (
        2, 400, 0.75, "QNetwork")
    with pytest.raises(ValueError, match="does not divide num_envs"):
        bench.rejax_matched(dataclasses.replace(cfg, train_frequency=16))


def test_rejax_built_at_the_preset():
    pytest.importorskip("rejax")
    cfg = bench.ours_config(100_000)
    s = bench.rejax_settings(bench.make_rejax("rejax-matched", cfg))
    assert (s["agent"], s["hidden_layer_sizes"], s["activation"]) == (
        "DuelingQNetwork", [128], "relu")
    assert (s["target_update_freq"], s["polyak"], s["fill_buffer"]) == (2_000, 0.0, 2_000)
    assert bench.rejax_settings(bench.make_rejax("rejax-defaults", cfg))["max_grad_norm"] == "inf"
    algo = bench.make_rejax("rejax-matched-cnn", cfg)
    obs = jnp.zeros((2, 10, 10, 4))
    params = algo.agent.init(jax.random.key(0), obs)
    assert "Conv_0" in str(jax.tree_util.tree_structure(params))
    assert bench.rejax_act(algo.agent)(params, obs, None).shape == (2,)
