"""The grouped subprocess vector env (jaxrl_par.envs.grouped): its groups, the same
trajectories as gymnasium's SyncVectorEnv for the same actions, and a worker's failure
as one error."""

import gymnasium as gym
import numpy as np
import pytest

from jaxrl_par.envs import grouped, host


class Breaks(gym.Env):
    """Steps once, then raises: a simulator that fails inside a worker."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t > 1:
            raise RuntimeError("the simulator broke")
        return np.zeros(1, np.float32), 0.0, False, False, {}


gym.register("jaxrl_par_grouped/Breaks-v0", entry_point=Breaks)


def test_groups_are_consecutive_and_differ_by_at_most_one_env():
    assert grouped.group_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert grouped.group_bounds(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert grouped.group_bounds(3, 1) == [(0, 3)]
    assert grouped.default_groups(1) == 1
    with pytest.raises(ValueError, match="groups=5"):
        grouped.GroupedVecEnv("CartPole-v1", 4, groups=5)


def _trajectory(env_id, vector_env, num_envs, steps, seed=3):
    envs = host.HostVecEnv(env_id, num_envs, seed, vector_env)
    rng = np.random.default_rng(0)
    out = [envs.obs.copy()]
    try:
        for _ in range(steps):
            if envs.spec.discrete:
                actions = rng.integers(0, 2, num_envs)
            else:
                actions = rng.uniform(-2, 2, (num_envs, 1)).astype(np.float32)
            step = envs.step(actions)
            out.append(envs.obs.copy())
            out.extend(step[k] for k in ("reward", "terminated", "truncated", "final_obs",
                                          "episode_return", "episode_length"))
    finally:
        envs.close()
    return out


@pytest.mark.parametrize(("env_id", "steps"), [("gymnasium:CartPole-v1", 120),
                                               ("gymnasium:Pendulum-v1", 205)])
def test_grouped_envs_step_as_gymnasiums_sync_vector_env(env_id, steps):
    # 7 envs in 2 groups (4 + 3); CartPole's random episodes end within 120 steps and
    # Pendulum's are truncated at 200: resets, final observations and episode records
    # cross the process boundary.
    sync = _trajectory(env_id, "sync", 7, steps)
    got = _trajectory(env_id, "grouped", 7, steps)
    ended = sync[3::7] + sync[4::7]  # each step's terminated and truncated
    assert any(np.any(x) for x in ended)
    assert len(got) == len(sync)
    for a, b in zip(sync, got, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_failing_worker_is_one_error_naming_the_env():
    envs = host.HostVecEnv("gymnasium:jaxrl_par_grouped/Breaks-v0", 2, 0, "grouped")
    try:
        envs.step(np.zeros(2, np.int64))
        with pytest.raises(RuntimeError, match="jaxrl_par_grouped/Breaks-v0.*failed") as e:
            envs.step(np.zeros(2, np.int64))
        assert "the simulator broke" in str(e.value)
    finally:
        envs.close()
