"""layers.Dense: same parameters as flax's Dense, same gradients in every weight-gradient form."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par.networks import ActorCritic, QNetwork, orthogonal
from jaxrl_par.platform import layers

# One shape per branch of weight_gradient_form and of layers.product (fan_out 2-4 as
# columns on CPU), plus leading axes and a batch of one.
SHAPES = [  # (leading axes of x, fan_in, fan_out)
    ((128,), 4, 64),      # narrow input
    ((128,), 64, 64),     # hidden, small batch
    ((9000,), 64, 64),    # hidden, large batch: plain
    ((128,), 64, 2),      # narrow output, small batch
    ((3000,), 64, 3),     # narrow output, larger batch
    ((64,), 400, 64),     # wide input
    ((4, 32), 64, 6),     # several leading axes
    ((4, 32), 64, 4),     # narrow output, columns on CPU, several leading axes
    ((1,), 16, 16),
    ((128,), 64, 1),      # a value head: its input gradient is a one-term product
    ((5, 7), 3, 8),       # a three-term contraction with leading axes
]


def _normal(seed, shape):
    """Test data from numpy: jax.random's normal compiles for seconds on a slow CPU."""
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def _fixed_init(key, shape, dtype=jnp.float32):
    """A deterministic kernel (no random-number compile); the same for both layers."""
    return jnp.sin(jnp.arange(np.prod(shape), dtype=dtype)).reshape(shape)


def _loss(dense, params, x, y):
    return jnp.sum(jnp.tanh(dense.apply(params, x)) * y)


def _value_and_grads(layer, params, x, y):
    """``(layer(x), d loss / d params, d loss / d x)`` in one compiled call."""
    @jax.jit
    def f(p, v):
        return layer.apply(p, v), jax.grad(lambda p, v: _loss(layer, p, v, y), (0, 1))(p, v)
    out, (g_params, g_x) = f(params, x)
    return out, g_params, g_x


def _assert_same_init(ours, ref, key, x):
    params, ref_params = jax.jit(ours.init)(key, x), jax.jit(ref.init)(key, x)
    assert jax.tree.structure(params) == jax.tree.structure(ref_params)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref_params)):
        np.testing.assert_array_equal(a, b)
    return params


@pytest.mark.parametrize("lead, fan_in, fan_out", SHAPES)
def test_dense_matches_flax_dense_in_value_and_gradient(lead, fan_in, fan_out):
    x = _normal(fan_in, lead + (fan_in,))
    y = _normal(fan_out, lead + (fan_out,))
    ours = layers.Dense(fan_out, kernel_init=_fixed_init)
    ref = nn.Dense(fan_out, kernel_init=_fixed_init)
    params = _assert_same_init(ours, ref, jax.random.key(0), x)
    out, g, gx = _value_and_grads(ours, params, x, y)
    out_ref, g_ref, gx_ref = _value_and_grads(ref, params, x, y)
    np.testing.assert_allclose(out, out_ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5 * float(jnp.max(jnp.abs(b))))
    # The gradient with respect to the input as well (used by torsos below the first layer).
    np.testing.assert_allclose(gx, gx_ref, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_short_contractions_compile_to_broadcast_products_on_cpu(k):
    """Up to NARROW_CONTRACTION terms, product() is a fused sum with no dot on CPU (the
    reason it exists); the value is x @ w either way."""
    x, w = _normal(k, (2, 33, k)), _normal(k + 10, (k, 24))
    f = jax.jit(layers.product)
    expected = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    np.testing.assert_allclose(f(x, w), expected, rtol=1e-5, atol=1e-5)
    hlo = f.lower(x, w).compile().as_text()
    has_dot = " dot(" in hlo or "__ynn_fusion" in hlo or "__xnn_fusion" in hlo
    assert has_dot == (k > layers.NARROW_CONTRACTION), hlo[:2000]


@pytest.mark.parametrize("form", sorted(layers.WEIGHT_GRADIENT_FORMS))
def test_every_weight_gradient_form_is_x_transpose_dy(form):
    x, dy = _normal(1, (300, 24)), _normal(2, (300, 5))
    expected = np.asarray(x, np.float64).T @ np.asarray(dy, np.float64)
    got = jax.jit(layers.WEIGHT_GRADIENT_FORMS[form])(x, dy)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_weight_gradient_form_table():
    f = layers.weight_gradient_form
    assert f(128, 4, 64) == "xT_dy"
    assert f(8192, 400, 64) == "dy_x"
    assert f(128, 64, 2) == "dyT_x" and f(131072, 64, 2) == "dyT_x"
    assert f(65536, 36, 16) == "dyT_x"  # the MinAtar conv, 1,024 images x 64 positions
    assert f(131072, 4, 64) == "plain"
    assert f(2048, 64, 64) == "dyT_x" and f(131072, 64, 64) == "plain"


def test_vmapped_gradient_equals_per_seed_gradients():
    """Seeds are vmapped by the runner: the custom backward must batch correctly."""
    net = ActorCritic(num_actions=2, obs_shape=(4,))
    keys = jax.random.split(jax.random.key(3), 3)
    obs = _normal(4, (3, 128, 4))
    params = jax.jit(jax.vmap(lambda k: net.init(k, obs[0])))(keys)

    def loss(p, o):
        dist, value = net.apply(p, o)
        return jnp.sum(dist.logits ** 2) + jnp.sum(value)

    batched = jax.jit(jax.vmap(jax.grad(loss)))(params, obs)
    grad = jax.jit(jax.grad(loss))
    for i in range(3):
        single = grad(jax.tree.map(lambda a, i=i: a[i], params), obs[i])
        for a, b in zip(jax.tree.leaves(batched), jax.tree.leaves(single)):
            np.testing.assert_allclose(a[i], b, rtol=1e-5, atol=1e-6)


def test_networks_keep_flax_parameter_names_and_initial_values():
    """Checkpoints written with flax's Dense load into the same tree."""
    q = QNetwork(num_actions=3, obs_shape=(4,), dueling=True)
    params = q.init(jax.random.key(0), jnp.zeros((1, 4)))["params"]
    assert set(params) == {"MLP_0", "Dense_0", "Dense_1"}
    assert set(params["MLP_0"]) == {"Dense_0", "Dense_1"}
    assert set(params["Dense_1"]) == {"kernel", "bias"}
    # Our kernels are the ones flax's layers make: orthogonal (as the networks use) and
    # the layers' default initializers.
    x, img = jnp.zeros((1, 8)), jnp.zeros((1, 5, 5, 2))
    _assert_same_init(layers.Dense(8, kernel_init=orthogonal(1.0)),
                      nn.Dense(8, kernel_init=orthogonal(1.0)), jax.random.key(5), x)
    _assert_same_init(layers.Dense(8), nn.Dense(8), jax.random.key(5), x)
    _assert_same_init(layers.Conv(4, (3, 3)), nn.Conv(4, (3, 3), padding="VALID"),
                      jax.random.key(6), img)


@pytest.mark.parametrize("padding, kernel_size, shape", [
    ("VALID", (3, 3), (5, 10, 10, 4)),  # the MinAtar torso
    ("SAME", (4, 2), (2, 6, 5, 2)),     # even kernel: uneven SAME padding
])
def test_conv_matches_flax_conv_in_value_and_gradient(padding, kernel_size, shape):
    x = _normal(7, shape)
    ours = layers.Conv(8, kernel_size, padding=padding, kernel_init=_fixed_init)
    ref = nn.Conv(8, kernel_size, padding=padding, kernel_init=_fixed_init)
    params = _assert_same_init(ours, ref, jax.random.key(0), x)
    y = _normal(8, jax.eval_shape(ref.apply, params, x).shape)
    out, g, gx = _value_and_grads(ours, params, x, y)
    out_ref, g_ref, gx_ref = _value_and_grads(ref, params, x, y)
    assert out.shape == out_ref.shape
    np.testing.assert_allclose(out, out_ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree.leaves((g, gx)), jax.tree.leaves((g_ref, gx_ref))):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_conv_under_vmap_equals_per_seed_conv():
    x = _normal(8, (3, 4, 10, 10, 4))
    conv = layers.Conv(16)
    params = jax.jit(jax.vmap(lambda k: conv.init(k, x[0])))(jax.random.split(jax.random.key(9), 3))

    def loss(p, v):
        return jnp.sum(jnp.tanh(conv.apply(p, v)))

    batched = jax.jit(jax.vmap(jax.grad(loss)))(params, x)
    grad = jax.jit(jax.grad(loss))
    for i in range(3):
        single = grad(jax.tree.map(lambda a, i=i: a[i], params), x[i])
        for a, b in zip(jax.tree.leaves(batched), jax.tree.leaves(single)):
            # Sums of ~1000 terms of size ~10 in another order: float32 rounding.
            np.testing.assert_allclose(a[i], b, rtol=1e-4, atol=1e-6 * float(jnp.max(jnp.abs(b))))


def test_integer_inputs_are_promoted_as_flax_does():
    """Raw uint8 observations go in as floats; the parameter gradient still flows."""
    img = jnp.asarray(np.random.default_rng(3).integers(0, 2, (2, 10, 10, 4)), jnp.uint8)
    for ours, ref in ((layers.Conv(4, kernel_init=_fixed_init),
                       nn.Conv(4, (3, 3), padding="VALID", kernel_init=_fixed_init)),
                      (layers.Dense(3, kernel_init=_fixed_init),
                       nn.Dense(3, kernel_init=_fixed_init))):
        params = _assert_same_init(ours, ref, jax.random.key(0), img)
        np.testing.assert_allclose(ours.apply(params, img), ref.apply(params, img),
                                   rtol=1e-5, atol=1e-5)
        g = jax.grad(lambda p, m=ours: jnp.sum(m.apply(p, img) ** 2))(params)
        g_ref = jax.grad(lambda p, m=ref: jnp.sum(m.apply(p, img) ** 2))(params)
        for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_conv_rejects_what_it_does_not_compute():
    x = jnp.zeros((1, 5, 5, 2))
    with pytest.raises(ValueError, match="padding"):
        layers.Conv(4, padding="CIRCULAR").init(jax.random.key(0), x)
    with pytest.raises(ValueError, match="smaller than the kernel"):
        layers.Conv(4, (7, 7)).init(jax.random.key(0), x)


@pytest.mark.parametrize("rows", [3, layers.GATHER_MIN_ROWS])  # both ways of building them
@pytest.mark.parametrize("dtype", [jnp.uint8, jnp.float32])
def test_patches_equal_the_shifted_views(rows, dtype):
    """patches[..., i, j, (a * kw + b) * C + c] == x[..., i + a, j + b, c], exactly, with
    a non-square kernel and image and a leading axis of each size."""
    x = jnp.asarray(np.random.default_rng(4).integers(0, 200, (rows, 7, 6, 3)), dtype)
    kh, kw = 3, 2
    p = layers.patches(x, kh, kw)
    assert p.shape == (rows, 5, 5, kh * kw * 3) and p.dtype == dtype
    ref = np.concatenate([np.asarray(x)[:, a:a + 5, b:b + 5, :]
                          for a in range(kh) for b in range(kw)], axis=-1)
    np.testing.assert_array_equal(p, ref)
    # Under vmap the per-seed leading size decides the way; the values do not change.
    np.testing.assert_array_equal(jax.vmap(lambda v: layers.patches(v, kh, kw))(x[None]),
                                  ref[None])
