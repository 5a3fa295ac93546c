"""Ape-X: ladder, initial priorities from the actors' copy, priority write-back, policy
lag, CartPole and probes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from killed import train_killed_after
from test_dqn import PROBE_VALUES, algo_q, q_values, run

from jaxrl_par.algos import apex
from jaxrl_par.algos.q_common import batch_td_error
from jaxrl_par.runner.evaluation import greedy_returns
from jaxrl_par.runner.training import train

SMALL = dict(env="CartPole-v1", num_actors=8, num_steps=4, buffer_size=4_096, batch_size=32,
             learner_steps_per_iteration=1, learning_starts=64, hidden_sizes=(32,),
             total_timesteps=32 * 40, n_step=3)


def stored(state):
    """The buffer's transitions and leaf masses p^alpha, ``[size]``."""
    size = int(state.learner.buffer.size)
    data = jax.tree.map(lambda x: x[:size], state.learner.buffer.storage.data)
    mass = np.asarray(state.learner.buffer.tree.sums[0][:size])
    return data, mass


def test_config_ladder_and_ratio():
    cfg = apex.Config(num_actors=8)
    np.testing.assert_allclose(
        cfg.epsilons, [0.4, 0.16, 0.064, 0.0256, 0.01024, 0.004096, 0.0016384, 0.00065536],
        rtol=1e-6)
    cfg = apex.Config(num_actors=16, num_steps=4, learner_steps_per_iteration=4,
                      batch_size=128)
    assert cfg.env_steps_per_sample == 64 / 512
    with pytest.raises(ValueError, match="actor_sync_period"):
        apex.Config(actor_sync_period=0)
    with pytest.raises(ValueError, match="epsilon"):
        apex.Config(epsilon=1.5)


def test_initial_priority_is_actor_td_error():
    """Priorities written at insertion are |n-step double-Q TD error| of the *actors'*
    parameters (checked against a direct computation), not the learner's nor max."""
    cfg = apex.Config(**{**SMALL, "learning_starts": 10**9})  # no learner step
    algo = apex.make(cfg)
    state = jax.jit(algo.init)(jax.random.key(0))
    # Give the actors a different copy than the learner's.
    actor = jax.tree.map(lambda p: p + 0.3 * jnp.sign(p), state.params)
    learner = state.learner.replace(actor_params=actor, actor_target_params=actor)
    state = state.replace(learner=learner)
    update = jax.jit(algo.update)
    state, _ = update(state)
    state, _ = update(state)
    data, mass = stored(state)
    q_fn = algo_q(algo)
    td, _ = batch_td_error(q_fn, actor, actor, data, double=True)
    expected = (np.abs(np.asarray(td)) + cfg.priority_eps) * np.asarray(data.mask)
    np.testing.assert_allclose(mass, expected**cfg.per_alpha, rtol=1e-4, atol=1e-6)
    # the first n-1 windows of each actor start in the padding: priority 0
    assert np.sum(np.asarray(data.mask) == 0) == cfg.num_actors * (cfg.n_step - 1)
    learner_td, _ = batch_td_error(q_fn, state.params, state.learner.target_params, data, True)
    assert not np.allclose(np.abs(np.asarray(learner_td)), np.abs(np.asarray(td)), rtol=1e-2)


def test_priority_write_back_after_learning():
    """After a learner step the sampled slots hold |td| of the learner's parameters
    before that step (one learner step per update, so they are the old state's)."""
    cfg = apex.Config(**SMALL)
    algo = apex.make(cfg)
    update = jax.jit(algo.update)
    state = jax.jit(algo.init)(jax.random.key(1))
    for _ in range(6):
        state, _ = update(state)
    before = state
    after, metrics = update(before)
    assert float(metrics["learner_steps"]) == float(before.learner.learner_steps) + 1
    data, mass_after = stored(after)
    _, mass_before = stored(before)
    old = int(before.learner.buffer.size)
    changed = np.nonzero(~np.isclose(mass_after[:old], mass_before, rtol=1e-6))[0]
    assert 0 < len(changed) <= cfg.batch_size
    sub = jax.tree.map(lambda x: x[changed], data)
    td, _ = batch_td_error(algo_q(algo), before.params, before.learner.target_params, sub, True)
    expected = (np.abs(np.asarray(td)) + cfg.priority_eps) ** cfg.per_alpha
    np.testing.assert_allclose(mass_after[changed], expected, rtol=1e-3, atol=1e-6)


def test_policy_lag_staleness_and_metrics():
    cfg = apex.Config(**{**SMALL, "learner_steps_per_iteration": 2, "actor_sync_period": 4,
                         "total_timesteps": 32 * 20})
    algo = apex.make(cfg)
    state, m = run(algo)
    lag = np.asarray(m["policy_lag"])
    steps = np.asarray(m["learner_steps"])
    assert lag.max() <= cfg.actor_sync_period and lag.max() > 0
    # pulls every 4 learner steps = every 2 updates: lag at acting alternates 0, 2
    assert set(lag[steps > 4].tolist()) == {0.0, 2.0}
    assert np.all(np.asarray(m["sample_staleness"])[steps > 0] > 0)
    np.testing.assert_allclose(m["env_steps_per_sample"], 32 / 64)
    for name in ("episode_return", "num_episodes", "episode_return_greedy",
                 "episode_return_explore", "loss", "sampled_priority", "insert_priority",
                 "mean_priority_mass", "sample_staleness", "policy_lag"):
        assert m[name].shape == (20,), name
    # the actors' copy is the learner's from the last pull
    learner = state.learner
    assert int(learner.learner_steps) - int(learner.actor_version) < cfg.actor_sync_period


@pytest.mark.xla_optimized
def test_cartpole_reaches_475():
    """Ape-X (16 actors, n=3, dueling double Q, PER, batch 128) solves CartPole in 1e5
    steps: greedy evaluation of the learner's parameters, seeds 0-7 as one vmapped batch;
    at least 4 of the 8 must reach 475 (a broken learner gets none).

    One seed alone flips between 500 and ~200-450 with the last bits of the arithmetic
    (vmapping 1, 4 or 8 seeds, a reordered sum, another random stream, another CPU), so a
    one-seed test would pass or fail on luck. Seeds 0-23 in batches of 8 gave 6, 7 and 6
    of 8 at >= 475 (79% per seed); at that rate 4 of 8 holds ~98% of the time on a CPU
    that rounds differently. (At 6e4 steps the rate was 58%, too close to the bound.)"""
    cfg = apex.Config(num_actors=16, num_steps=4, learner_steps_per_iteration=8,
                      batch_size=128, learning_starts=1_000, learning_rate=2e-3,
                      target_period=50, total_timesteps=100_000)
    algo = apex.make(cfg)
    result = train(algo, list(range(8)), num_chunks=5, progress=False)
    returns = greedy_returns(algo, result.state).tolist()
    assert sum(r >= 475 for r in returns) >= 4, returns


APEX_PROBE = dict(num_actors=8, num_steps=4, total_timesteps=8_000, buffer_size=2_000,
                  batch_size=64, learning_starts=256, learner_steps_per_iteration=4,
                  learning_rate=1e-2, target_period=10, actor_sync_period=4,
                  hidden_sizes=(32,), loss="mse", n_step=1)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", sorted(PROBE_VALUES))
def test_probe_q_values(env_id):
    algo = apex.make(apex.Config(**{**APEX_PROBE, "env": env_id}))
    state, _ = run(algo)
    obs, expected = PROBE_VALUES[env_id]
    np.testing.assert_allclose(q_values(algo, state, obs), expected, atol=0.1)


def test_probe_obs_action():
    algo = apex.make(apex.Config(**{**APEX_PROBE, "env": "ProbeObsAction-v0"}))
    state, _ = run(algo)
    obs, expected = PROBE_VALUES["ProbeObsAction-v0"]
    np.testing.assert_allclose(q_values(algo, state, obs), expected, atol=0.1)


@pytest.mark.parametrize("n_step", [1, 3])
def test_time_limit_bootstraps_from_final_obs(n_step):
    """Value 1 / (1 - 0.9) = 10 on ProbeTimeLimit only with bootstrapping on truncation."""
    algo = apex.make(apex.Config(**{**APEX_PROBE, "env": "ProbeTimeLimit-v0", "gamma": 0.9,
                                    "n_step": n_step, "learning_rate": 1e-2,
                                    "total_timesteps": 16_000}))
    state, _ = run(algo)
    assert q_values(algo, state, [[0.0]])[0, 0] == pytest.approx(10.0, abs=0.5)


def test_actor_learner_errors_name_the_fix(monkeypatch):
    from jaxrl_par.algos import ppo

    with pytest.raises(ValueError, match="pipeline=True"):
        train(apex.make(apex.Config(**SMALL)), [0], progress=False, actor_learner=True)
    with pytest.raises(ValueError, match="no actor-learner pipeline"):
        train(ppo.make(ppo.Config(total_timesteps=4 * 128)), [0], progress=False,
              actor_learner=True)
    with pytest.raises(ValueError, match="axis_name"):
        apex.Config(pipeline=True, axis_name="data")
    pipelined = apex.make(apex.Config(**{**SMALL, "pipeline": True}))
    with pytest.raises(ValueError, match="does not combine with devices"):
        train(pipelined, [0], progress=False, actor_learner=True, devices=1)
    with pytest.raises(ValueError, match="two devices"):
        train(pipelined, [0], progress=False, actor_learner=jax.devices() * 3)
    monkeypatch.setattr(jax, "process_count", lambda: 2)  # as after jax.distributed
    with pytest.raises(ValueError, match="within one process"):
        train(pipelined, [0], progress=False, actor_learner=True)


def test_actor_learner_resumed_equals_one_program_never_stopped(tmp_path):
    """The actor-learner runtime (both halves on this process's first device), stopped
    after its second of four chunks and resumed from the checkpoint, gives the numbers of
    the pipelined ``update`` run as one program without stopping."""
    algo = apex.make(apex.Config(**{**SMALL, "pipeline": True}))
    whole = train(algo, [0], num_chunks=4, progress=False)
    log = str(tmp_path / "run")

    device = jax.devices()[0]
    train_killed_after(algo.num_updates // 2, algo, [0], num_chunks=4, progress=False,
                       log_dir=log, actor_learner=(device, device))
    resumed = train(algo, [0], num_chunks=4, progress=False, log_dir=log, resume=True,
                    actor_learner=(device, device))
    for name in ("loss", "q_mean", "insert_priority", "policy_lag", "episode_return"):
        np.testing.assert_allclose(resumed.metrics[name], whole.metrics[name], rtol=1e-6,
                                   atol=1e-7, err_msg=name)

    def close(a, b):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    jax.tree.map(close, resumed.state.params, whole.state.params)
    np.testing.assert_array_equal(resumed.state.learner.buffer.storage.data.action,
                                  whole.state.learner.buffer.storage.data.action)
    np.testing.assert_array_equal(resumed.state.pending.env_steps, whole.state.pending.env_steps)
