import jax
import numpy as np

from jaxrl_par.returns import gae_advantages


def gae_reference(r, v, boot, term, done, gamma, lam):
    """Plain Python loop."""
    T = len(r)
    adv = np.zeros(T)
    acc = 0.0
    for t in reversed(range(T)):
        delta = r[t] + gamma * (0.0 if term[t] else boot[t]) - v[t]
        acc = delta + (0.0 if done[t] else gamma * lam) * acc
        adv[t] = acc
    return adv, adv + v


def test_gae_matches_python_loop_on_random_data():
    rng = np.random.default_rng(0)
    for _ in range(5):
        T = int(rng.integers(1, 40))
        r, v, boot = (rng.normal(size=T).astype(np.float32) for _ in range(3))
        term = rng.random(T) < 0.15
        trunc = (rng.random(T) < 0.15) & ~term
        done = term | trunc
        adv, ret = gae_advantages(r, v, boot, term, done, 0.97, 0.9)
        ref_adv, ref_ret = gae_reference(r, v, boot, term, done, 0.97, 0.9)
        np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-5)


def test_gae_hand_computed():
    # Two steps, truncated at t=1 with bootstrap value 10:
    # delta_1 = 1 + 0.5*10 - 2 = 4 ; A_1 = 4
    # delta_0 = 1 + 0.5*3 - 1 = 1.5 ; A_0 = 1.5 + 0.5*1.0*4 = 3.5
    adv, ret = gae_advantages(np.array([1.0, 1.0], np.float32), np.array([1.0, 2.0], np.float32),
                              np.array([3.0, 10.0]), np.array([False, False]),
                              np.array([False, True]), 0.5, 1.0)
    np.testing.assert_allclose(adv, [3.5, 4.0])
    np.testing.assert_allclose(ret, [4.5, 6.0])
    # Terminated instead: the bootstrap is ignored. delta_1 = 1 - 2 = -1.
    adv, _ = gae_advantages(np.array([1.0, 1.0]), np.array([1.0, 2.0]),
                            np.array([3.0, 10.0]), np.array([False, True]),
                            np.array([False, True]), 0.5, 1.0)
    np.testing.assert_allclose(adv, [1.5 - 0.5, -1.0])


def test_gae_vmaps_over_envs():
    rng = np.random.default_rng(1)
    T, N = 7, 3
    r, v, boot = (rng.normal(size=(T, N)).astype(np.float32) for _ in range(3))
    term = rng.random((T, N)) < 0.2
    f = jax.vmap(gae_advantages, in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1)
    adv, _ = f(r, v, boot, term, term, 0.9, 0.8)
    for n in range(N):
        ref, _ = gae_reference(r[:, n], v[:, n], boot[:, n], term[:, n], term[:, n], 0.9, 0.8)
        np.testing.assert_allclose(adv[:, n], ref, rtol=1e-5, atol=1e-5)
