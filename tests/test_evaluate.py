"""Greedy evaluation (jaxrl_par.runner.evaluation): per-seed returns of first episodes, one
compile."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dropped import HANDLERS, drop_signal

from jaxrl_par import envs
from jaxrl_par.algos.base import Algorithm
from jaxrl_par.runner import interrupt
from jaxrl_par.runner.evaluation import _evaluator, greedy_returns, lane_keys


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


@pytest.mark.parametrize("handler, raised", HANDLERS)
def test_a_stop_python_dropped_while_compiling_ends_the_evaluation(handler, raised):
    """A SIGTERM or Ctrl-C whose exception Python dropped during the evaluator's compile
    (inside a garbage-collection callback, as ``_xla_gc_callback``) is raised when the
    compile returns, not lost."""
    def act(state, obs, key):  # traced once, in the compile
        drop_signal(handler)
        return sign_policy(state, obs, key)

    with pytest.raises(raised):
        greedy_returns(fixed_policy("ProbeObsAction-v0", act), {"flip": jnp.ones(1)},
                       max_steps=2)
    interrupt.raise_pending()  # raised once: nothing is pending any more


def _leaves(tree):
    return [np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
                       else x) for x in jax.tree.leaves(tree)]


def test_evaluation_during_training_leaves_training_alone(tmp_path):
    """``train(..., eval_envs=N)``: greedy returns at every ``eval_every``-th chunk's last
    update and the last, NaN elsewhere; the final point is ``greedy_returns`` of the
    final state; the training itself is the same bits as without; a run resumed with
    evaluation turned on has NaN where the first part had none."""
    from killed import train_killed_after

    from jaxrl_par.algos import dqn
    from jaxrl_par.runner.training import train

    algo = dqn.make(dqn.Config(total_timesteps=1_200, learning_starts=300, batch_size=32,
                               buffer_size=1_000))  # 12 updates of 100 steps
    plain = train(algo, [0, 1], num_chunks=6, progress=False)
    evaluated = train(algo, [0, 1], num_chunks=6, progress=False, eval_envs=4, eval_every=4)
    for a, b in zip(_leaves(plain.state), _leaves(evaluated.state), strict=True):
        np.testing.assert_array_equal(a, b)
    greedy = evaluated.metrics["greedy_return"]  # chunks of 2 updates: 4th chunk and last
    assert greedy.shape == (2, 12)
    assert np.flatnonzero(~np.isnan(greedy[0])).tolist() == [7, 11]
    np.testing.assert_array_equal(greedy[:, -1],
                                  greedy_returns(algo, evaluated.state, num_envs=4))
    assert evaluated.eval_seconds > 0
    log_dir = str(tmp_path / "run")
    train_killed_after(4, algo, [0, 1], num_chunks=6, progress=False, log_dir=log_dir)
    resumed = train(algo, [0, 1], num_chunks=6, progress=False, log_dir=log_dir, resume=True,
                    eval_envs=4, eval_every=4)
    np.testing.assert_array_equal(resumed.metrics["greedy_return"], greedy)
    from jaxrl_par.runner.runs import read_metrics

    _, logged = read_metrics(log_dir)
    np.testing.assert_allclose(logged["greedy_return"], greedy, rtol=1e-6)
    assert logged["loss"].shape == (2, 12)


def test_evaluation_settings_are_checked_before_compiling():
    from jaxrl_par.algos import dqn
    from jaxrl_par.runner.training import train

    algo = dqn.make(dqn.Config(total_timesteps=1_200))
    with pytest.raises(ValueError, match="eval_every=0; give an int >= 1"):
        train(algo, 0, eval_envs=2, eval_every=0, progress=False)
    with pytest.raises(ValueError, match="eval_envs=-1; give an int >= 0"):
        train(algo, 0, eval_envs=-1, progress=False)
    with pytest.raises(ValueError, match="has none"):
        train(fixed_policy("CartPole-v1", None), 0, eval_envs=2, progress=False)


def test_seeds_and_envs_start_from_their_own_states():
    """Pushing left always, a CartPole episode lasts as long as its random start state
    allows (~9 steps): four identical states score differently only if each seed resets
    from its own start states, and a seed's envs differ among themselves too."""
    algo = fixed_policy("CartPole-v1", lambda state, obs, key: jnp.zeros(len(obs), jnp.int32))
    states = {"unused": jnp.zeros(4)}
    per_seed = greedy_returns(algo, states, num_envs=4)
    assert len(set(per_seed.tolist())) == 4
    one_env = greedy_returns(algo, {"unused": jnp.zeros(8)}, num_envs=1)
    assert len(set(one_env.tolist())) > 1
    # a lane's start states do not depend on how many lanes are evaluated with it
    np.testing.assert_array_equal(greedy_returns(algo, {"unused": jnp.zeros(2)}, num_envs=4),
                                  per_seed[:2])


def test_each_step_uses_the_documented_keys():
    """A random CartPole policy: the evaluation equals a loop written out step by step,
    where lane s resets from split(fold_in(key(seed), s)) and step t acts with k_act and
    steps the envs with split(k_env, N), (k_act, k_env) = split(split(k_run, T)[t]). The
    evaluation draws the env keys before its scan; a shifted or swapped draw fails this."""
    num_envs, max_steps = 4, 100

    def act(state, obs, key):
        return jax.random.bernoulli(key, 0.5, (len(obs),)).astype(jnp.int32)

    algo = fixed_policy("CartPole-v1", act)
    got = greedy_returns(algo, {"unused": jnp.zeros(2)}, num_envs=num_envs,
                         max_steps=max_steps, seed=3)
    env = envs.make("CartPole-v1", num_envs)
    step = jax.jit(env.step)
    want = []
    for lane_key in lane_keys(3, 2):
        k_reset, k_run = jax.random.split(lane_key)
        env_state = env.reset(jax.random.split(k_reset, num_envs))
        total, alive = np.zeros(num_envs), np.ones(num_envs, bool)
        for k in jax.random.split(k_run, max_steps):
            k_act, k_env = jax.random.split(k)
            action = act(None, env_state.obs, k_act)
            env_state, ts = step(jax.random.split(k_env, num_envs), env_state, action)
            total += np.asarray(ts.reward) * alive
            alive &= ~np.asarray(ts.done)
        assert not alive.any()
        want.append(total.mean())
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert len(set(got.tolist())) == 2


def test_spread_literal():
    from jaxrl_par.runner.evaluation import spread
    from jaxrl_par.runner.figures import spread_fields

    s = spread([1.0, 2.0, 3.0, float("nan")])  # the NaN seed finished no episode
    # mean 2, population std sqrt(2/3) = 0.8165; sample std 1, standard error 1/sqrt(3),
    # t(0.975, 2) = 4.3027: 2 -+ 4.3027 * 0.57735 = 2 -+ 2.4841
    assert (s.mean, s.count) == (2.0, 3)
    assert s.std == pytest.approx(0.81650, abs=1e-5)
    assert s.ci95 == pytest.approx((-0.48414, 4.48414), abs=1e-5)
    assert spread([5.0]).ci95 is None
    assert spread_fields("r", [float("nan")]) == {"r": None, "r_std": None, "r_ci95": None}
