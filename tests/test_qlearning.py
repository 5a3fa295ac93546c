"""Building blocks of DQN and Ape-X: exploration, TD errors, losses, n-step windows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par import envs, replay
from jaxrl_par.algos import q_common
from jaxrl_par.algos.q_common import (
    NStepCarry,
    batch_td_error,
    init_nstep_carry,
    nstep_with_carry,
)
from jaxrl_par.blocks.exploration import apex_epsilons, epsilon_greedy, linear_epsilon
from jaxrl_par.losses.qlearning import double_q_learning, q_learning, td_loss
from jaxrl_par.replay import batch_normalized_weights


def test_apex_ladder_literal_values():
    # eps_i = 0.4 ** (1 + 7 i / 7) = 0.4 ** (1 + i)
    np.testing.assert_allclose(
        apex_epsilons(8, 0.4, 7.0),
        [0.4, 0.16, 0.064, 0.0256, 0.01024, 0.004096, 0.0016384, 0.00065536], rtol=1e-6)
    # N = 3: 0.4, 0.4 ** 4.5 = 0.016190, 0.4 ** 8 = 0.00065536
    np.testing.assert_allclose(apex_epsilons(3), [0.4, 0.4**4.5, 0.4**8], rtol=1e-6)
    np.testing.assert_allclose(apex_epsilons(1), [0.4])
    with pytest.raises(ValueError, match="num_actors"):
        apex_epsilons(0)


def test_linear_epsilon():
    assert float(linear_epsilon(0, 1.0, 0.05, 100)) == pytest.approx(1.0)
    assert float(linear_epsilon(50, 1.0, 0.0, 100)) == pytest.approx(0.5)
    assert float(linear_epsilon(10_000, 1.0, 0.05, 100)) == pytest.approx(0.05)


def test_epsilon_greedy_extremes_and_frequency():
    n = 4000
    q = jnp.tile(jnp.array([[0.0, 3.0, 1.0]]), (n, 1))
    keys = jax.random.split(jax.random.key(0), n)
    assert bool(jnp.all(epsilon_greedy(keys, q, 0.0) == 1))
    a = np.asarray(epsilon_greedy(keys, q, 1.0))
    np.testing.assert_allclose(np.bincount(a, minlength=3) / n, [1 / 3] * 3, atol=0.03)
    # per-row rates: rows with eps 0 are greedy
    eps = jnp.where(jnp.arange(n) % 2 == 0, 0.0, 1.0)
    a = np.asarray(epsilon_greedy(keys, q, eps))
    assert np.all(a[::2] == 1)
    # P(greedy action) = 1 - eps + eps / A = 1/3 + 1/3 ... for eps=1: 1/3
    assert abs(np.mean(a[1::2] == 1) - 1 / 3) < 0.04


def test_td_errors_literal():
    q_tm1 = jnp.array([1.0, 2.0])
    # Q-learning: 1 + 0.5 * max(4, 2) - q_tm1[0] = 1 + 2 - 1 = 2
    assert float(q_learning(q_tm1, 0, 1.0, 0.5, jnp.array([4.0, 2.0]))) == 2.0
    # double Q: selector argmax = 1, value 2: 1 + 0.5 * 2 - 1 = 1
    assert float(double_q_learning(q_tm1, 0, 1.0, 0.5, jnp.array([4.0, 2.0]),
                                   jnp.array([0.0, 3.0]))) == 1.0
    # terminal: discount 0 -> r - q = 1 - 2 = -1
    assert float(q_learning(q_tm1, 1, 1.0, 0.0, jnp.array([4.0, 2.0]))) == -1.0


def test_td_loss_literal():
    td = jnp.array([0.5, -3.0])
    np.testing.assert_allclose(td_loss(td, "mse"), [0.125, 4.5])
    # huber, delta 1: 0.5 * 0.25 = 0.125; 1 * (3 - 0.5) = 2.5
    np.testing.assert_allclose(td_loss(td, "huber"), [0.125, 2.5])
    with pytest.raises(ValueError, match="kind"):
        td_loss(td, "l1")


def test_batch_normalized_weights():
    np.testing.assert_allclose(batch_normalized_weights(jnp.array([0.5, 0.25, 0.1])),
                               [1.0, 0.5, 0.2])


def test_batch_td_error_gradient_only_through_q_tm1():
    def q_fn(p, obs):
        return obs * p  # [B, A]

    batch = q_common.example_transition((2,))
    batch = jax.tree.map(lambda x: jnp.stack([x, x]), batch)
    batch = batch._replace(obs=jnp.ones((2, 2)), next_obs=2 * jnp.ones((2, 2)),
                           reward=jnp.ones(2), discount=jnp.full(2, 0.5))
    td, _ = batch_td_error(q_fn, 1.0, 1.0, batch, double=True)
    np.testing.assert_allclose(td, [1.0, 1.0])  # 1 + 0.5 * 2 - 1
    grad = jax.grad(lambda p: jnp.sum(batch_td_error(q_fn, p, 1.0, batch, True)[0]))(1.0)
    assert float(grad) == -2.0  # d/dp of -(obs * p)[a] summed over 2 rows


def _random_rollout(env_id, t, n, key):
    env = envs.make(env_id, n)
    state = env.reset(jax.random.split(key, n))

    def step(state, k):
        ka, ke = jax.random.split(k)
        action = jax.random.randint(ka, (n,), 0, env.num_actions)
        new, ts = env.step(jax.random.split(ke, n), state, action)
        return new, NStepCarry(state.obs, action, ts.reward, ts.terminated, ts.truncated,
                               ts.obs, ts.final_obs, jnp.ones_like(ts.terminated))

    return jax.lax.scan(step, state, jax.random.split(key, t))[1]


@pytest.mark.parametrize("n", [1, 3])
def test_nstep_carry_equals_one_long_rollout(n):
    """Windows built update by update (2 steps each) equal those of one long rollout."""
    steps = _random_rollout("CartPole-v1", 12, 5, jax.random.key(1))
    whole = replay.nstep_transitions(steps.obs_tm1, steps.action, steps.reward,
                                     steps.terminated, steps.truncated, steps.obs_t,
                                     steps.final_obs, 0.9, n)
    carry = init_nstep_carry(n, 5, (4,))
    got, valid = [], []
    for i in range(6):
        part = jax.tree.map(lambda x, i=i: x[2 * i: 2 * i + 2], steps)
        carry, (w, v) = nstep_with_carry(carry, part, 0.9, n)
        got.append(w)
        valid.append(v)
    got = jax.tree.map(lambda *xs: jnp.concatenate(xs), *got)
    valid = np.asarray(jnp.concatenate(valid))
    assert not valid[: n - 1].any() and valid[n - 1:].all()
    k = 12 - n + 1  # complete windows of the long rollout
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(whole), strict=True):
        np.testing.assert_allclose(np.asarray(a)[n - 1:], np.asarray(b)[:k], rtol=1e-6)


def test_truncation_bootstraps_termination_does_not():
    """ProbeTimeLimit (T=10, truncated) keeps gamma^n; ProbeConstant (terminal) gives 0."""
    gamma, n = 0.9, 3
    for env_id, trunc in (("ProbeTimeLimit-v0", True), ("ProbeConstant-v0", False)):
        steps = _random_rollout(env_id, 20, 2, jax.random.key(0))
        carry = init_nstep_carry(n, 2, (1,))
        _, tr = q_common.to_transitions(carry, steps, gamma, n, jnp.int32(0))
        real = np.asarray(tr.mask) > 0
        reward, discount = np.asarray(tr.reward)[real], np.asarray(tr.discount)[real]
        if trunc:
            # every window of a never-ending episode: 3 rewards of 1 (or fewer before the
            # time limit), and bootstrapping with gamma^n' (never 0)
            assert np.all(discount > 0)
            np.testing.assert_allclose(reward[discount == pytest.approx(gamma**3)],
                                       1 + gamma + gamma**2, rtol=1e-6)
            np.testing.assert_allclose(sorted(set(np.round(discount, 5).tolist())),
                                       [gamma**3, gamma**2, gamma], rtol=1e-4)
        else:
            np.testing.assert_allclose(discount, 0.0)
            np.testing.assert_allclose(reward, 1.0)
