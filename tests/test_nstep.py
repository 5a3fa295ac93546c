"""n-step transitions against a plain Python loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par import replay


def python_nstep(reward, terminated, truncated, obs_t, final_obs, gamma, n):
    """Reference: one window at a time, as a textbook would write it."""
    T, B = reward.shape
    R, D, NO, S = np.zeros((T, B)), np.zeros((T, B)), np.zeros_like(obs_t), np.zeros((T, B), int)
    for b in range(B):
        for t in range(T):
            total, scale = 0.0, 1.0
            for k in range(n):
                s = t + k
                if s >= T:
                    break
                total += scale * reward[s, b]
                scale *= gamma
                S[t, b] += 1
                if terminated[s, b]:
                    scale = 0.0
                    NO[t, b] = final_obs[s, b]
                    break
                if truncated[s, b]:
                    NO[t, b] = final_obs[s, b]
                    break
                NO[t, b] = obs_t[s, b]
            R[t, b], D[t, b] = total, scale
    return R, D, NO, S


@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_python_loop(n, seed):
    rng = np.random.default_rng(seed)
    T, B, gamma = 12, 4, 0.9
    reward = rng.normal(size=(T, B)).astype(np.float32)
    terminated = rng.random((T, B)) < 0.15
    truncated = (rng.random((T, B)) < 0.1) & ~terminated
    obs_tm1 = rng.normal(size=(T, B, 2)).astype(np.float32)
    obs_t = rng.normal(size=(T, B, 2)).astype(np.float32)
    final_obs = rng.normal(size=(T, B, 2)).astype(np.float32)  # differs from obs_t everywhere
    action = rng.integers(0, 3, (T, B)).astype(np.int32)
    out = jax.jit(replay.nstep_transitions, static_argnames="n")(
        obs_tm1, action, reward, terminated, truncated, obs_t, final_obs, gamma, n=n
    )
    R, D, NO, S = python_nstep(reward, terminated, truncated, obs_t, final_obs, gamma, n)
    np.testing.assert_allclose(out.reward, R, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.discount, D, rtol=1e-6)
    np.testing.assert_array_equal(out.next_obs, NO)
    np.testing.assert_array_equal(out.steps, S)
    np.testing.assert_array_equal(out.obs_tm1, obs_tm1)
    np.testing.assert_array_equal(out.action, action)


def test_hand_computed():
    # One env, gamma 0.5, n 3: rewards 1, 2, 4, 8; the episode terminates at step 2.
    reward = jnp.array([[1.0], [2.0], [4.0], [8.0]])
    terminated = jnp.array([[False], [False], [True], [False]])
    truncated = jnp.zeros((4, 1), bool)
    obs_t = jnp.arange(4.0).reshape(4, 1) + 10  # next obs 10, 11, 12(reset), 13
    final = obs_t.at[2].set(99.0)  # the true last observation of the episode
    out = replay.nstep_transitions(
        obs_t, obs_t, reward, terminated, truncated, obs_t, final, gamma=0.5, n=3
    )
    # t=0: 1 + .5*2 + .25*4 = 3, terminated -> discount 0; t=1: 2 + .5*4 = 4, discount 0
    # t=2: 4, discount 0; t=3: 8, discount .5 (window cut by the rollout end), bootstrap 13
    np.testing.assert_allclose(out.reward[:, 0], [3.0, 4.0, 4.0, 8.0])
    np.testing.assert_allclose(out.discount[:, 0], [0.0, 0.0, 0.0, 0.5])
    np.testing.assert_allclose(out.next_obs[:, 0], [99.0, 99.0, 99.0, 13.0])
    np.testing.assert_array_equal(out.steps[:, 0], [3, 2, 1, 1])


def test_truncation_bootstraps_from_final_obs():
    reward = jnp.ones((3, 1))
    truncated = jnp.array([[False], [True], [False]])
    obs_t = jnp.array([[1.0], [2.0], [3.0]])
    final = jnp.array([[0.0], [-7.0], [0.0]])
    out = replay.nstep_transitions(
        obs_t, obs_t, reward, jnp.zeros((3, 1), bool), truncated, obs_t, final, 0.9, 2
    )
    np.testing.assert_allclose(out.reward[:, 0], [1.9, 1.0, 1.0])
    np.testing.assert_allclose(out.discount[:, 0], [0.81, 0.9, 0.9])
    np.testing.assert_allclose(out.next_obs[:, 0], [-7.0, -7.0, 3.0])


def test_bad_n():
    x = jnp.zeros((2, 1))
    with pytest.raises(ValueError, match="n must be"):
        replay.nstep_transitions(x, x, x, x, x, x, None, 0.9, 0)


@pytest.mark.parametrize(("T", "n"), [(1, 3), (2, 4), (3, 9)])
def test_window_longer_than_rollout(T, n):
    """n > T + 1 once gave [n, B] outputs (T=1, n=3) or a shape error (T=2, n=4): every
    window stops at the rollout's end, so n > T gives the same windows as n = T."""
    reward = jnp.arange(1.0, T + 1).reshape(T, 1)  # rewards 1, 2, 3
    obs_t = reward + 10  # next obs 11, 12, 13
    done = jnp.zeros((T, 1), bool)
    out = replay.nstep_transitions(obs_t, obs_t, reward, done, done, obs_t, None, 0.5, n)
    assert out.reward.shape == out.discount.shape == out.steps.shape == (T, 1)
    assert out.next_obs.shape == (T, 1)
    # T=3, gamma .5: t=0: 1 + .5*2 + .25*3 = 2.75; t=1: 2 + .5*3 = 3.5; t=2: 3; all
    # bootstrap from the last next obs 13 with discount .5^(T - t).
    expected = {1: [1.0], 2: [2.0, 2.0], 3: [2.75, 3.5, 3.0]}[T]
    np.testing.assert_allclose(out.reward[:, 0], expected)
    np.testing.assert_allclose(out.discount[:, 0], [0.5 ** (T - t) for t in range(T)])
    np.testing.assert_allclose(out.next_obs[:, 0], [10.0 + T] * T)
    np.testing.assert_array_equal(out.steps[:, 0], [T - t for t in range(T)])
    same = replay.nstep_transitions(obs_t, obs_t, reward, done, done, obs_t, None, 0.5, T)
    np.testing.assert_array_equal(out.reward, same.reward)
