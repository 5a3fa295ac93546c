"""Our returns and losses against rlax's (DeepMind's reference implementations).

On random data, to float rounding. Conventions differ: rlax takes ``discount_t`` per step
(``gamma * (1 - terminated_t)``), values ``[T + 1]`` or ``v_t`` of the next states, and
knows nothing of auto-resets; our functions take ``terminated_t`` and ``done_t`` and the
bootstrap value of the observation each step reached. Without truncations the two agree:
an episode end by termination zeroes the discount in both, and what follows it is cut.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par.losses import (
    GAE_METHODS,
    clipped_surrogate_loss,
    double_q_learning,
    gae_advantages,
    policy_gradient_loss,
    q_learning,
    vtrace,
)
from jaxrl_par.replay import nstep_transitions

rlax = pytest.importorskip("rlax")

T = 16
GAMMA = 0.9
TOL = dict(rtol=1e-5, atol=1e-5)


def trajectory(seed: int, terminations: bool):
    """Rewards, values of the observations acted on ``[T]``, values of those reached
    ``[T]`` (the next row's, or after a termination a value no target may use), and
    terminations (none, or about one in six steps; never truncations)."""
    k = jax.random.split(jax.random.key(seed), 4)
    reward = jax.random.normal(k[0], (T,))
    value = jax.random.normal(k[1], (T + 1,))  # V(x_0) ... V(x_T)
    terminated = jax.random.uniform(k[2], (T,)) < (1 / 6 if terminations else 0.0)
    assert bool(terminated.any()) == terminations  # the seeds used here do terminate
    # After a termination the env resets: the bootstrap is the final observation's value,
    # multiplied by discount 0 in both implementations. Make it garbage to show that.
    garbage = 100.0 * jax.random.normal(k[3], (T,))
    bootstrap = jnp.where(terminated, garbage, value[1:])
    return reward, value, bootstrap, terminated


@pytest.mark.parametrize("terminations", [False, True])
@pytest.mark.parametrize("method", GAE_METHODS)
def test_gae_is_rlax_truncated_gae(terminations, method):
    reward, value, bootstrap, terminated = trajectory(0, terminations)
    ours, returns = gae_advantages(reward, value[:-1], bootstrap, terminated, terminated,
                                   GAMMA, 0.8, method=method)
    discount = GAMMA * (1.0 - terminated.astype(jnp.float32))
    theirs = rlax.truncated_generalized_advantage_estimation(reward, discount, 0.8, value)
    np.testing.assert_allclose(ours, theirs, **TOL)
    np.testing.assert_allclose(returns, theirs + value[:-1], **TOL)


def _vtrace_both(seed, terminations, lambda_, rho_bar, pg_rho_bar):
    reward, value, bootstrap, terminated = trajectory(seed, terminations)
    log_rho = 0.5 * jax.random.normal(jax.random.key(seed + 100), (T,))
    ours = vtrace(reward, value[:-1], bootstrap, terminated, terminated, log_rho, GAMMA,
                  lambda_=lambda_, rho_bar=rho_bar, c_bar=1.0, pg_rho_bar=pg_rho_bar,
                  method="scan")
    discount = GAMMA * (1.0 - terminated.astype(jnp.float32))
    # rlax's v_t: the value of the state each step reached (ours: ``bootstrap``).
    theirs = rlax.vtrace_td_error_and_advantage(
        value[:-1], bootstrap, reward, discount, jnp.exp(log_rho), lambda_=lambda_,
        clip_rho_threshold=rho_bar, clip_pg_rho_threshold=pg_rho_bar)
    return ours, theirs, value[:-1]


@pytest.mark.parametrize("terminations", [False, True])
@pytest.mark.parametrize("rho_bar,pg_rho_bar", [(1.0, 1.0), (1.5, 0.8)])
def test_vtrace_is_rlax_vtrace_at_lambda_one(terminations, rho_bar, pg_rho_bar):
    ours, theirs, value = _vtrace_both(1, terminations, 1.0, rho_bar, pg_rho_bar)
    np.testing.assert_allclose(ours.vtrace_targets, theirs.errors + value, **TOL)
    np.testing.assert_allclose(ours.pg_advantages, theirs.pg_advantage, **TOL)


def test_vtrace_with_lambda_below_one_keeps_the_papers_advantage():
    """The targets still equal rlax's; the policy-gradient advantages do not: ours
    bootstrap from ``v_{t+1}`` (IMPALA's paper and seed_rl), rlax's from
    ``lambda v_{t+1} + (1 - lambda) V(x_{t+1})``. Rebuilding ours from rlax's targets with
    the paper's formula gives ours."""
    ours, theirs, value = _vtrace_both(2, False, 0.7, 1.0, 1.0)
    targets = theirs.errors + value
    np.testing.assert_allclose(ours.vtrace_targets, targets, **TOL)
    assert not np.allclose(ours.pg_advantages, theirs.pg_advantage, **TOL)
    reward, _, bootstrap, _ = trajectory(2, False)
    next_targets = jnp.concatenate([targets[1:], bootstrap[-1:]])
    rho = jnp.minimum(1.0, ours.importance_weights)
    np.testing.assert_allclose(ours.pg_advantages,
                               rho * (reward + GAMMA * next_targets - value), **TOL)


@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("terminations", [False, True])
def test_nstep_targets_are_rlax_n_step_bootstrapped_returns(n, terminations):
    """Our windows' ``reward + discount * V(next_obs)`` against rlax's n-step returns of
    each env, the last windows cut at the rollout's end (bootstrapped from its last
    state) in both. The observations are scalars equal to their own values."""
    batch = 3
    k = jax.random.split(jax.random.key(3), 4)
    reward = jax.random.normal(k[0], (T, batch))
    obs_t = jax.random.normal(k[1], (T, batch))  # V(obs) = obs
    obs_tm1 = jax.random.normal(k[2], (T, batch))
    terminated = jax.random.uniform(k[3], (T, batch)) < (1 / 6 if terminations else 0.0)
    assert bool(terminated.any()) == terminations
    windows = nstep_transitions(obs_tm1, jnp.zeros((T, batch), jnp.int32), reward, terminated,
                                jnp.zeros((T, batch), bool), obs_t, None, GAMMA, n)
    ours = windows.reward + windows.discount * windows.next_obs
    discount = GAMMA * (1.0 - terminated.astype(jnp.float32))
    theirs = jax.vmap(functools.partial(rlax.n_step_bootstrapped_returns, n=n),
                      in_axes=1, out_axes=1)(reward, discount, obs_t)
    np.testing.assert_allclose(ours, theirs, **TOL)


def _q_batch(seed, b=32, a=4):
    k = jax.random.split(jax.random.key(seed), 6)
    return (jax.random.normal(k[0], (b, a)), jax.random.randint(k[1], (b,), 0, a),
            jax.random.normal(k[2], (b,)), jax.random.uniform(k[3], (b,)),
            jax.random.normal(k[4], (b, a)), jax.random.normal(k[5], (b, a)))


def test_q_learning_is_rlax_q_learning():
    q_tm1, a_tm1, r_t, discount_t, q_t, _ = _q_batch(4)
    np.testing.assert_allclose(jax.vmap(q_learning)(q_tm1, a_tm1, r_t, discount_t, q_t),
                               jax.vmap(rlax.q_learning)(q_tm1, a_tm1, r_t, discount_t, q_t),
                               **TOL)


def test_double_q_learning_is_rlax_double_q_learning():
    q_tm1, a_tm1, r_t, discount_t, q_t_value, q_t_selector = _q_batch(5)
    args = (q_tm1, a_tm1, r_t, discount_t, q_t_value, q_t_selector)
    np.testing.assert_allclose(jax.vmap(double_q_learning)(*args),
                               jax.vmap(rlax.double_q_learning)(*args), **TOL)


def test_clipped_surrogate_is_rlax_clipped_surrogate_pg_loss():
    k = jax.random.split(jax.random.key(6), 2)
    ratio = jnp.exp(0.3 * jax.random.normal(k[0], (64,)))
    adv = jax.random.normal(k[1], (64,))
    ours = jnp.mean(jax.vmap(clipped_surrogate_loss, (0, 0, None))(ratio, adv, 0.2))
    np.testing.assert_allclose(ours, rlax.clipped_surrogate_pg_loss(ratio, adv, 0.2), **TOL)


@pytest.mark.filterwarnings("ignore:Rlax softmax will be deprecated")
def test_policy_gradient_loss_is_rlax_policy_gradient_loss():
    k = jax.random.split(jax.random.key(7), 3)
    logits = jax.random.normal(k[0], (T, 5))
    action = jax.random.randint(k[1], (T,), 0, 5)
    adv = jax.random.normal(k[2], (T,))
    log_prob = jax.nn.log_softmax(logits)[jnp.arange(T), action]
    ours = jnp.mean(jax.vmap(policy_gradient_loss)(log_prob, adv))
    theirs = rlax.policy_gradient_loss(logits, action, adv, jnp.ones(T))
    np.testing.assert_allclose(ours, theirs, **TOL)
