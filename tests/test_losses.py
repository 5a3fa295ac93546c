"""The pure losses of jaxrl_par.losses on hand-computed values.

Each loss is checked against literals worked out by hand (the arithmetic in a comment),
and each table is shown to catch the bugs it is meant to catch: a mutated implementation
(sign flipped, clip removed, min for max, ...) evaluated on the same inputs misses at
least one literal. Gradients are checked where the loss decides where they flow.
"""

import ast
import pathlib

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par import envs, losses
from jaxrl_par.algos import ppo
from jaxrl_par.losses import (
    actor_critic_loss,
    approx_kl,
    clipped_double_q_target,
    clipped_surrogate_loss,
    clipped_value_loss,
    deterministic_policy_gradient_loss,
    policy_gradient_loss,
    soft_actor_loss,
    soft_critic_loss,
    soft_q_target,
    target_policy_smoothing,
    temperature_loss,
    value_loss,
)

f32 = jnp.float32


def evaluate(fn, cases):
    """``fn`` on every case's inputs (all but the last entry), as floats."""
    return np.array([float(fn(*(jnp.asarray(x, jnp.float32) for x in case[:-1])))
                     for case in cases])


def expected(cases):
    return np.array([case[-1] for case in cases])


def assert_literals(fn, cases):
    np.testing.assert_allclose(evaluate(fn, cases), expected(cases), rtol=1e-6, atol=1e-6)


def assert_caught(mutant, cases):
    """The literal table rejects ``mutant``: some case differs from its literal."""
    got = evaluate(mutant, cases)
    assert not np.allclose(got, expected(cases), rtol=1e-6, atol=1e-6), got


# -- PPO's clipped surrogate ---------------------------------------------------------------
EPS = 0.25
# (ratio, advantage, loss), eps = 0.25: the clip range is [0.75, 1.25].
SURROGATE = [
    (1.5, 2.0, -2.5),    # A > 0, r above 1 + eps: min(1.5*2 = 3, 1.25*2 = 2.5) = 2.5
    (0.5, 2.0, -1.0),    # A > 0, r below 1 - eps: min(0.5*2 = 1, 0.75*2 = 1.5) = 1
    (0.5, -2.0, 1.5),    # A < 0, r below 1 - eps: min(-1, 0.75*-2 = -1.5) = -1.5
    (1.5, -2.0, 3.0),    # A < 0, r above 1 + eps: min(-3, 1.25*-2 = -2.5) = -3
    (1.0, 3.0, -3.0),    # r = 1: min(3, 3) = 3
    (1.25, 1.0, -1.25),  # r exactly 1 + eps: min(1.25, 1.25)
    (0.75, -1.0, 0.75),  # r exactly 1 - eps: min(-0.75, -0.75)
    (1.1, 0.0, 0.0),     # A = 0: nothing
]


def test_clipped_surrogate_literals():
    assert_literals(lambda r, a: clipped_surrogate_loss(r, a, EPS), SURROGATE)


@pytest.mark.parametrize("mutant", [
    lambda r, a: jnp.minimum(r * a, jnp.clip(r, 1 - EPS, 1 + EPS) * a),   # sign flipped
    lambda r, a: -r * a,                                                    # clip removed
    lambda r, a: -jnp.maximum(r * a, jnp.clip(r, 1 - EPS, 1 + EPS) * a),  # max for min
    lambda r, a: -jnp.clip(r, 1 - EPS, 1 + EPS) * a,                       # clip always
    lambda r, a: -jnp.minimum(r * a, jnp.clip(r, 1 - 2 * EPS, 1 + 2 * EPS) * a),  # eps
], ids=["sign", "no_clip", "max", "clip_always", "eps"])
def test_clipped_surrogate_literals_catch(mutant):
    assert_caught(mutant, SURROGATE)


@pytest.mark.parametrize("ratio,adv,grad", [
    (1.5, 2.0, 0.0),    # clipped branch (beyond 1 + eps, A > 0): flat, no gradient
    (0.5, -2.0, 0.0),   # clipped branch (below 1 - eps, A < 0): flat
    (0.5, 2.0, -2.0),   # unclipped: d(-r A)/dr = -A
    (1.5, -2.0, 2.0),   # unclipped: -A = 2
    (1.1, 2.0, -2.0),   # inside the range: -A
])
def test_clipped_surrogate_gradient_in_the_ratio(ratio, adv, grad):
    g = jax.grad(clipped_surrogate_loss)(f32(ratio), f32(adv), EPS)
    assert float(g) == pytest.approx(grad)


def test_clipped_surrogate_passes_no_gradient_into_the_advantage():
    g = jax.grad(clipped_surrogate_loss, argnums=1)(f32(0.5), f32(2.0), EPS)
    assert float(g) == 0.0


def test_clipped_surrogate_takes_a_traced_clip_eps():
    """A sweep vmaps the clip range: eps = 0.5 clips r = 1.5 nowhere, min(3, 3) = 3."""
    out = jax.vmap(clipped_surrogate_loss, (None, None, 0))(f32(1.5), f32(2.0),
                                                          jnp.array([0.25, 0.5]))
    np.testing.assert_allclose(out, [-2.5, -3.0])


# -- value losses ----------------------------------------------------------------------------
# (value, target, loss)
VALUE = [
    (1.0, 3.0, 2.0),     # 0.5 * (1 - 3)^2 = 0.5 * 4
    (-1.0, 0.5, 1.125),  # 0.5 * (-1.5)^2 = 0.5 * 2.25
    (2.0, 2.0, 0.0),
]


def test_value_loss_literals():
    assert_literals(value_loss, VALUE)


@pytest.mark.parametrize("mutant", [
    lambda v, t: jnp.square(v - t),         # no 0.5
    lambda v, t: 0.5 * jnp.square(v + t),   # sign of the target
    lambda v, t: 0.5 * jnp.abs(v - t),      # not squared
], ids=["no_half", "sign", "abs"])
def test_value_loss_literals_catch(mutant):
    assert_caught(mutant, VALUE)


def test_value_loss_gradient():
    # d/dv 0.5 (v - t)^2 = v - t = 1 - 3 = -2; none into the target
    gv, gt = jax.grad(value_loss, argnums=(0, 1))(f32(1.0), f32(3.0))
    assert float(gv) == -2.0 and float(gt) == 0.0


# (value, old_value, target, loss), eps = 0.5: the value may move 0.5 from old_value.
CLIPPED_VALUE = [
    # v - old = 1 > eps: clipped value 1.5; max((2 - 2)^2 = 0, (1.5 - 2)^2 = 0.25) / 2
    (2.0, 1.0, 2.0, 0.125),
    # inside the range: clipped = v = 1.25; (1.25 - 2)^2 = 0.5625, halved
    (1.25, 1.0, 2.0, 0.28125),
    # clipped 1.5; max((3 - 4)^2 = 1, (1.5 - 4)^2 = 6.25) / 2
    (3.0, 1.0, 4.0, 3.125),
    # clipped 1.5; max((3 - 1)^2 = 4, (1.5 - 1)^2 = 0.25) / 2
    (3.0, 1.0, 1.0, 2.0),
    # v - old exactly eps: clipped = v = 1.5; (1.5 - 3)^2 = 2.25, halved
    (1.5, 1.0, 3.0, 1.125),
    # below: v - old = -1, clipped 0.5; max((0 - 0)^2 = 0, (0.5 - 0)^2 = 0.25) / 2
    (0.0, 1.0, 0.0, 0.125),
]


def test_clipped_value_loss_literals():
    assert_literals(lambda v, o, t: clipped_value_loss(v, o, t, 0.5), CLIPPED_VALUE)


def _clip(v, o):
    return o + jnp.clip(v - o, -0.5, 0.5)


@pytest.mark.parametrize("mutant", [
    lambda v, o, t: 0.5 * jnp.minimum(jnp.square(v - t), jnp.square(_clip(v, o) - t)),  # min
    lambda v, o, t: 0.5 * jnp.square(v - t),                                            # no clip
    lambda v, o, t: 0.5 * jnp.square(_clip(v, o) - t),                                  # clip only
    lambda v, o, t: jnp.maximum(jnp.square(v - t), jnp.square(_clip(v, o) - t)),        # no 0.5
    lambda v, o, t: 0.5 * jnp.maximum(jnp.square(v - t),                                # about v
                                      jnp.square(v + jnp.clip(v - o, -0.5, 0.5) - t)),
], ids=["min", "no_clip", "clip_only", "no_half", "clip_around_v"])
def test_clipped_value_loss_literals_catch(mutant):
    assert_caught(mutant, CLIPPED_VALUE)


@pytest.mark.parametrize("v,old,target,grad", [
    (2.0, 1.0, 2.0, 0.0),    # clipped error the larger, v beyond old + eps: flat
    (3.0, 1.0, 4.0, 0.0),    # the same, far from the target: still no gradient
    (3.0, 1.0, 1.0, 2.0),    # unclipped the larger: v - t = 2
    (1.25, 1.0, 2.0, -0.75),  # inside the range: v - t
])
def test_clipped_value_loss_gradient(v, old, target, grad):
    g = jax.grad(clipped_value_loss)(f32(v), f32(old), f32(target), 0.5)
    assert float(g) == pytest.approx(grad)


def test_clipped_value_loss_passes_no_gradient_into_old_value_or_target():
    g_old, g_target = jax.grad(clipped_value_loss, argnums=(1, 2))(
        f32(1.25), f32(1.0), f32(2.0), 0.5)
    assert float(g_old) == 0.0 and float(g_target) == 0.0


# -- approx KL ------------------------------------------------------------------------------
LN2 = float(np.log(2.0))
# (log_ratio, estimate)
KL = [
    (0.0, 0.0),                # r = 1: (1 - 1) - 0
    (LN2, 0.30685282),         # r = 2: (2 - 1) - ln 2 = 1 - 0.69314718
    (-LN2, 0.19314718),        # r = 1/2: (0.5 - 1) + ln 2 = -0.5 + 0.69314718
]


def test_approx_kl_literals():
    assert_literals(approx_kl, KL)


@pytest.mark.parametrize("mutant", [
    lambda x: (jnp.exp(x) - 1) + x,      # sign of log r
    lambda x: -x,                         # k1: -log r, negative where r > 1
    lambda x: 0.5 * jnp.square(x),        # k2
    lambda x: (jnp.exp(-x) - 1) + x,      # ratio inverted
], ids=["sign", "k1", "k2", "inverted"])
def test_approx_kl_literals_catch(mutant):
    assert_caught(mutant, KL)


def test_approx_kl_is_non_negative():
    xs = jnp.linspace(-5.0, 5.0, 101)
    assert float(jnp.min(jax.vmap(approx_kl)(xs))) >= 0.0


# -- policy gradient, actor-critic ---------------------------------------------------------------
# (log_prob, advantage, loss)
POLICY_GRADIENT = [
    (-0.5, 2.0, 1.0),   # -(-0.5) * 2
    (-2.0, -1.5, -3.0),  # -(-2) * -1.5
    (-1.0, 0.0, 0.0),
]


def test_policy_gradient_loss_literals():
    assert_literals(policy_gradient_loss, POLICY_GRADIENT)


@pytest.mark.parametrize("mutant", [
    lambda lp, a: lp * a,                # sign
    lambda lp, a: -jnp.exp(lp) * a,      # probability for log-probability
], ids=["sign", "prob"])
def test_policy_gradient_loss_literals_catch(mutant):
    assert_caught(mutant, POLICY_GRADIENT)


def test_policy_gradient_loss_gradient_goes_to_the_policy_only():
    # d/dlp (-lp * A) = -A = -2; the advantage is a constant: 0, not -lp = 0.5
    g_lp, g_adv = jax.grad(policy_gradient_loss, argnums=(0, 1))(f32(-0.5), f32(2.0))
    assert float(g_lp) == -2.0 and float(g_adv) == 0.0


def test_actor_critic_loss_literals():
    # 1 + 0.5 * 2 - 0.25 * 3 = 1 + 1 - 0.75 = 1.25; the entropy is a bonus (subtracted)
    cases = [(1.0, 2.0, 3.0, 1.25), (-1.0, 4.0, 2.0, 0.5)]  # -1 + 2 - 0.5 = 0.5
    assert_literals(lambda p, v, h: actor_critic_loss(p, v, h, 0.5, 0.25), cases)
    assert_caught(lambda p, v, h: p + 0.5 * v + 0.25 * h, cases)   # entropy as a cost
    assert_caught(lambda p, v, h: p + 0.25 * v - 0.5 * h, cases)   # coefficients swapped


# -- soft actor-critic, DDPG, TD3 -----------------------------------------------------------------
# (reward, discount, min_q, log_prob, target), alpha = 0.5
SOFT_TARGET = [
    (1.0, 0.5, 4.0, -2.0, 3.5),   # 1 + 0.5 * (4 - 0.5 * -2) = 1 + 0.5 * 5
    (1.0, 0.0, 4.0, -2.0, 1.0),   # terminated: r only
    (0.0, 0.9, 2.0, 1.0, 1.35),   # 0.9 * (2 - 0.5 * 1) = 0.9 * 1.5
]


def test_soft_q_target_literals():
    assert_literals(lambda r, d, q, lp: soft_q_target(r, d, q, lp, 0.5), SOFT_TARGET)


@pytest.mark.parametrize("mutant", [
    lambda r, d, q, lp: r + d * (q + 0.5 * lp),   # entropy sign
    lambda r, d, q, lp: r + d * q,                 # no entropy term
    lambda r, d, q, lp: r + d * q - 0.5 * lp,      # entropy not discounted
], ids=["sign", "no_entropy", "undiscounted_entropy"])
def test_soft_q_target_literals_catch(mutant):
    assert_caught(mutant, SOFT_TARGET)


def test_soft_q_target_is_a_constant():
    g = jax.grad(soft_q_target, argnums=(2, 3))(f32(1.0), f32(0.5), f32(4.0), f32(-2.0), 0.5)
    assert [float(x) for x in g] == [0.0, 0.0]


def test_soft_critic_loss_literals():
    # 0.5 * ((1 - 2)^2 + (3 - 2)^2) = 0.5 * 2 = 1; 0.5 * ((0 - 1)^2 + (4 - 1)^2) = 0.5 * 10 = 5
    cases = [([1.0, 3.0], 2.0, 1.0), ([0.0, 4.0], 1.0, 5.0)]
    assert_literals(soft_critic_loss, cases)
    assert_caught(lambda q, t: 0.5 * jnp.mean(jnp.square(q - t)), cases)   # mean over critics
    assert_caught(lambda q, t: 0.5 * jnp.square(jnp.min(q) - t), cases)    # min critic only
    assert_caught(lambda q, t: jnp.sum(jnp.square(q - t)), cases)          # no 0.5


def test_soft_critic_loss_batch_mean_is_sacs_critic_loss():
    """The batch mean of the per-sample loss is SAC's
    ``0.5 * sum_k mean_b (q[k, b] - y[b])^2``. q = [[1, 0], [3, 4]] (critic k, sample b),
    y = [2, 1]: critic 0's squared errors [1, 1] (mean 1), critic 1's [1, 9] (mean 5);
    0.5 * (1 + 5) = 3."""
    q = jnp.array([[1.0, 0.0], [3.0, 4.0]])
    y = jnp.array([2.0, 1.0])
    loss = jnp.mean(jax.vmap(soft_critic_loss, (1, 0))(q, y))
    assert float(loss) == pytest.approx(3.0)


def test_soft_critic_loss_gradient():
    # d/dq_k = q_k - t: [1 - 2, 3 - 2]; none into the target
    gq, gt = jax.grad(soft_critic_loss, argnums=(0, 1))(jnp.array([1.0, 3.0]), f32(2.0))
    np.testing.assert_allclose(gq, [-1.0, 1.0])
    assert float(gt) == 0.0


# (log_prob, min_q, loss), alpha = 0.5
SOFT_ACTOR = [
    (-1.0, 3.0, -3.5),   # 0.5 * -1 - 3
    (2.0, -1.0, 2.0),    # 0.5 * 2 + 1
]


def test_soft_actor_loss_literals():
    assert_literals(lambda lp, q: soft_actor_loss(lp, q, 0.5), SOFT_ACTOR)


@pytest.mark.parametrize("mutant", [
    lambda lp, q: 0.5 * lp + q,     # sign of Q
    lambda lp, q: -0.5 * lp - q,    # sign of the entropy term
    lambda lp, q: lp - 0.5 * q,     # alpha on the wrong term
], ids=["q_sign", "entropy_sign", "alpha_on_q"])
def test_soft_actor_loss_literals_catch(mutant):
    assert_caught(mutant, SOFT_ACTOR)


def test_soft_actor_loss_gradient():
    # d/dlp = alpha = 0.5; d/dq = -1; alpha is a constant
    g = jax.grad(soft_actor_loss, argnums=(0, 1, 2))(f32(-1.0), f32(3.0), f32(0.5))
    assert [float(x) for x in g] == [0.5, -1.0, 0.0]


# (log_alpha, log_prob, loss), target_entropy = -1
TEMPERATURE = [
    (0.5, -3.0, 2.0),    # -0.5 * (-3 + -1) = -0.5 * -4
    (-1.0, 0.5, -0.5),   # 1 * (0.5 - 1) = -0.5
    (0.0, -3.0, 0.0),    # log_alpha = 0
]


def test_temperature_loss_literals():
    assert_literals(lambda la, lp: temperature_loss(la, lp, -1.0), TEMPERATURE)


@pytest.mark.parametrize("mutant", [
    lambda la, lp: la * (lp - 1.0),                 # sign
    lambda la, lp: -la * (lp + 1.0),                # sign of target_entropy
    lambda la, lp: -jnp.exp(la) * (lp - 1.0),       # in alpha, not log alpha
], ids=["sign", "target_sign", "alpha"])
def test_temperature_loss_literals_catch(mutant):
    assert_caught(mutant, TEMPERATURE)


def test_temperature_loss_gradient_is_entropy_minus_target():
    # One sample: d/dlog_alpha = -(log_prob + target_entropy) = -(-3 - 1) = 4.
    g_la, g_lp = jax.grad(temperature_loss, argnums=(0, 1))(f32(0.5), f32(-3.0), -1.0)
    assert float(g_la) == 4.0 and float(g_lp) == 0.0
    # A batch: the entropy estimate -mean(log_prob) = -mean(-3, -1) = 2, minus the target
    # -1: 3, the gradient SAC's temperature step takes.
    log_prob = jnp.array([-3.0, -1.0])
    g = jax.grad(lambda la: jnp.mean(jax.vmap(temperature_loss, (None, 0, None))(
        la, log_prob, -1.0)))(f32(0.5))
    assert float(g) == pytest.approx(3.0)


def test_deterministic_policy_gradient_loss():
    # -Q: -2; gradient -1 (ascend Q)
    assert float(deterministic_policy_gradient_loss(f32(2.0))) == -2.0
    assert float(jax.grad(deterministic_policy_gradient_loss)(f32(2.0))) == -1.0
    # Through a critic Q(a) = -(a - 1)^2 and a policy a = theta: descent moves theta to 1;
    # at theta = 0, d/dtheta -Q = d/dtheta (theta - 1)^2 = -2.
    g = jax.grad(lambda th: deterministic_policy_gradient_loss(-jnp.square(th - 1.0)))(f32(0.0))
    assert float(g) == -2.0


# (reward, discount, q_1, q_2, target)
DOUBLE_Q = [
    (1.0, 0.5, 4.0, 2.0, 2.0),   # 1 + 0.5 * min(4, 2)
    (0.0, 0.9, -1.0, 3.0, -0.9),  # 0.9 * min(-1, 3)
    (2.0, 0.0, 4.0, 2.0, 2.0),   # terminated
]


def test_clipped_double_q_target_literals():
    assert_literals(lambda r, d, q1, q2: clipped_double_q_target(r, d, jnp.stack([q1, q2])),
                    DOUBLE_Q)
    assert_caught(lambda r, d, q1, q2: r + d * jnp.maximum(q1, q2), DOUBLE_Q)   # max
    assert_caught(lambda r, d, q1, q2: r + d * (q1 + q2) / 2, DOUBLE_Q)          # mean
    assert_caught(lambda r, d, q1, q2: r + d * q1, DOUBLE_Q)                     # first only
    g = jax.grad(clipped_double_q_target, argnums=2)(f32(1.0), f32(0.5), jnp.array([4.0, 2.0]))
    np.testing.assert_array_equal(g, [0.0, 0.0])


# (action, noise, sigma, noise_clip, smoothed) in a box [-2, 2]: half-width 2
SMOOTHING = [
    (0.0, 1.0, 0.25, 0.5, 0.5),    # 0 + clip(0.25 * 1, +-0.5) * 2 = 0.5
    (0.0, 3.0, 0.25, 0.5, 1.0),    # 0.75 clipped to 0.5, * 2 = 1
    (0.5, -4.0, 0.25, 0.5, -0.5),  # 0.5 + clip(-1, +-0.5) * 2 = 0.5 - 1
    (1.5, 1.0, 0.5, 0.5, 2.0),     # 1.5 + 0.5 * 2 = 2.5, clipped to the box's 2
    (-1.0, 2.0, 0.1, 0.5, -0.6),   # -1 + 0.2 * 2 = -0.6: inside both bounds
]
LO, HI = jnp.array([-2.0]), jnp.array([2.0])


def _smooth(a, n, s, c):
    return target_policy_smoothing(a[None], n[None], s, c, LO, HI)[0]


def test_target_policy_smoothing_literals():
    """TD3's smoothed target action: the noise clipped to +-noise_clip half-widths, the
    sum clipped to the box; each mutant leaves out or misplaces one clip or the scale."""
    assert_literals(_smooth, SMOOTHING)
    assert_caught(lambda a, n, s, c: jnp.clip(a + s * n * 2, -2, 2), SMOOTHING)  # noise unclipped
    assert_caught(lambda a, n, s, c: a + jnp.clip(s * n, -c, c) * 2, SMOOTHING)  # action unclipped
    assert_caught(lambda a, n, s, c: jnp.clip(a + jnp.clip(s * n, -c, c), -2, 2),
                  SMOOTHING)  # not scaled to the box
    assert_caught(lambda a, n, s, c: jnp.clip(a + jnp.clip(s * n * 2, -c, c), -2, 2),
                  SMOOTHING)  # clipped after scaling
    g = jax.grad(lambda a: jnp.sum(target_policy_smoothing(a, jnp.ones(1), 0.2, 0.5, LO, HI)))(
        jnp.zeros(1))
    np.testing.assert_array_equal(g, [0.0])  # a target: no gradient


# -- ranks --------------------------------------------------------------------------------------
B = jnp.ones(3)
S = f32(1.0)


@pytest.mark.parametrize("call", [
    lambda: clipped_surrogate_loss(B, S, 0.2),
    lambda: clipped_surrogate_loss(S, B, 0.2),
    lambda: value_loss(B, S),
    lambda: clipped_value_loss(S, B, S, 0.2),
    lambda: approx_kl(B),
    lambda: policy_gradient_loss(B, B),
    lambda: actor_critic_loss(B, S, S, 0.5, 0.01),
    lambda: soft_q_target(S, S, B, S, 0.2),
    lambda: soft_critic_loss(jnp.ones((2, 3)), B),
    lambda: soft_critic_loss(B, B),
    lambda: soft_actor_loss(B, B, 0.2),
    lambda: temperature_loss(S, B, -1.0),
    lambda: deterministic_policy_gradient_loss(B),
    lambda: clipped_double_q_target(S, S, jnp.ones((2, 3))),
], ids=["surrogate_ratio", "surrogate_adv", "value", "clipped_value", "kl", "pg",
        "actor_critic", "soft_target", "critic_q", "critic_target", "actor", "temperature",
        "dpg", "double_q"])
def test_batched_inputs_are_rejected(call):
    """The functions are unbatched: a batch axis must come from ``jax.vmap``."""
    with pytest.raises(AssertionError, match="rank"):
        call()


def test_rank_checks_hold_under_vmap():
    out = jax.vmap(clipped_surrogate_loss, (0, 0, None))(jnp.array([1.5, 0.5]),
                                                        jnp.array([2.0, 2.0]), EPS)
    np.testing.assert_allclose(out, [-2.5, -1.0])  # the first two rows of SURROGATE
    chex.assert_shape(out, (2,))


# -- the package ---------------------------------------------------------------------------
def test_losses_import_only_jax_chex_optax():
    """jaxrl_par.losses stays maths: no replay, networks, envs or algorithms."""
    allowed = {"__future__", "typing", "collections", "chex", "jax", "optax"}
    root = pathlib.Path(losses.__file__).parent
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in allowed or name.startswith("jaxrl_par.losses"), (path.name, name)


def test_losses_all_is_what_it_exports():
    assert sorted(losses.__all__) == losses.__all__
    for name in losses.__all__:
        assert hasattr(losses, name), name


def test_ppo_loss_at_the_collecting_parameters():
    """At the parameters that collected the data the ratio is 1 everywhere: no KL, nothing
    clipped, and the policy loss is -mean(A) = -mean(1, -3) = 1. The values' targets are
    V + [1, -1], with V_old = V: both value branches equal, 0.5 * mean(1, 1) = 0.5. The
    total is 1 + vf_coef * 0.5 - ent_coef * H = 1 + 0.25 - 0.01 H."""
    cfg = ppo.Config(hidden_sizes=(8,))
    network = cfg.actor_critic(envs.make(cfg.env, 1))
    obs = jax.random.normal(jax.random.key(0), (2, 4))
    params = network.init(jax.random.key(1), obs)
    dist, value = network.apply(params, obs)
    action = jnp.array([0, 1])
    batch = ppo.Batch(obs, action, dist.log_prob(action), value, jnp.array([1.0, -3.0]),
                      value + jnp.array([1.0, -1.0]))
    loss, info = ppo.ppo_loss(network, params, batch, cfg, cfg.clip_value_loss)
    assert tuple(info) == ppo.LOSS_METRICS
    assert float(info["approx_kl"]) == pytest.approx(0.0, abs=1e-7)
    assert float(info["clip_fraction"]) == 0.0
    assert float(info["policy_loss"]) == pytest.approx(1.0)
    assert float(info["value_loss"]) == pytest.approx(0.5)
    entropy = float(jnp.mean(dist.entropy()))
    assert float(loss) == pytest.approx(1.0 + 0.5 * 0.5 - 0.01 * entropy)
