"""layers.Dense: same parameters as flax's Dense, same gradients in every weight-gradient form."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par import layers
from jaxrl_par.networks import ActorCritic, QNetwork, orthogonal

# One shape per branch of weight_gradient_form, plus leading axes and a batch of one.
SHAPES = [  # (leading axes of x, fan_in, fan_out)
    ((128,), 4, 64),      # narrow input
    ((128,), 64, 64),     # hidden, small batch
    ((9000,), 64, 64),    # hidden, large batch: plain
    ((128,), 64, 2),      # narrow output, small batch
    ((3000,), 64, 3),     # narrow output, larger batch
    ((64,), 400, 64),     # wide input
    ((4, 32), 64, 6),     # several leading axes
    ((1,), 16, 16),
]


def _loss(dense, params, x, y):
    return jnp.sum(jnp.tanh(dense.apply(params, x)) * y)


@pytest.mark.parametrize("lead, fan_in, fan_out", SHAPES)
def test_dense_matches_flax_dense_in_value_and_gradient(lead, fan_in, fan_out):
    kx, ky, kp = jax.random.split(jax.random.key(fan_in * 1000 + fan_out), 3)
    x = jax.random.normal(kx, lead + (fan_in,))
    y = jax.random.normal(ky, lead + (fan_out,))
    ours, ref = layers.Dense(fan_out), nn.Dense(fan_out)
    params = ours.init(kp, x)
    # Same parameter tree and the same initial values, bit for bit.
    ref_params = ref.init(kp, x)
    assert jax.tree.structure(params) == jax.tree.structure(ref_params)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref_params)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(ours.apply(params, x), ref.apply(params, x), rtol=1e-6, atol=1e-6)
    g = jax.jit(jax.grad(lambda p: _loss(ours, p, x, y)))(params)
    g_ref = jax.jit(jax.grad(lambda p: _loss(ref, p, x, y)))(params)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5 * float(jnp.max(jnp.abs(b))))
    # The gradient with respect to the input as well (used by torsos below the first layer).
    gx = jax.grad(lambda v: _loss(ours, params, v, y))(x)
    gx_ref = jax.grad(lambda v: _loss(ref, params, v, y))(x)
    np.testing.assert_allclose(gx, gx_ref, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("form", sorted(layers.WEIGHT_GRADIENT_FORMS))
def test_every_weight_gradient_form_is_x_transpose_dy(form):
    kx, ky = jax.random.split(jax.random.key(1))
    x, dy = jax.random.normal(kx, (300, 24)), jax.random.normal(ky, (300, 5))
    expected = np.asarray(x, np.float64).T @ np.asarray(dy, np.float64)
    got = jax.jit(layers.WEIGHT_GRADIENT_FORMS[form])(x, dy)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_weight_gradient_form_table():
    f = layers.weight_gradient_form
    assert f(128, 4, 64) == "xT_dy"
    assert f(8192, 400, 64) == "dy_x"
    assert f(128, 64, 2) == "dyT_x" and f(131072, 64, 2) == "dyT_x"
    assert f(131072, 4, 64) == "plain"
    assert f(2048, 64, 64) == "dyT_x" and f(131072, 64, 64) == "plain"


def test_vmapped_gradient_equals_per_seed_gradients():
    """Seeds are vmapped by the runner: the custom backward must batch correctly."""
    net = ActorCritic(num_actions=2, obs_shape=(4,))
    keys = jax.random.split(jax.random.key(3), 3)
    obs = jax.random.normal(jax.random.key(4), (3, 128, 4))
    params = jax.vmap(lambda k: net.init(k, obs[0]))(keys)

    def loss(p, o):
        dist, value = net.apply(p, o)
        return jnp.sum(dist.logits ** 2) + jnp.sum(value)

    batched = jax.jit(jax.vmap(jax.grad(loss)))(params, obs)
    for i in range(3):
        single = jax.grad(loss)(jax.tree.map(lambda a, i=i: a[i], params), obs[i])
        for a, b in zip(jax.tree.leaves(batched), jax.tree.leaves(single)):
            np.testing.assert_allclose(a[i], b, rtol=1e-5, atol=1e-6)


def test_networks_keep_flax_dense_parameter_names():
    """Checkpoints written with flax's Dense load into the same tree."""
    q = QNetwork(num_actions=3, obs_shape=(4,), dueling=True)
    params = q.init(jax.random.key(0), jnp.zeros((1, 4)))["params"]
    assert set(params) == {"MLP_0", "Dense_0", "Dense_1"}
    assert set(params["MLP_0"]) == {"Dense_0", "Dense_1"}
    assert set(params["Dense_1"]) == {"kernel", "bias"}
    # An orthogonal-initialised kernel through our Dense is the one flax's Dense makes.
    init = orthogonal(1.0)
    ours = layers.Dense(8, kernel_init=init).init(jax.random.key(5), jnp.zeros((1, 8)))
    ref = nn.Dense(8, kernel_init=init).init(jax.random.key(5), jnp.zeros((1, 8)))
    np.testing.assert_array_equal(ours["params"]["kernel"], ref["params"]["kernel"])


@pytest.mark.parametrize("padding, kernel_size, shape", [
    ("VALID", (3, 3), (5, 10, 10, 4)),
    ("SAME", (3, 3), (2, 7, 9, 3)),
    ("VALID", (2, 3), (3, 6, 5, 2)),
    ("SAME", (4, 2), (2, 6, 5, 2)),
])
def test_conv_matches_flax_conv_in_value_and_gradient(padding, kernel_size, shape):
    kx, ky, kp = jax.random.split(jax.random.key(7), 3)
    x = jax.random.normal(kx, shape)
    ours = layers.Conv(8, kernel_size, padding=padding)
    ref = nn.Conv(8, kernel_size, padding=padding)
    params = ours.init(kp, x)
    ref_params = ref.init(kp, x)
    assert jax.tree.structure(params) == jax.tree.structure(ref_params)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref_params)):
        np.testing.assert_array_equal(a, b)
    out, out_ref = ours.apply(params, x), ref.apply(params, x)
    assert out.shape == out_ref.shape
    np.testing.assert_allclose(out, out_ref, rtol=1e-5, atol=1e-5)
    y = jax.random.normal(ky, out.shape)
    g = jax.jit(jax.grad(lambda p, v: _loss(ours, p, v, y), argnums=(0, 1)))(params, x)
    g_ref = jax.jit(jax.grad(lambda p, v: _loss(ref, p, v, y), argnums=(0, 1)))(params, x)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_conv_under_vmap_equals_per_seed_conv():
    x = jax.random.normal(jax.random.key(8), (3, 4, 10, 10, 4))
    conv = layers.Conv(16)
    params = jax.vmap(lambda k: conv.init(k, x[0]))(jax.random.split(jax.random.key(9), 3))

    def loss(p, v):
        return jnp.sum(jnp.tanh(conv.apply(p, v)))

    batched = jax.jit(jax.vmap(jax.grad(loss)))(params, x)
    for i in range(3):
        single = jax.grad(loss)(jax.tree.map(lambda a, i=i: a[i], params), x[i])
        for a, b in zip(jax.tree.leaves(batched), jax.tree.leaves(single)):
            # Sums of ~1000 terms of size ~10 in another order: float32 rounding.
            np.testing.assert_allclose(a[i], b, rtol=1e-4, atol=1e-6 * float(jnp.max(jnp.abs(b))))


def test_conv_rejects_what_it_does_not_compute():
    x = jnp.zeros((1, 5, 5, 2))
    with pytest.raises(ValueError, match="padding"):
        layers.Conv(4, padding="CIRCULAR").init(jax.random.key(0), x)
    with pytest.raises(ValueError, match="smaller than the kernel"):
        layers.Conv(4, (7, 7)).init(jax.random.key(0), x)
