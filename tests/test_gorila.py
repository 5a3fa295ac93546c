"""Gorila: DQN bundles pushing gradients to a parameter server (round-robin and threads)."""

import jax
import numpy as np
import pytest

from jaxrl_par.algos import gorila
from jaxrl_par.parallel.async_workers import AsyncWorkers
from jaxrl_par.runner import checkpoints
from jaxrl_par.runner.evaluation import greedy_returns
from jaxrl_par.runner.training import train

# 3 bundles x 2 envs x 4 steps = 24 env steps per update; 3 warm-up updates (a bundle
# holds 24 transitions at its first gradient, of batch 16), 12 updates in all.
TINY = {"num_workers": 3, "num_envs": 2, "num_steps": 4, "total_timesteps": 24 * 12,
        "learning_starts": 24 * 4, "batch_size": 16, "buffer_size": 64,
        "hidden_sizes": (8,), "target_update_period": 5}


def _leaves(tree):
    return [np.asarray(jax.random.key_data(x) if checkpoints.is_key(x) else x)
            for x in jax.tree.leaves(tree)]


@pytest.mark.xla_optimized
def test_gorila_solves_cartpole():
    """DQN's test recipe (n-step 3, learning from 1e3 steps, epsilon decayed over 20% of
    1e5 steps) over 4 bundles in round-robin order, each push 3 stale: the greedy return
    of the server's final parameters is >= 475 (seed 0; seeds 0-3 gave 500, 500, 448,
    500)."""
    cfg = gorila.Config(total_timesteps=100_000, learning_starts=1_000, buffer_size=12_500,
                        exploration_fraction=0.2, n_step=3)
    algo = gorila.make(cfg)
    result = train(algo, [0], num_chunks=5, progress=False)
    greedy = greedy_returns(algo, result.state)[0]
    assert greedy >= 475, (greedy, result.final_returns()[0])


def _simulated(num_workers: int, updates: int, warmup: int, sync: int):
    """Each update's pushes' staleness, from the rules: round-robin pushes after
    ``warmup`` updates without any; a bundle re-pulls after its push once the server is
    ``sync`` pushes past its copy."""
    version, copies, rows = 0, [0] * num_workers, []
    for u in range(updates):
        if u < warmup:
            rows.append([0.0] * num_workers)
            continue
        row = []
        for k in range(num_workers):
            row.append(version - copies[k])
            version += 1
            if version - copies[k] >= sync:
                copies[k] = version
        rows.append(row)
    return np.asarray(rows, np.float32)


@pytest.mark.parametrize("sync", [1, 4])
def test_warmup_sync_and_staleness_follow_the_rules(sync):
    """No push before learning_starts, then K per update; staleness (mean and max per
    update) as the rules simulate it, for re-pulls after every push and after 4."""
    cfg = gorila.Config(**TINY, actor_sync_period=sync)
    assert cfg.warmup_updates == 3
    result = train(gorila.make(cfg), 0, progress=False, num_chunks=1)
    expected = _simulated(3, cfg.num_updates, cfg.warmup_updates, sync)
    np.testing.assert_allclose(result.metrics["staleness"][0], expected.mean(axis=1))
    np.testing.assert_array_equal(result.metrics["max_staleness"][0], expected.max(axis=1))
    assert int(result.state.server.version[0]) == 3 * (cfg.num_updates - 3)
    assert np.all(result.metrics["loss"][0, :3] == 0) and np.all(result.metrics["loss"][0, 3:] > 0)
    # every bundle stored every step it acted (its own replay)
    np.testing.assert_array_equal(result.state.workers.buffer.size[0], [64] * 3)


def test_the_server_updates_the_target_every_period():
    """tau=1: the target equals the parameters right after a multiple of the period, and
    stays the initial parameters while no period has passed."""
    cfg = gorila.Config(**{**TINY, "target_update_period": 1})
    state = train(gorila.make(cfg), 0, progress=False, num_chunks=1).state.server
    for a, b in zip(jax.tree.leaves(state.params),
                    jax.tree.leaves(state.target_params), strict=True):
        np.testing.assert_array_equal(a, b)
    cfg = gorila.Config(**{**TINY, "target_update_period": 1000})
    algo = gorila.make(cfg)
    first = algo.init(jax.random.key(0)).server.params
    state = train(algo, 0, progress=False, num_chunks=1).state.server
    for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(state.target_params), strict=True):
        np.testing.assert_array_equal(a, np.asarray(b)[0])


def test_the_runtime_equals_the_scan_across_the_warmup():
    """In the round-robin order the threaded runtime's parts (its warm-up program
    included, in chunks of 2 updates that cross the end of the warm-up) give the
    scanned run's state bit for bit."""
    algo = gorila.make(gorila.Config(**TINY))
    scanned = train(algo, [0, 1], progress=False, num_chunks=6)
    runtime = AsyncWorkers(algo, schedule="round_robin")
    ran = train(algo, [0, 1], progress=False, num_chunks=6, async_workers=runtime)
    for a, b in zip(_leaves(scanned.state), _leaves(ran.state), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(ran.metrics["loss"], scanned.metrics["loss"], rtol=1e-5)
    np.testing.assert_array_equal(ran.metrics["staleness"], scanned.metrics["staleness"])
    threaded = train(algo, [0, 1], progress=False, num_chunks=6, async_workers=True)
    assert int(threaded.state.server.version[0]) == 3 * (algo.num_updates - 3)


@pytest.mark.parametrize("changes,message", [
    ({"learning_starts": 48}, "set learning_starts >= 49"),
    ({"env": "Pendulum-v1"}, "continuous actions"),
    ({"actor_sync_period": 0}, "actor_sync_period must be > 0"),
])
def test_config_errors_name_the_fix(changes, message):
    with pytest.raises(ValueError, match=message):
        gorila.make(gorila.Config(**{**TINY, **changes}))
