"""Greedy evaluation (jaxrl_par.evaluate): per-seed returns of first episodes, one compile."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par import envs
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.evaluate import _evaluator, greedy_returns


def fixed_policy(env_id, act):
    """An Algorithm that only acts: ``act(state, obs, key)``."""
    return Algorithm(config=types.SimpleNamespace(env=env_id), init=None, update=None,
                     num_updates=1, env_steps_per_update=1, act=act)


def sign_policy(state, obs, key):
    """Action 1 where ``obs * state['flip'] > 0``: +1 reward on ProbeObsAction with flip 1,
    -1 with flip -1."""
    return (obs[:, 0] * state["flip"] > 0).astype(jnp.int32)


def test_each_seed_is_evaluated_with_its_own_state_and_compiled_once():
    algo = fixed_policy("ProbeObsAction-v0", sign_policy)
    states = {"flip": jnp.array([1.0, -1.0, 1.0])}  # [S=3]
    np.testing.assert_array_equal(greedy_returns(algo, states, num_envs=16, max_steps=5),
                                  [1.0, -1.0, 1.0])
    run = _evaluator(algo.act, "ProbeObsAction-v0", 16, 5)
    assert run._cache_size() == 1
    other = {"flip": jnp.array([-1.0, -1.0, 1.0])}  # other states: the same program
    np.testing.assert_array_equal(greedy_returns(algo, other, num_envs=16, max_steps=5),
                                  [-1.0, -1.0, 1.0])
    assert run._cache_size() == 1


def test_only_the_first_episode_of_each_env_counts():
    algo = fixed_policy("ProbeTimeLimit-v0", lambda state, obs, key: jnp.zeros(len(obs), jnp.int32))
    limit = envs.make("ProbeTimeLimit-v0", 1).params.max_steps_in_episode
    states = {"unused": jnp.zeros(2)}
    # +1 per step, truncated at the limit: the first episode returns exactly `limit`,
    # also when two more episodes are played after it.
    np.testing.assert_array_equal(greedy_returns(algo, states), [limit, limit])
    np.testing.assert_array_equal(greedy_returns(algo, states, max_steps=3 * limit), [limit] * 2)
    with pytest.raises(ValueError, match="still running after max_steps"):
        greedy_returns(algo, states, max_steps=limit - 1)


def test_errors_name_the_fix():
    algo = fixed_policy("ProbeObsAction-v0", sign_policy)
    with pytest.raises(ValueError, match="leading seed axis"):
        greedy_returns(algo, {"flip": jnp.float32(1.0)})
    with pytest.raises(ValueError, match="no act"):
        greedy_returns(algo._replace(act=None), {"flip": jnp.ones(1)})
