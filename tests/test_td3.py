"""DDPG and TD3: exploration noise (Gaussian, Ornstein-Uhlenbeck), delayed targets,
configs, learning."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxrl_par.algos import ddpg, deterministic, td3
from jaxrl_par.blocks.exploration import gaussian_exploration, ou_noise_reset, ou_noise_step
from jaxrl_par.runner.evaluation import greedy_returns
from jaxrl_par.runner.training import train


def _ou_paths(step, chains=8192, steps=1000, theta=1.0, sigma=0.5, dt=0.01, x0=1.0):
    """``[steps, chains]`` paths of the process ``step`` from ``x0``, seed 0."""
    noise = jax.random.normal(jax.random.key(0), (steps, chains, 1))

    def body(x, n):
        x = step(x, n, theta, sigma, dt)
        return x, x[:, 0]

    _, xs = jax.lax.scan(body, jnp.full((chains, 1), x0), noise)
    return np.asarray(xs, np.float64)


def _ou_statistics(step):
    """(mean after 100 steps, stationary variance, lag-1 autocorrelation) of ``step``."""
    xs = _ou_paths(step)
    tail = xs[500:]  # 500 steps of mean reversion at rate 0.01: 0.99^500 < 0.01
    var = tail.var(axis=1).mean()
    lag1 = np.mean(tail[1:] * tail[:-1]) / np.mean(tail * tail)
    return xs[99].mean(), var, lag1


def test_ou_noise_reverts_to_zero_with_the_stationary_variance():
    """theta 1, sigma 0.5, dt 0.01, 8,192 chains from x = 1 (seed 0): the mean after 100
    steps is 0.99^100 = 0.366 (the chains' std there is ~0.33: a standard error of
    0.0037); the variance at stationarity is sigma^2 / (2 theta) = 0.125 (the Euler step's
    is 0.0025 / (1 - 0.99^2) = 0.1256; one snapshot's relative standard error is
    sqrt(2 / 8192) = 1.6%); the lag-1 autocorrelation is 1 - theta dt = 0.99."""
    mean100, var, lag1 = _ou_statistics(ou_noise_step)
    assert mean100 == pytest.approx(0.99 ** 100, abs=0.015)
    assert var == pytest.approx(0.5 ** 2 / (2 * 1.0), rel=0.04)
    assert lag1 == pytest.approx(0.99, abs=0.003)
    # Mutants: the diffusion scaled by dt instead of sqrt(dt) (variance 100x smaller);
    # reversion towards the start instead of 0; white noise with no memory.
    _, var, _ = _ou_statistics(lambda x, n, th, s, dt: x - th * x * dt + s * dt * n)
    assert var != pytest.approx(0.125, rel=0.5)
    mean100, _, _ = _ou_statistics(lambda x, n, th, s, dt: x - th * (x - 1) * dt
                                   + s * dt ** 0.5 * n)
    assert mean100 != pytest.approx(0.99 ** 100, abs=0.1)
    _, _, lag1 = _ou_statistics(lambda x, n, th, s, dt: s / (2 * th) ** 0.5 * n)
    assert lag1 != pytest.approx(0.99, abs=0.1)


def test_ou_noise_restarts_where_an_episode_ended():
    x = jnp.array([[0.5, -1.0], [2.0, 3.0]])
    np.testing.assert_array_equal(ou_noise_reset(x, jnp.array([False, True])),
                                  [[0.5, -1.0], [0.0, 0.0]])


def test_gaussian_exploration_scales_to_the_box_and_clips_to_it():
    low, high = jnp.array([-2.0, 0.0]), jnp.array([2.0, 1.0])  # half-widths 2 and 0.5
    mu = jnp.array([[1.9, 0.5], [0.0, 0.1], [-1.5, 0.9]])
    noise = jnp.array([[1.0, 1.0], [0.5, -1.0], [-5.0, 0.1]])
    # 1.9 + 0.5*2*1 = 2.9 -> 2; 0.5 + 0.5*0.5*1 = 0.75; 0 + 0.5*2*0.5 = 0.5;
    # 0.1 - 0.25 = -0.15 -> 0; -1.5 - 5 -> -2; 0.9 + 0.025 = 0.925
    np.testing.assert_allclose(gaussian_exploration(mu, noise, 0.5, low, high),
                               [[2.0, 0.75], [0.5, 0.0], [-2.0, 0.925]], rtol=1e-6)
    # Inside the box, the noise's std is sigma half-widths: 0.1 * 2 = 0.2 (seed 0).
    draws = jax.random.normal(jax.random.key(0), (20_000, 2))
    acts = np.asarray(gaussian_exploration(jnp.zeros((20_000, 2)) + jnp.array([0.0, 0.5]),
                                           draws, 0.1, low, high))
    assert acts[:, 0].std() == pytest.approx(0.2, rel=0.03)
    assert acts[:, 1].std() == pytest.approx(0.05, rel=0.03)


def test_delayed_actor_and_target_updates():
    """One update of 4 critic steps with ``policy_delay=4``: the actor takes one step and
    the targets move once, by tau, towards the online networks, from their start."""
    cfg = td3.Config(num_envs=2, num_steps=4, total_timesteps=8, buffer_size=16,
                     batch_size=8, learning_starts=8, train_frequency=2, policy_delay=4,
                     hidden_sizes=(8,), tau=0.25)
    algo = td3.make(cfg)
    state0 = algo.init(jax.random.key(0))
    state, metrics = jax.jit(algo.update)(state0)
    assert int(state.gradient_steps) == 4
    for online, start, target in [
            (state.actor_params, state0.actor_params, state.target_actor_params),
            (state.critic_params, state0.critic_params, state.target_critic_params)]:
        expect = optax.incremental_update(online, start, 0.25)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7),
                     target, expect)
    assert not np.allclose(jax.tree.leaves(state.actor_params)[0],
                           jax.tree.leaves(state0.actor_params)[0])
    # policy_delay=1: four actor and target steps, so the target is elsewhere
    state1, _ = jax.jit(td3.make(dataclasses.replace(cfg, policy_delay=1)).update)(state0)
    expect = optax.incremental_update(state1.actor_params, state0.actor_params, 0.25)
    assert not np.allclose(jax.tree.leaves(state1.target_actor_params)[-1],
                           jax.tree.leaves(expect)[-1])


def test_ddpg_ou_noise_lives_in_the_state_and_restarts_at_episode_ends():
    """Pendulum truncates at 200 steps: after 100 steps each env's OU state is nonzero,
    after 200 (the episode's end) it is 0 again."""
    cfg = ddpg.Config(num_envs=2, num_steps=100, total_timesteps=400, buffer_size=400,
                      batch_size=8, learning_starts=400, exploration="ou",
                      exploration_noise=0.2, hidden_sizes=(8,))
    algo = ddpg.make(cfg)
    state = algo.init(jax.random.key(0))
    update = jax.jit(algo.update)
    state, _ = update(state)
    assert state.noise.shape == (2, 1) and np.all(np.asarray(state.noise) != 0.0)
    state, metrics = update(state)
    assert float(metrics["num_episodes"]) == 2
    np.testing.assert_array_equal(state.noise, np.zeros((2, 1)))


@pytest.mark.parametrize("module", [ddpg, td3])
def test_moves_the_action_to_the_rewarded_one(module):
    """ProbeContinuous: one-step episodes, reward -(a - 0.5)^2. The greedy action ends
    near 0.5 (return > -0.01; a random action in [-1, 1] loses 0.58 on average)."""
    cfg = module.Config(env="ProbeContinuous-v0", num_envs=4, num_steps=8,
                        total_timesteps=3_000, learning_starts=256, batch_size=64,
                        hidden_sizes=(16,), learning_rate=1e-3)
    result = train(module.make(cfg), 0, progress=False, num_chunks=1)
    assert greedy_returns(module.make(cfg), result.state, num_envs=4)[0] > -0.01


def test_td3_learns_pendulum():
    """Seed 0, 1.2e4 env steps (1e3 of them random), a critic step per 2 env steps on
    batches of 128: the last updates average >= -500 (a random policy gets ~-1,200, and
    this run's trailing return is about -1,400 until 9e3 steps; it ended at -316)."""
    cfg = td3.Config(total_timesteps=12_000, learning_starts=1_000, train_frequency=2,
                     batch_size=128)
    final = train(td3.make(cfg), 0, progress=False).final_returns(fraction=0.05)[0]
    assert final >= -500.0, final


@pytest.mark.slow
@pytest.mark.xla_optimized
@pytest.mark.parametrize("name,steps", [("td3", 30_000), ("ddpg", 50_000)])
def test_defaults_reach_minus_200_on_pendulum_over_4_seeds(name, steps, capsys):
    """Through the CLI at its defaults, seeds 0-3: the mean final return is >= -200 by
    3e4 env steps (TD3) and 5e4 (DDPG)."""
    import json

    from jaxrl_par.cli import main

    assert main(["train", name, "--env", "Pendulum-v1", "--seeds", "4", "--no-progress",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["env_steps"] <= steps
    assert np.mean(summary["final_returns"]) >= -200.0, summary["final_returns"]


@pytest.mark.parametrize("changes,message", [
    ({"env": "CartPole-v1"}, "discrete actions; td3 takes a continuous"),
    ({"policy_delay": 3}, "policy_delay=3 does not divide the 64 critic steps"),
    ({"exploration": "pink"}, r"exploration='pink'; choose from \('gaussian', 'ou'\)"),
    ({"train_frequency": 3}, "train_frequency=3 does not divide"),
    ({"batch_size": 512, "buffer_size": 256}, "batch_size=512 exceeds buffer_size=256"),
    ({"target_noise": -0.1}, "target_noise must be >= 0"),
    ({"sweep": ("hidden_sizes",)}, "cannot be swept"),
])
def test_config_errors_name_the_fix(changes, message):
    with pytest.raises(ValueError, match=message):
        td3.Config(**changes)


def test_ddpg_and_td3_are_the_shared_config_with_their_switches():
    d, t = ddpg.Config(), td3.Config()
    assert isinstance(d, deterministic.Config) and isinstance(t, deterministic.Config)
    assert (d.num_critics, d.policy_delay, d.target_noise) == (1, 1, 0.0)
    assert (t.num_critics, t.policy_delay, t.target_noise, t.target_noise_clip) == (2, 2, 0.2,
                                                                                    0.5)
    assert (d.total_timesteps, t.total_timesteps) == (50_000, 30_000)


def test_a_killed_run_resumes_as_if_never_stopped_and_evaluates(tmp_path, capsys):
    """DDPG with OU noise (its state in the checkpoint), killed after 2 of 4 chunks and
    resumed: bit for bit the run that never stopped; ``jaxrl-par eval`` reads it back."""
    import json

    from killed import train_killed_after

    from jaxrl_par.cli import main
    from jaxrl_par.runner import checkpoints

    cfg = ddpg.Config(num_envs=2, num_steps=8, total_timesteps=2 * 8 * 8, buffer_size=128,
                      batch_size=8, learning_starts=32, train_frequency=4, hidden_sizes=(8,),
                      exploration="ou")
    algo = ddpg.make(cfg)
    full = train(algo, [0, 1], num_chunks=4, progress=False)
    log = str(tmp_path / "run")
    train_killed_after(4, algo, [0, 1], num_chunks=4, progress=False, log_dir=log)
    resumed = train(algo, [0, 1], num_chunks=4, progress=False, log_dir=log, resume=True)
    assert resumed.updates_run == 4
    for x, y in zip(jax.tree.leaves(full.state), jax.tree.leaves(resumed.state), strict=True):
        if checkpoints.is_key(x):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(x, y)
    assert main(["eval", log, "--eval-envs", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(summary["greedy_returns"]) == 2
