"""DQN: config validation, CartPole, probe environments, truncation bootstrapping."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par import envs
from jaxrl_par.algos import dqn
from jaxrl_par.runner.evaluation import greedy_returns
from jaxrl_par.runner.training import train

# Small and fast: probes are solved in a few thousand steps.
PROBE = dict(num_envs=8, num_steps=4, total_timesteps=6_000, buffer_size=2_000,
             batch_size=64, learning_starts=256, train_frequency=8, learning_rate=1e-2,
             target_update_period=10, exploration_fraction=0.3, epsilon_end=0.2, hidden_sizes=(32,),
             loss="mse")


def run(algo, seed=0):
    """One seed, one compiled scan over all updates (no runner overhead)."""
    state = jax.jit(algo.init)(jax.random.key(seed))
    run_all = jax.jit(lambda s: jax.lax.scan(lambda c, _: algo.update(c), s, None,
                                             algo.num_updates))
    return run_all(state)


def q_values(algo, state, obs):
    return np.asarray(algo_q(algo)(state.params, jnp.asarray(obs, jnp.float32)))


def algo_q(algo):
    spec = envs.make(algo.config.env, 1)
    cfg = algo.config
    return dqn.make_q_network(spec, cfg.hidden_sizes, cfg.activation, cfg.dueling).apply


def test_config_validation_names_field_and_fix():
    with pytest.raises(ValueError, match="train_frequency"):
        dqn.Config(num_envs=10, num_steps=1, train_frequency=3)
    with pytest.raises(ValueError, match="loss"):
        dqn.Config(loss="l1")
    with pytest.raises(ValueError, match="gamma"):
        dqn.Config(gamma=1.5)
    with pytest.raises(ValueError, match="tau"):
        dqn.Config(tau=0.0)
    with pytest.raises(ValueError, match="buffer_size"):
        dqn.Config(batch_size=512, buffer_size=256)
    with pytest.raises(ValueError, match=r"Q-learning \(apex, dqn, gorila\) needs a discrete "
                                         r"action space: train a2c, a3c, ddpg, impala, ppo, sac "
                                         r"or td3 for "
                                         r"continuous control \(jaxrl-par train ppo --env "
                                         r"ProbeContinuous-v0\)"):
        dqn.make(dqn.Config(env="ProbeContinuous-v0"))
    cfg = dqn.Config()
    assert cfg.gradient_steps_per_update == 10 and cfg.num_updates == 5_000


def test_learning_starts_and_metrics():
    algo = dqn.make(dqn.Config(**{**PROBE, "env": "ProbeConstant-v0",
                                  "learning_starts": 64, "total_timesteps": 160}))
    state, metrics = run(algo)
    steps = np.asarray(metrics["gradient_steps"])
    # 32 env steps per update: updates 1 (32 steps) learn nothing, update 2 (64) learns
    np.testing.assert_array_equal(steps, [0, 4, 8, 12, 16])
    for name in ("episode_return", "num_episodes", "loss", "q_mean", "epsilon"):
        assert metrics[name].shape == (5,)
    assert int(state.env_steps) == 160


PROBE_VALUES = {  # env id -> (observations, expected Q [obs, A]) with gamma = 0.99
    "ProbeConstant-v0": ([[0.0]], [[1.0]]),
    "ProbeObsReward-v0": ([[1.0], [-1.0]], [[1.0], [-1.0]]),
    "ProbeDiscount-v0": ([[0.0], [1.0]], [[0.99], [1.0]]),
    "ProbeAction-v0": ([[0.0]], [[-1.0, 1.0]]),
    "ProbeObsAction-v0": ([[1.0], [-1.0]], [[-1.0, 1.0], [1.0, -1.0]]),
}


@pytest.mark.slow
@pytest.mark.parametrize("env_id", sorted(PROBE_VALUES))
@pytest.mark.parametrize("variant", [{}, {"dueling": True, "prioritized": True, "n_step": 2}])
def test_probe_q_values(env_id, variant):
    algo = dqn.make(dqn.Config(**{**PROBE, "env": env_id, **variant}))
    state, _ = run(algo)
    obs, expected = PROBE_VALUES[env_id]
    np.testing.assert_allclose(q_values(algo, state, obs), expected, atol=0.1)


def test_probe_action_and_discount():
    """The two probes that catch the most bugs (policy and discounting), not slow."""
    for env_id in ("ProbeObsAction-v0", "ProbeDiscount-v0"):
        algo = dqn.make(dqn.Config(**{**PROBE, "env": env_id, "n_step": 2}))
        state, _ = run(algo)
        obs, expected = PROBE_VALUES[env_id]
        np.testing.assert_allclose(q_values(algo, state, obs), expected, atol=0.1)


@pytest.mark.parametrize("n_step", [1, 3])
def test_time_limit_bootstraps_from_final_obs(n_step):
    """ProbeTimeLimit never terminates: with bootstrapping on truncation every state has
    value 1 / (1 - gamma) = 10 (gamma 0.9); treating the limit of 10 steps as terminal
    would give (1 - 0.9**k) / 0.1 < 10, 6.5 on average."""
    algo = dqn.make(dqn.Config(**{**PROBE, "env": "ProbeTimeLimit-v0", "gamma": 0.9,
                                  "n_step": n_step, "learning_rate": 1e-2,
                                  "train_frequency": 4, "total_timesteps": 30_000}))
    state, _ = run(algo)
    assert q_values(algo, state, [[0.0]])[0, 0] == pytest.approx(10.0, abs=0.5)


@pytest.mark.xla_optimized
def test_cartpole_reaches_475():
    """n-step double DQN solves CartPole-v1 in 1e5 steps (fixed seed, CPU, ~10 s): greedy
    return of the final parameters. Seeds 0-11 run one by one all reached >= 482 on
    2026-12-02 (an AMD EPYC host), so seed 0 is not a lucky pick."""
    cfg = dqn.Config(total_timesteps=100_000, learning_starts=1_000, buffer_size=50_000,
                     exploration_fraction=0.2, n_step=3)
    algo = dqn.make(cfg)
    result = train(algo, [0], num_chunks=5, progress=False)
    greedy = greedy_returns(algo, result.state)[0]
    assert greedy >= 475, (greedy, result.final_returns()[0])


def test_minatar_replay_stores_observation_bytes():
    # MinAtar's uint8 observations go into the replay buffer as bytes: 2 x 400 bytes of
    # observation per transition instead of 2 x 1,600 as float32. The stored rows are
    # the env's 0/1 grids, and learning runs on them (finite loss, greedy actions).
    cfg = dqn.Config(env="Breakout-MinAtar", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 4,
                     buffer_size=256, batch_size=16, learning_starts=32, train_frequency=8,
                     hidden_sizes=(16,), n_step=2)
    algo = dqn.make(cfg)
    state, metrics = run(algo)
    buffer = state.buffer
    # obs and next_obs, then action, reward, discount, mask and insert_step (4 bytes each)
    assert buffer.data_nbytes == 256 * (2 * 400 + 5 * 4)
    data = buffer.data
    assert data.obs.dtype == data.next_obs.dtype == jnp.uint8
    size = int(buffer.size)
    real = np.asarray(data.mask[:size]) > 0  # the first update's n-step padding is zeros
    stored = np.asarray(data.obs[:size])[real]
    assert real.sum() == size - 4 and set(np.unique(stored).tolist()) == {0, 1}
    assert stored.sum(axis=(1, 2, 3)).min() > 0  # every real obs shows paddle and bricks
    assert np.isfinite(np.asarray(metrics["loss"])[-1]) and int(state.gradient_steps) > 0
