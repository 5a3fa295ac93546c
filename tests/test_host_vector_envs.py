"""Host vector envs (gymnasium's Sync/AsyncVectorEnv) under the synchronous algorithms:
spaces, auto-reset and truncation against hand-computed targets, learning, sync = async."""

import functools

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par.algos import dqn, ppo
from jaxrl_par.algos.q_common import NStepCarry, init_nstep_carry, to_transitions
from jaxrl_par.envs import host
from jaxrl_par.losses.returns import gae_advantages
from jaxrl_par.parallel.host_loop import HostLoop
from jaxrl_par.runner import checkpoints
from jaxrl_par.runner.training import train


class Script(gym.Env):
    """obs = [t] (steps taken this episode), reward t (1, 2, ...) whatever the action;
    terminates at ``t == terminate_at`` (0: never; then gymnasium's time limit truncates)."""

    def __init__(self, terminate_at: int = 0):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.terminate_at, self.t = terminate_at, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return (np.array([self.t], np.float32), float(self.t), self.t == self.terminate_at,
                False, {})


class DictObs(Script):
    def __init__(self):
        super().__init__()
        self.observation_space = gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (1,))})


class MultiAction(Script):
    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.MultiDiscrete([2, 2])


gym.register("jaxrl_par_vec/Terminates-v0", entry_point=Script, kwargs={"terminate_at": 2},
             max_episode_steps=10)
gym.register("jaxrl_par_vec/Truncates-v0", entry_point=Script, max_episode_steps=3)
gym.register("jaxrl_par_vec/DictObs-v0", entry_point=DictObs)
gym.register("jaxrl_par_vec/MultiAction-v0", entry_point=MultiAction)

GAMMA = 0.5


def test_spaces_map_to_discrete_and_box_and_others_are_one_line_errors():
    spec = host.spec("gymnasium:CartPole-v1")
    assert (spec.discrete, spec.num_actions, spec.observation_shape, spec.action_shape) == (
        True, 2, (4,), ())
    spec = host.spec("gymnasium:Pendulum-v1")
    assert (spec.discrete, spec.num_actions, spec.action_shape) == (False, 1, (1,))
    np.testing.assert_array_equal(spec.action_bounds[0], [-2.0])
    for env_id, what in (("DictObs-v0", "observations must be a Box"),
                         ("MultiAction-v0", "actions must be Discrete or a 1-d Box")):
        with pytest.raises(ValueError, match=what) as e:
            ppo.make(ppo.Config(env=f"gymnasium:jaxrl_par_vec/{env_id}"))
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="choose from"):
        host.check_vector_env("threads")
    with pytest.raises(ValueError, match="steps on the device: drop it"):
        train(ppo.make(ppo.Config(env="CartPole-v1")), 0, progress=False, vector_env="sync")


@functools.cache
def _rollout(env_id: str, num_steps: int = 5, vector_env: str = "sync"):
    """The host loop's rollout ``[T]`` of one env of ``env_id`` (actions do not matter)."""
    cfg = ppo.Config(env=env_id, num_envs=1, num_steps=num_steps, num_minibatches=1,
                     total_timesteps=num_steps)
    loop = HostLoop(ppo.make(cfg), vector_env)
    state = jax.vmap(loop.algo.init)(jax.random.key(0)[None])
    loop.start(state)  # the envs; only act compiles
    try:
        traj = loop.rollout(state)
    finally:
        loop.close()
    return jax.tree.map(lambda x: np.asarray(x)[0, :, 0], traj)  # lane 0, env 0


@pytest.mark.parametrize("vector_env", ["sync", "async", "grouped"])
def test_same_step_autoreset_keeps_truncation_and_termination_apart(vector_env):
    """Gymnasium's vector envs in SAME_STEP mode: the step that ends an episode reports it
    and already observes the next episode's first observation; nothing is wasted on a
    reset step (NEXT_STEP mode would give a zero-reward step after each end)."""
    traj = _rollout("gymnasium:jaxrl_par_vec/Truncates-v0", vector_env=vector_env)
    ts = traj.timestep
    np.testing.assert_array_equal(traj.obs[:, 0], [0, 1, 2, 0, 1])  # acted on
    np.testing.assert_array_equal(ts.reward, [1, 2, 3, 1, 2])
    np.testing.assert_array_equal(ts.truncated, [0, 0, 1, 0, 0])
    np.testing.assert_array_equal(ts.terminated, [0, 0, 0, 0, 0])
    np.testing.assert_array_equal(ts.final_obs[:, 0], [1, 2, 3, 1, 2])  # reached
    np.testing.assert_array_equal(ts.obs[:, 0], [1, 2, 0, 1, 2])  # next, after reset
    np.testing.assert_array_equal(ts.episode_return, [0, 0, 1 + 2 + 3, 0, 0])
    np.testing.assert_array_equal(ts.episode_length, [0, 0, 3, 0, 0])
    traj = _rollout("gymnasium:jaxrl_par_vec/Terminates-v0", vector_env=vector_env)
    np.testing.assert_array_equal(traj.timestep.terminated, [0, 1, 0, 1, 0])
    np.testing.assert_array_equal(traj.timestep.truncated, [0, 0, 0, 0, 0])


def _gae_targets(traj):
    """lambda = 1 targets of V(s) = s[0], as PPO's learn computes them."""
    ts = traj.timestep
    value, bootstrap = jnp.asarray(traj.obs[:, 0]), jnp.asarray(ts.final_obs[:, 0])
    done = jnp.asarray(ts.truncated | ts.terminated)
    _, target = gae_advantages(jnp.asarray(ts.reward), value, bootstrap,
                               jnp.asarray(ts.terminated), done, GAMMA, 1.0)
    return np.asarray(target)


def test_gae_bootstraps_truncation_from_the_final_observation_not_termination():
    """V(s) = s[0], gamma 0.5, lambda 1, targets back from the rollout's end:

    truncated at t = 2 (rewards 1 2 3 | 1 2, final obs 3, then 2 at the rollout's end):
      t4 = 2 + .5 * 2 = 3;  t3 = 1 + .5 * 3 = 2.5
      t2 = 3 + .5 * V(final obs 3) = 4.5 (a terminal step would give 3)
      t1 = 2 + .5 * 4.5 = 4.25;  t0 = 1 + .5 * 4.25 = 3.125
    terminated at t = 1 and 3 (rewards 1 2 | 1 2 | 1, last final obs 1):
      t4 = 1 + .5 * 1 = 1.5;  t3 = 2;  t2 = 1 + .5 * 2 = 2;  t1 = 2;  t0 = 2
    """
    np.testing.assert_allclose(_gae_targets(_rollout("gymnasium:jaxrl_par_vec/Truncates-v0")),
                               [3.125, 4.25, 4.5, 2.5, 3.0])
    np.testing.assert_allclose(
        _gae_targets(_rollout("gymnasium:jaxrl_par_vec/Terminates-v0")),
        [2.0, 2.0, 2.0, 2.0, 1.5])


def _two_step(traj):
    """DQN's stored 2-step transitions of a host rollout (as its host learn builds them)."""
    ts = jax.tree.map(lambda x: jnp.asarray(x)[:, None], traj.timestep)
    obs, action = jnp.asarray(traj.obs)[:, None], jnp.asarray(traj.action)[:, None]
    steps = NStepCarry(obs, action, ts.reward, ts.terminated, ts.truncated, ts.obs,
                       ts.final_obs, jnp.ones_like(ts.terminated))
    _, tr = to_transitions(init_nstep_carry(2, 1, (1,)), steps, GAMMA, 2, jnp.int32(0))
    return jax.tree.map(np.asarray, tr)


def test_nstep_windows_bootstrap_truncation_and_stop_at_termination():
    """2-step windows, gamma 0.5. The first (t = 0) starts in the padding (mask 0), so
    window k starts at step k - 1.

    truncated at t = 2 (rewards 1 2 3 | 1 2):
      from t = 1: 2 + .5 * 3 = 3.5, discount .25, bootstrap obs 3 (the final obs)
      from t = 2: 3, discount .5 (cut by the truncation), bootstrap obs 3
      from t = 3: 1 + .5 * 2 = 2, discount .25, bootstrap obs 2
    terminated at t = 1 (rewards 1 2 | 1 2 | 1):
      from t = 0: 1 + .5 * 2 = 2, discount 0;  from t = 1: 2, discount 0
    """
    tr = _two_step(_rollout("gymnasium:jaxrl_par_vec/Truncates-v0"))
    np.testing.assert_array_equal(tr.mask, [0, 1, 1, 1, 1])
    np.testing.assert_allclose(tr.reward[2:], [3.5, 3.0, 2.0])
    np.testing.assert_allclose(tr.discount[2:], [0.25, 0.5, 0.25])
    np.testing.assert_array_equal(tr.next_obs[2:, 0], [3, 3, 2])
    tr = _two_step(_rollout("gymnasium:jaxrl_par_vec/Terminates-v0"))
    np.testing.assert_allclose(tr.reward[1:3], [2.0, 2.0])
    np.testing.assert_allclose(tr.discount[1:3], [0.0, 0.0])


def _leaves(result):
    return [np.asarray(jax.random.key_data(x) if checkpoints.is_key(x) else x)
            for x in jax.tree.leaves(result.state)]


def test_sync_and_async_vector_envs_give_the_same_run():
    """Seeded envs, the same actions: subprocesses or not, the same state bit for bit,
    and another seed another."""
    algo = ppo.make(ppo.Config(env="gymnasium:CartPole-v1", num_envs=4, num_steps=16,
                               num_minibatches=2, update_epochs=1, total_timesteps=4 * 16 * 3,
                               hidden_sizes=(8,)))
    runs = [train(algo, seed, progress=False, num_chunks=1, vector_env=mode)
            for seed, mode in ((0, "sync"), (0, "async"), (1, "sync"))]
    for a, b in zip(_leaves(runs[0]), _leaves(runs[1]), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b)
                   for a, b in zip(_leaves(runs[0]), _leaves(runs[2]), strict=True))


def test_ppo_learns_gymnasium_cartpole_on_host_envs():
    """40,960 steps of 8 envs: the mean return of the last tenth of the updates is well
    above a random policy's (about 22)."""
    cfg = ppo.Config(env="gymnasium:CartPole-v1", num_envs=8, total_timesteps=40_960,
                     learning_rate=1e-3)
    result = train(ppo.make(cfg), 0, progress=False, num_chunks=1, vector_env="sync")
    assert result.final_returns(0.1)[0] > 100, result.final_returns(0.1)


def test_dqn_learns_gymnasium_cartpole_on_host_envs():
    """20,000 steps: the mean return of the last tenth of the updates is well above a
    random policy's (about 22); the warm-up updates learn nothing."""
    cfg = dqn.Config(env="gymnasium:CartPole-v1", total_timesteps=20_000, learning_starts=2_000,
                     exploration_fraction=0.3, learning_rate=1e-3, target_update_period=20)
    result = train(dqn.make(cfg), 0, progress=False, num_chunks=1, vector_env="sync")
    assert np.all(result.metrics["loss"][0, :cfg.warmup_updates] == 0)
    assert result.final_returns(0.1)[0] > 60, result.final_returns(0.1)


def test_envpool_steps_as_same_step_autoreset():
    """EnvPool's reset step (its NEXT_STEP mode) is taken at once: each step returned is
    a real step (the lengths of the episodes that end add up to the steps taken), the
    step that ends one observes the next episode's start, and the final observation is
    where it fell (CartPole's pole angle past 12 degrees, 0.2095 rad)."""
    pytest.importorskip("envpool")
    env = host.make_vector("envpool:CartPole-v1", 3, seed=0)
    assert env.spec.discrete and env.spec.observation_shape == (4,)
    lengths, ended, steps = [], 0, 60
    for _ in range(steps):
        out = env.step(np.zeros(3, np.int64))  # always push left: falls in ~10 steps
        for i in np.flatnonzero(out["done"]):
            lengths.append(out["episode_length"][i])
            assert abs(out["final_obs"][i, 2]) > 0.2095
            assert abs(env.obs[i, 2]) <= 0.05  # a fresh start
            ended += 1
    assert ended >= 3 * (steps // 12) and out["terminated"].dtype == bool
    assert sum(lengths) + sum(env.episode_length) == 3 * steps
    env.close()


def test_envpool_absent_is_a_one_line_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "envpool", None)  # import envpool raises ImportError
    with pytest.raises(ValueError, match=r"pip install 'jaxrl_par\[envpool\]'") as e:
        ppo.Config(env="envpool:CartPole-v1")
    assert "\n" not in str(e.value)
