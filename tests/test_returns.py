import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par.losses.returns import GAE_METHODS, gae_advantages, vtrace


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


@pytest.mark.parametrize("method", GAE_METHODS)
def test_gae_matches_python_loop_on_random_data(method):
    rng = np.random.default_rng(0)
    for T in [1, 2, 3, 8, 37, 128]:
        r, v, boot = (rng.normal(size=T).astype(np.float32) for _ in range(3))
        term = rng.random(T) < 0.15
        trunc = (rng.random(T) < 0.15) & ~term
        done = term | trunc
        adv, ret = gae_advantages(r, v, boot, term, done, 0.97, 0.9, method=method)
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


@pytest.mark.parametrize("method", GAE_METHODS)
def test_gae_vmaps_over_envs(method):
    rng = np.random.default_rng(1)
    T, N = 7, 3
    r, v, boot = (rng.normal(size=(T, N)).astype(np.float32) for _ in range(3))
    term = rng.random((T, N)) < 0.2
    f = jax.vmap(lambda *a: gae_advantages(*a, method=method),
                 in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1)
    adv, _ = jax.jit(f, static_argnums=(5, 6))(r, v, boot, term, term, 0.9, 0.8)
    for n in range(N):
        ref, _ = gae_reference(r[:, n], v[:, n], boot[:, n], term[:, n], term[:, n], 0.9, 0.8)
        np.testing.assert_allclose(adv[:, n], ref, rtol=1e-5, atol=1e-5)


def _gae_jaxpr(method, platform=None):
    args = [np.zeros(128, np.float32)] * 3 + [np.zeros(128, bool)] * 2
    fn = jax.jit(lambda *a: gae_advantages(*a, 0.99, 0.95, method=method))
    return fn.trace(*args).lower(lowering_platforms=(platform,) if platform else None).as_text()


def test_associative_gae_has_no_sequential_loop_and_auto_takes_it_off_cpu():
    """The associative form runs no T-step loop; "auto" lowers to the scan's loop for CPU
    and to the loop-free form for GPU (lowered only: no GPU is needed)."""
    assert "while" in _gae_jaxpr("scan", "cpu")
    assert "while" not in _gae_jaxpr("associative", "cpu")
    assert "while" in _gae_jaxpr("auto", "cpu")
    assert "while" not in _gae_jaxpr("auto", "cuda")


def test_auto_gae_on_cpu_is_the_scan_bit_for_bit():
    rng = np.random.default_rng(2)
    r, v, boot = (rng.normal(size=128).astype(np.float32) for _ in range(3))
    term = rng.random(128) < 0.1
    done = term | (rng.random(128) < 0.1)
    auto, _ = gae_advantages(r, v, boot, term, done, 0.99, 0.95, method="auto")
    scan, _ = gae_advantages(r, v, boot, term, done, 0.99, 0.95, method="scan")
    np.testing.assert_array_equal(auto, scan)


def test_unknown_gae_method_is_an_error():
    with pytest.raises(ValueError, match=r"method='assoc'; choose from \('auto', 'scan', "
                                         r"'associative'\)"):
        gae_advantages(np.zeros(3), np.zeros(3), np.zeros(3), np.zeros(3, bool),
                       np.zeros(3, bool), 0.9, 0.9, method="assoc")


# -- V-trace ---------------------------------------------------------------------------
def vtrace_reference(r, v, boot, term, done, log_rho, gamma, lam, rho_bar, c_bar):
    """Espeholt et al.'s sum form, written out with loops: ``v_s = V(x_s) + sum_t
    gamma^(t-s) (prod_{i<t} c_i) delta_t`` over the steps of ``s``'s episode within the
    trajectory (up to and including the first ``done`` at or after ``s``)."""
    T = len(r)
    rho = np.exp(log_rho.astype(np.float64))
    c = lam * np.minimum(c_bar, rho)
    delta = np.minimum(rho_bar, rho) * (r + gamma * np.where(term, 0.0, boot) - v)
    vs = np.zeros(T)
    for s in range(T):
        total, weight = 0.0, 1.0
        for t in range(s, T):
            total += weight * delta[t]
            if done[t]:
                break
            weight *= gamma * c[t]
        vs[s] = v[s] + total
    q = np.array([boot[s] if done[s] or s == T - 1 else vs[s + 1] for s in range(T)])
    pg = np.minimum(rho_bar, rho) * (r + gamma * np.where(term, 0.0, q) - v)
    return vs, pg


@pytest.mark.parametrize("method", GAE_METHODS)
def test_vtrace_matches_the_papers_sum_form_on_random_data(method):
    rng = np.random.default_rng(1)
    for T in [1, 2, 5, 20, 64]:
        r, v, boot = (rng.normal(size=T).astype(np.float32) for _ in range(3))
        log_rho = rng.normal(scale=0.7, size=T).astype(np.float32)  # rhos both sides of 1
        term = rng.random(T) < 0.15
        done = term | ((rng.random(T) < 0.15) & ~term)
        for lam, rho_bar, c_bar in [(1.0, 1.0, 1.0), (0.9, 2.0, 0.8)]:
            out = vtrace(r, v, boot, term, done, log_rho, 0.97, lam, rho_bar, c_bar,
                         method=method)
            ref_vs, ref_pg = vtrace_reference(r, v, boot, term, done, log_rho, 0.97, lam,
                                              rho_bar, c_bar)
            np.testing.assert_allclose(out.vtrace_targets, ref_vs, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(out.pg_advantages, ref_pg, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(out.importance_weights, np.exp(log_rho), rtol=1e-6)


def test_vtrace_on_policy_targets_are_the_lambda_returns():
    """With pi = mu (log rho = 0) and truncation levels >= 1, V-trace's targets are GAE's
    lambda-returns, terminations and truncations included."""
    rng = np.random.default_rng(2)
    T = 50
    r, v, boot = (rng.normal(size=T).astype(np.float32) for _ in range(3))
    term = rng.random(T) < 0.1
    done = term | ((rng.random(T) < 0.1) & ~term)
    out = vtrace(r, v, boot, term, done, np.zeros(T, np.float32), 0.99, 0.95, 1.0, 1.0,
                 method="scan")
    _, returns = gae_advantages(r, v, boot, term, done, 0.99, 0.95, method="scan")
    np.testing.assert_array_equal(out.vtrace_targets, returns)


def test_vtrace_clips_large_importance_weights():
    """A behaviour policy that made the action 100x less likely than the target policy
    does: the weight is reported as 100, and delta and the policy gradient use rho_bar."""
    out = vtrace(np.ones(1, np.float32), np.zeros(1, np.float32), np.zeros(1, np.float32),
                 np.array([True]), np.array([True]), np.full(1, np.log(100.0), np.float32),
                 0.9, rho_bar=1.0, c_bar=1.0)
    np.testing.assert_allclose(out.importance_weights, [100.0], rtol=1e-5)
    np.testing.assert_allclose(out.vtrace_targets, [1.0])  # 0 + min(1, 100) * (1 - 0)
    np.testing.assert_allclose(out.pg_advantages, [1.0])


def test_vtrace_passes_no_gradient_through_its_targets():
    def f(v):
        out = vtrace(jnp.ones(4), v, v, jnp.zeros(4, bool), jnp.zeros(4, bool), jnp.zeros(4),
                     0.9)
        return jnp.sum(out.vtrace_targets) + jnp.sum(out.pg_advantages)

    np.testing.assert_array_equal(jax.grad(f)(jnp.arange(4.0)), np.zeros(4))
