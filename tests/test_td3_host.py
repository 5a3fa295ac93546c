"""DDPG and TD3 on host vector envs (``gymnasium:<id>``, gymnasium's Sync/AsyncVectorEnv):
the same run on both, the OU noise restarted at the episodes' ends, and TD3 learning
gymnasium's Pendulum."""

import dataclasses

import jax
import numpy as np
import pytest

from jaxrl_par.algos import ddpg, td3
from jaxrl_par.runner import checkpoints
from jaxrl_par.runner.training import train

PENDULUM = "gymnasium:Pendulum-v1"


def _leaves(result):
    return [np.asarray(jax.random.key_data(x) if checkpoints.is_key(x) else x)
            for x in jax.tree.leaves(result.state)]


@pytest.mark.parametrize("module,exploration", [(td3, "gaussian"), (ddpg, "ou")])
def test_sync_and_async_vector_envs_give_the_same_run(module, exploration):
    """Seeded envs, the same actions: subprocesses or not, the same state bit for bit
    (replay, parameters after learning, OU state); another seed another."""
    cfg = module.Config(env=PENDULUM, num_envs=2, num_steps=8, total_timesteps=2 * 8 * 4,
                        learning_starts=32, batch_size=16, buffer_size=64,
                        hidden_sizes=(8,), exploration=exploration)
    algo = module.make(cfg)
    runs = [train(algo, seed, progress=False, num_chunks=1, vector_env=mode)
            for seed, mode in ((0, "sync"), (0, "async"), (1, "sync"))]
    # learning from the 2nd update on (32 steps taken >= learning_starts): 3 * 16 steps
    assert float(runs[0].state.gradient_steps[0]) == 3 * 16
    for a, b in zip(_leaves(runs[0]), _leaves(runs[1]), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b)
                   for a, b in zip(_leaves(runs[0]), _leaves(runs[2]), strict=True))


def test_ddpg_ou_noise_restarts_where_host_episodes_end():
    """Gymnasium's Pendulum truncates at 200 steps: after 100 steps each env's OU state is
    nonzero, after 200 (the episodes' end, within an update) it is 0 again."""
    cfg = ddpg.Config(env=PENDULUM, num_envs=2, num_steps=100, total_timesteps=200,
                      buffer_size=400, batch_size=8, learning_starts=400, exploration="ou",
                      exploration_noise=0.2, hidden_sizes=(8,))
    half = train(ddpg.make(cfg), 0, progress=False, num_chunks=1, vector_env="sync")
    assert half.state.noise.shape == (1, 2, 1) and np.all(np.asarray(half.state.noise) != 0)
    cfg = dataclasses.replace(cfg, total_timesteps=400)
    full = train(ddpg.make(cfg), 0, progress=False, num_chunks=1, vector_env="sync")
    assert float(full.metrics["num_episodes"][0, -1]) == 2
    np.testing.assert_array_equal(full.state.noise, np.zeros((1, 2, 1)))


def test_td3_learns_gymnasium_pendulum_on_host_envs():
    """Seed 0, 2e4 env steps (1e3 of them random), a critic step per 2 env steps on
    batches of 128: the mean return of the last tenth of the updates is >= -400 (a random
    policy gets about -1,200; this run's trailing return stays below -1,200 until 1e4
    steps and ended at -163)."""
    cfg = td3.Config(env=PENDULUM, total_timesteps=20_000, learning_starts=1_000,
                     train_frequency=2, batch_size=128)
    result = train(td3.make(cfg), 0, progress=False, num_chunks=1, vector_env="sync")
    final = result.final_returns(fraction=0.1)[0]
    assert final >= -400.0, final
