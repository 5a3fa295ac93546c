import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

from jaxrl_par import envs


def _keys(seed, n):
    return jax.random.split(jax.random.key(seed), n)


def test_list_envs_has_gymnax_and_probes():
    ids = envs.list_envs()
    for env_id in ["CartPole-v1", "Breakout-MinAtar", "Pendulum-v1", "ProbeTimeLimit-v0"]:
        assert env_id in ids


NEEDS_DOWNLOAD = {"MNISTBandit-bsuite"}  # gymnax fetches MNIST when the env is built


@pytest.mark.parametrize("env_id", sorted(set(envs.list_envs()) - NEEDS_DOWNLOAD))
def test_every_env_builds_resets_and_steps_inside_a_trace(env_id):
    """Algorithms make their envs inside traced code (``init``, ``update``). Traced
    abstractly (nothing compiles): make, reset, one step with a valid action. Some
    gymnax constructors branch on arrays in Python: FourRooms-misc and MetaMaze-misc
    failed here."""
    def run(key):
        env = envs.make(env_id, 2)
        state = env.reset(_keys(0, 2))
        if env.discrete:
            action = jnp.zeros((2,), jnp.int32)
        else:
            action = jnp.broadcast_to(env.action_bounds[0], (2,) + env.action_shape)
        state, ts = env.step(jax.random.split(key, 2), state, action)
        return state.obs, ts.reward

    obs, reward = jax.eval_shape(run, jax.random.key(1))
    spec = envs.make(env_id, 2)
    assert obs.shape == (2,) + spec.observation_shape and reward.shape == (2,)


def test_unknown_id_lists_closest():
    with pytest.raises(ValueError, match="closest known ids: CartPole-v1"):
        envs.make("cartpole-v0")


def test_env_params_override_and_error():
    env = envs.make("CartPole-v1", 2, max_steps_in_episode=7)
    assert env.params.max_steps_in_episode == 7
    with pytest.raises(ValueError, match="valid:.*max_steps_in_episode"):
        envs.make("CartPole-v1", 2, max_stepz=7)


def test_spaces():
    cp = envs.make("CartPole-v1", 3)
    assert cp.discrete and cp.num_actions == 2 and cp.observation_shape == (4,)
    pend = envs.make("Pendulum-v1", 3)
    assert not pend.discrete and pend.action_shape == (1,)
    low, high = pend.action_bounds
    np.testing.assert_allclose(low, [-2.0])
    np.testing.assert_allclose(high, [2.0])
    assert envs.make("Breakout-MinAtar", 1).observation_shape == (10, 10, 4)


def test_truncation_is_not_termination_and_bootstraps_from_final_obs():
    # ProbeDiscount: obs is the time step; episode terminates after 2 steps.
    # With a time limit of 1 the episode is truncated at t=1 instead.
    env = envs.make("ProbeDiscount-v0", 2, max_steps_in_episode=1)
    state = env.reset(_keys(0, 2))
    np.testing.assert_array_equal(state.obs, [[0.0], [0.0]])
    state, ts = env.step(_keys(1, 2), state, jnp.zeros(2, jnp.int32))
    np.testing.assert_array_equal(ts.truncated, [True, True])
    np.testing.assert_array_equal(ts.terminated, [False, False])
    # The step reached obs 1 (final_obs); the auto-reset returns obs 0 to act on next.
    np.testing.assert_array_equal(ts.final_obs, [[1.0], [1.0]])
    np.testing.assert_array_equal(ts.obs, [[0.0], [0.0]])
    np.testing.assert_array_equal(ts.episode_length, [1, 1])


def test_termination_wins_over_time_limit():
    # Terminates after 2 steps and the limit is also 2: terminated, not truncated.
    env = envs.make("ProbeDiscount-v0", 1, max_steps_in_episode=2)
    state = env.reset(_keys(0, 1))
    for i in range(2):
        state, ts = env.step(_keys(i + 1, 1), state, jnp.zeros(1, jnp.int32))
    assert bool(ts.terminated[0]) and not bool(ts.truncated[0])
    assert float(ts.episode_return[0]) == 1.0  # reward +1 at the 2nd step


def test_auto_reset_and_episode_statistics():
    # ProbeTimeLimit: +1 per step, truncated at 10 steps, never terminates.
    env = envs.make("ProbeTimeLimit-v0", 3)
    state = env.reset(_keys(0, 3))
    step = jax.jit(env.step)
    finished = []
    for i in range(25):
        state, ts = step(_keys(i + 1, 3), state, jnp.zeros(3, jnp.int32))
        assert not bool(ts.terminated.any())
        if bool(ts.truncated.any()):
            finished.append((i, np.asarray(ts.episode_return), np.asarray(ts.episode_length)))
            m = envs.episode_metrics(ts)
            assert float(m["num_episodes"]) == 3.0
            assert float(m["episode_return"]) == 10.0
    assert [f[0] for f in finished] == [9, 19]
    for _, ret, length in finished:
        np.testing.assert_array_equal(ret, [10.0, 10.0, 10.0])
        np.testing.assert_array_equal(length, [10, 10, 10])
    # Running counters restarted after the auto-reset: 5 steps into the third episode.
    np.testing.assert_array_equal(state.episode_length, [5, 5, 5])
    np.testing.assert_array_equal(state.episode_return, [5.0, 5.0, 5.0])


def test_cartpole_matches_gymnax_step():
    import gymnax

    genv, gparams = gymnax.make("CartPole-v1")
    env = envs.make("CartPole-v1", 1)
    key = jax.random.key(3)
    obs_g, st_g = genv.reset(key, gparams)
    state = env.reset(key[None])
    np.testing.assert_allclose(state.obs[0], obs_g)
    for i in range(40):
        k = jax.random.key(100 + i)
        a = i % 2
        obs_g, st_g, r_g, term_g, _trunc_g, info = genv.step(k, st_g, a, gparams)
        state, ts = env.step(k[None], state, jnp.array([a]))
        np.testing.assert_allclose(ts.obs[0], obs_g, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ts.final_obs[0], info["final_observation"], rtol=1e-5, atol=1e-6)
        assert float(ts.reward[0]) == float(r_g)
        assert bool(ts.terminated[0]) == bool(term_g)


def test_episode_metrics_nan_when_no_episode_finished():
    env = envs.make("ProbeTimeLimit-v0", 2)
    state = env.reset(_keys(0, 2))
    _, ts = env.step(_keys(1, 2), state, jnp.zeros(2, jnp.int32))
    m = envs.episode_metrics(ts)
    assert np.isnan(float(m["episode_return"])) and float(m["num_episodes"]) == 0.0


@pytest.mark.parametrize("env_id", ["Breakout-MinAtar", "SpaceInvaders-MinAtar"])
def test_minatar_observations_are_bytes_with_gymnax_values(env_id):
    # MinAtar grids are 0/1; the env hands them over as uint8 (a quarter of float32's
    # bytes in rollouts and replay). Same keys and actions through a float32 copy of the
    # env: every obs and final_obs equal, and the episodes are the same.
    env = envs.make(env_id, 4)
    assert env.observation_dtype == jnp.uint8
    assert envs.make("CartPole-v1").observation_dtype == jnp.float32
    as_float = dataclasses.replace(env, obs_dtype="float32")

    @jax.jit
    def play(key):
        def run(e):
            def step(state, k):
                k_act, k_step = jax.random.split(k)
                action = jax.random.randint(k_act, (4,), 0, e.num_actions)
                state, ts = e.step(jax.random.split(k_step, 4), state, action)
                return state, (ts.obs, ts.final_obs, ts.reward, ts.terminated)
            state = e.reset(jax.random.split(key, 4))
            return state.obs, jax.lax.scan(step, state, jax.random.split(key, 200))[1]
        return run(env), run(as_float)

    (obs0, steps), (obs0_f, steps_f) = play(jax.random.key(0))
    assert obs0.dtype == steps[0].dtype == steps[1].dtype == jnp.uint8
    np.testing.assert_array_equal(np.asarray(obs0, np.float32), obs0_f)
    for got, want in zip(steps, steps_f, strict=True):
        np.testing.assert_array_equal(np.asarray(got, np.float32), want)
    assert np.asarray(steps[3]).any()  # some episodes ended (resets are covered)


def _trajectory(env, steps=60, seed=0):
    """``steps`` random-action steps of ``env``, compiled; every timestep stacked."""
    def run(key):
        k_reset, k_steps = jax.random.split(key)
        state = env.reset(jax.random.split(k_reset, env.num_envs))

        def step(state, ks):
            action = jax.random.randint(ks[0], (env.num_envs,), 0, env.num_actions)
            return env.step(jax.random.split(ks[1], env.num_envs), state, action)

        return jax.lax.scan(step, state, jax.random.split(k_steps, (steps, 2)))[1]

    return jax.jit(run)(jax.random.key(seed))


@pytest.mark.parametrize("env_id, steps", [("CartPole-v1", 200), ("MountainCar-v0", 420)])
def test_steps_equal_gymnax_own_auto_resetting_step(env_id, steps):
    """Each copy steps and resets exactly as gymnax's ``Environment.step`` does with the
    same key (the same split into step and reset keys): observations (to float rounding:
    the two programs fuse differently), rewards and flags, across many resets."""
    env = envs.make(env_id, 16)
    ours = _trajectory(env, steps=steps)
    inner, params = env.env, env.params

    def gymnax_run(key):
        k_reset, k_steps = jax.random.split(key)
        obs, state = jax.vmap(inner.reset, in_axes=(0, None))(
            jax.random.split(k_reset, env.num_envs), params)

        def step(state, ks):
            action = jax.random.randint(ks[0], (env.num_envs,), 0, env.num_actions)
            obs, state, reward, terminated, truncated, _ = jax.vmap(
                inner.step, in_axes=(0, 0, 0, None))(
                jax.random.split(ks[1], env.num_envs), state, action, params)
            return state, (obs, reward, terminated, truncated & ~terminated)

        return jax.lax.scan(step, state, jax.random.split(k_steps, (steps, 2)))[1]

    obs, reward, terminated, truncated = jax.jit(gymnax_run)(jax.random.key(0))
    assert int(ours.terminated.sum() + ours.truncated.sum()) >= env.num_envs  # resets
    np.testing.assert_allclose(np.asarray(ours.obs), np.asarray(obs), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(ours.reward), np.asarray(reward))
    np.testing.assert_array_equal(np.asarray(ours.terminated), np.asarray(terminated))
    np.testing.assert_array_equal(np.asarray(ours.truncated), np.asarray(truncated))


@struct.dataclass
class _KeyState(environment.EnvState):
    key: jax.Array
    time: jax.Array

class _KeepsKey(environment.Environment):
    @property
    def default_params(self):
        return environment.EnvParams(max_steps_in_episode=3)

    def reset_env(self, key, params):
        state = _KeyState(key=key, time=jnp.int32(0))
        return jax.random.uniform(key, (2,)), state

    def step_env(self, key, state, action, params):
        k_next, k_obs = jax.random.split(state.key)
        state = _KeyState(key=k_next, time=state.time + 1)
        return jax.random.uniform(k_obs, (2,)), state, jnp.float32(1.0), jnp.bool_(False), {}

    def is_terminal(self, state, params):
        return state.time >= 3

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (2,), jnp.float32)


def test_an_env_that_keeps_its_reset_key():
    """An env that keeps its reset key in its state steps and resets (the state's key
    dtype is the same after a reset as after a step)."""
    n = 8
    env = envs.core.VecEnv("KeepsKey", _KeepsKey(), _KeepsKey().default_params, n)
    out = _trajectory(env, steps=8)
    assert bool(out.truncated[2].all()) and not bool(out.truncated[3].any())
    assert float(out.obs.min()) >= 0.0 and float(out.obs.max()) < 1.0


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Breakout-MinAtar", "KeepsKey"])
def test_rollout_with_draws_ahead_equals_drawing_each_step(env_id, monkeypatch):
    """A rollout that draws its steps' keys and resets ahead (one batched draw) gives
    exactly what it gives when each step draws its own, and ``step`` is ``step_drawn``
    of ``draw_steps`` (the same values, bit for bit)."""
    from jaxrl_par.blocks import rollouts
    from jaxrl_par.networks import Categorical

    if env_id == "KeepsKey":  # a reset key in the env's state: a key leaf in the draws
        env = envs.core.VecEnv("KeepsKey", _KeepsKey(), _KeepsKey().default_params, 4)
    else:
        env = envs.make(env_id, 4)
    state = env.reset(jax.random.split(jax.random.key(1), env.num_envs))

    def actor(obs):
        first = obs.reshape(obs.shape[0], -1)[:, :1].astype(jnp.float32)
        return Categorical(first * jnp.arange(env.num_actions))

    def run(ahead):
        monkeypatch.setattr(rollouts, "DRAW_AHEAD_BYTES", 2**30 if ahead else -1)
        return jax.jit(lambda s, k: rollouts.policy_rollout(env, actor, s, k, 4, 24))(
            state, jax.random.key(2))

    ahead, each = run(True), run(False)
    for a, b in zip(jax.tree.leaves(ahead), jax.tree.leaves(each), strict=True):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert int(ahead[1][3].done.sum()) > 0 or env_id == "Breakout-MinAtar"


def test_step_takes_raw_uint32_keys_as_typed_keys():
    """``jax.random.PRNGKey``'s raw ``uint32 [N, 2]`` keys step the envs exactly as the
    typed keys holding the same bits."""
    env = envs.make("CartPole-v1", 4)
    state = env.reset(_keys(0, 4))
    typed = _keys(1, 4)
    action = jnp.array([0, 1, 0, 1])
    a = env.step(typed, state, action)
    b = env.step(jax.random.key_data(typed), state, action)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
