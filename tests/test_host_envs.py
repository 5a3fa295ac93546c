"""Host envs (gymnasium, stepped from Python) under A3C's threaded workers."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par.algos import a3c
from jaxrl_par.envs import host
from jaxrl_par.parallel.async_workers import AsyncWorkers
from jaxrl_par.runner import checkpoints
from jaxrl_par.runner.evaluation import greedy_returns
from jaxrl_par.runner.training import train


class Count(gym.Env):
    """obs = [t] (steps taken this episode), reward t + 1; terminates after 3 steps when
    ``terminate``, else only gymnasium's time limit ends it (truncation)."""

    def __init__(self, terminate: bool = False):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.terminate, self.t = terminate, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return (np.array([self.t], np.float32), float(self.t), self.terminate and self.t == 3,
                False, {})


class ObsAction(gym.Env):
    """obs = +-1 at random; reward 1 when the action is 1 for +1 and 0 for -1; one-step
    episodes (terminated)."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def _draw(self):
        self.sign = self.np_random.choice([-1.0, 1.0])
        return np.array([self.sign], np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self._draw(), {}

    def step(self, action):
        reward = float(int(action) == (1 if self.sign > 0 else 0))
        return self._draw(), reward, True, False, {}


class Constant(gym.Env):
    """obs [0], reward 1, never terminates: only the time limit truncates it."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 1.0, False, False, {}


gym.register("jaxrl_par_test/Count-v0", entry_point=Count, max_episode_steps=4)
gym.register("jaxrl_par_test/CountTerminal-v0", entry_point=Count,
             kwargs={"terminate": True}, max_episode_steps=10)
gym.register("jaxrl_par_test/Constant-v0", entry_point=Constant, max_episode_steps=5)
gym.register("jaxrl_par_test/ObsAction-v0", entry_point=ObsAction)

PROBE = {"num_workers": 2, "num_envs": 4, "num_steps": 8, "learning_rate": 3e-3,
         "hidden_sizes": (16,)}


def test_host_envs_auto_reset_and_keep_final_observations():
    """Truncation at the time limit (4) and termination (after 3) are told apart, the
    step that ends an episode reports its final observation, return and length, and the
    env observes its reset observation next."""
    env = host.HostVecEnv("gymnasium:jaxrl_par_test/Count-v0", 1, seed=0)
    outs = [env.step(np.array([0])) for _ in range(5)]
    assert [bool(o["truncated"][0]) for o in outs] == [False, False, False, True, False]
    assert not any(o["terminated"][0] for o in outs)
    assert outs[3]["final_obs"][0, 0] == 4.0 and env.obs is not None
    assert outs[3]["episode_return"][0] == 1 + 2 + 3 + 4 and outs[3]["episode_length"][0] == 4
    assert outs[4]["final_obs"][0, 0] == 1.0  # the next episode's first step
    env = host.HostVecEnv("gymnasium:jaxrl_par_test/CountTerminal-v0", 2, seed=0)
    outs = [env.step(np.array([0, 1])) for _ in range(3)]
    assert outs[2]["terminated"].all() and not outs[2]["truncated"].any()
    np.testing.assert_array_equal(env.obs, [[0.0], [0.0]])


def test_spec_and_errors():
    spec = host.spec("gymnasium:CartPole-v1")
    assert spec.discrete and spec.num_actions == 2 and spec.observation_shape == (4,)
    spec = host.spec("gymnasium:Pendulum-v1")
    assert not spec.discrete and spec.num_actions == 1
    np.testing.assert_array_equal(spec.action_bounds[1], [2.0])
    with pytest.raises(ValueError, match="closest gymnasium ids: CartPole-v1"):
        a3c.Config(env="gymnasium:CartPole-v9")
    from jaxrl_par.algos import impala

    with pytest.raises(ValueError, match="a3c or gorila with async_workers"):
        impala.make(impala.Config(env="gymnasium:CartPole-v1")).update(None)


def test_a3c_on_host_envs_needs_the_threaded_runtime():
    algo = a3c.make(a3c.Config(env="gymnasium:CartPole-v1", total_timesteps=2048))
    with pytest.raises(ValueError, match="--async-workers"):
        train(algo, 0, progress=False)


@pytest.mark.parametrize("bootstrap_truncation,expected", [(True, 2.0), (False, 1.62437)])
def test_host_value_probe_bootstraps_truncation(bootstrap_truncation, expected):
    """Constant reward 1, truncated every 5 steps by gymnasium's time limit: the value is
    1 / (1 - gamma) = 2 only if the workers bootstrap truncated episodes from their
    final observations. Counted as terminal, the target is the discounted sum of ones to
    the episode's end, or to the 8-step unroll's end plus 0.5^n V: over the 40-step
    cycle V = 1.5 + 0.07656 V, 1.62437."""
    cfg = a3c.Config(env="gymnasium:jaxrl_par_test/Constant-v0", gamma=0.5,
                     total_timesteps=12_800, bootstrap_truncation=bootstrap_truncation,
                     **PROBE)
    result = train(a3c.make(cfg), 0, progress=False, num_chunks=1,
                   async_workers=AsyncWorkers(a3c.make(cfg), schedule="round_robin"))
    network = cfg.actor_critic(host.spec(cfg.env))
    _, value = network.apply(jax.tree.map(lambda x: x[0], result.state.server.params),
                             jnp.zeros((1, 1)))
    np.testing.assert_allclose(value, [expected], atol=0.05)


def test_host_policy_probe_and_greedy_evaluation():
    """ObsAction on the host: the worker threads record the actions they send to the
    envs and learn from them, so the policy follows the observation's sign (greedy
    return 1 in every evaluation episode), and the staleness of 2 workers is measured."""
    cfg = a3c.Config(env="gymnasium:jaxrl_par_test/ObsAction-v0", total_timesteps=12_800,
                     **PROBE)
    algo = a3c.make(cfg)
    result = train(algo, [0, 1], progress=False, num_chunks=2, async_workers=True)
    np.testing.assert_array_equal(greedy_returns(algo, result.state, num_envs=8), [1.0, 1.0])
    network = cfg.actor_critic(host.spec(cfg.env))
    dist, _ = network.apply(jax.tree.map(lambda x: x[0], result.state.server.params),
                            jnp.array([[-1.0], [1.0]]))
    probs = np.asarray(jax.nn.softmax(dist.logits))
    assert probs[0, 0] > 0.95 and probs[1, 1] > 0.95, probs
    assert np.mean(result.metrics["staleness"]) > 0


def test_round_robin_on_host_envs_is_reproducible():
    """Seeded gymnasium envs in the fixed order: two runs give the same state, bit for
    bit, and a different seed another."""
    algo = a3c.make(a3c.Config(env="gymnasium:CartPole-v1", total_timesteps=2 * 4 * 8 * 6,
                               **{**PROBE, "hidden_sizes": (8,)}))
    runs = [train(algo, seeds, progress=False, num_chunks=2,
                  async_workers=AsyncWorkers(algo, schedule="round_robin"))
            for seeds in ([0], [0], [1])]
    def leaves(r):
        return [np.asarray(jax.random.key_data(x) if checkpoints.is_key(x) else x)
                            for x in jax.tree.leaves(r.state)]
    for a, b in zip(leaves(runs[0]), leaves(runs[1]), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(leaves(runs[0]),
                                                        leaves(runs[2]), strict=True))


GORILA_PROBE = {"num_workers": 2, "num_envs": 4, "num_steps": 4, "total_timesteps": 6_400,
                "learning_starts": 161, "batch_size": 32, "buffer_size": 2_000,
                "learning_rate": 3e-3, "hidden_sizes": (16,), "target_update_period": 10,
                "exploration_fraction": 0.3}


@pytest.mark.xla_optimized
def test_gorila_on_host_envs_warms_up_then_learns_the_policy_probe():
    """Gorila's bundles on host envs: the warm-up updates (5 here, in the first chunk of 4
    and the second) store without pushing, then the bundles learn ObsAction from their
    own replays: greedy return 1 in every evaluation episode."""
    from jaxrl_par.algos import gorila

    cfg = gorila.Config(env="gymnasium:jaxrl_par_test/ObsAction-v0", **GORILA_PROBE)
    assert cfg.warmup_updates == 5
    algo = gorila.make(cfg)
    result = train(algo, [0, 1], progress=False, num_chunks=cfg.num_updates // 4,
                   async_workers=True)
    loss = result.metrics["loss"]
    # Warm-up updates push nothing (loss 0); the first pushes after it have a loss. Later
    # ones may reach exactly 0 once Q matches ObsAction's +-1 targets to float32 rounding.
    assert np.all(loss[:, :5] == 0) and np.all(loss[:, 5:10] > 0)
    assert int(result.state.server.version[0]) == 2 * (cfg.num_updates - 5)
    np.testing.assert_array_equal(greedy_returns(algo, result.state, num_envs=8), [1.0, 1.0])


@pytest.mark.xla_optimized
def test_impala_actors_on_host_envs_beside_the_learner():
    """IMPALA's actors step host envs in Python while the learner's program runs (the
    actor-learner runtime, Sebulba's layout): ObsAction is learned (greedy return 1),
    the pipelined policy lag is measured as with JAX envs, and a second run gives the
    same state bit for bit (the schedule is fixed by data, not timing)."""
    from jaxrl_par.algos import impala

    cfg = impala.Config(env="gymnasium:jaxrl_par_test/ObsAction-v0", num_envs=8,
                        num_steps=8, total_timesteps=12_800, learning_rate=3e-3,
                        hidden_sizes=(16,), ent_coef=0.0)
    algo = impala.make(cfg)
    runs = [train(algo, [0, 1], progress=False, num_chunks=2, actor_learner=True)
            for _ in range(2)]
    np.testing.assert_array_equal(greedy_returns(algo, runs[0].state, num_envs=8), [1.0, 1.0])
    # the first update learns init's batch (acted at version 0), each later one the batch
    # acted a full update (2 learner steps) earlier: as with JAX envs (test_impala.py)
    lags = runs[0].metrics["policy_lag"][0]
    np.testing.assert_array_equal(lags, [0.5] + [2.5] * (len(lags) - 1))
    def leaves(r):
        return [np.asarray(jax.random.key_data(x) if checkpoints.is_key(x) else x)
                            for x in jax.tree.leaves(r.state)]
    for a, b in zip(leaves(runs[0]), leaves(runs[1]), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="--actor-learner"):
        impala.Config(env="gymnasium:CartPole-v1", pipeline=False)
    with pytest.raises(ValueError, match="async_workers"):
        train(algo, 0, progress=False)
