"""Platform tuning (jaxrl_par.platform): the CPU convolution computes flax's, with flax's
parameters, and one setting switches it off."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par import platform
from jaxrl_par.platform.conv import Conv, patch_conv, patches, xla_conv


def test_patches_hold_each_window_in_kernel_order():
    x = jnp.arange(2 * 4 * 5 * 3, dtype=jnp.float32).reshape(2, 4, 5, 3)
    p = np.asarray(patches(x, 3, 2))  # [2, 2, 4, 3 * 2 * 3]
    assert p.shape == (2, 2, 4, 18)
    for i, j, a, b, c in [(0, 0, 0, 0, 0), (1, 3, 2, 1, 2), (0, 2, 1, 0, 1)]:
        assert p[1, i, j, (a * 2 + b) * 3 + c] == x[1, i + a, j + b, c]


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_conv_equals_flax_conv_values_gradients_and_parameters(padding):
    """The same parameter tree and initial values as ``flax.linen.Conv`` (one can load
    the other's checkpoints), the same outputs and gradients to float32 rounding, also
    with a batch of kernels under ``vmap`` (the runner's seeds)."""
    x = jax.random.uniform(jax.random.key(0), (5, 10, 10, 4))
    ours, theirs = Conv(16, (3, 3), padding=padding), nn.Conv(16, (3, 3), padding=padding)
    keys = jax.random.split(jax.random.key(1), 3)
    p_ours = jax.vmap(lambda k: ours.init(k, x))(keys)
    p_theirs = jax.vmap(lambda k: theirs.init(k, x))(keys)
    assert jax.tree.structure(p_ours) == jax.tree.structure(p_theirs)
    jax.tree.map(np.testing.assert_array_equal, p_ours, p_theirs)

    def loss(module, params):
        return jnp.sum(jnp.tanh(module.apply(params, x)) ** 2)

    for batched in (False, True):
        p = p_ours if batched else jax.tree.map(lambda a: a[0], p_ours)
        apply = (jax.vmap(lambda q, m: m.apply(q, x), in_axes=(0, None)) if batched
                 else lambda q, m: m.apply(q, x))
        np.testing.assert_allclose(apply(p, ours), apply(p, theirs), rtol=1e-5, atol=1e-5)
        grad = (jax.vmap(jax.grad(loss, argnums=1), in_axes=(None, 0)) if batched
                else jax.grad(loss, argnums=1))
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                     grad(ours, p), grad(theirs, p))


def test_both_lowerings_compute_the_same_cross_correlation():
    x = jax.random.normal(jax.random.key(2), (3, 6, 7, 2))
    k = jax.random.normal(jax.random.key(3), (3, 2, 2, 5))
    np.testing.assert_allclose(patch_conv(x, k), xla_conv(x, k), rtol=1e-5, atol=1e-5)


def test_one_setting_switches_tuning_off(monkeypatch):
    monkeypatch.delenv(platform.SETTING, raising=False)
    assert platform.tuning() and platform.conv_layer() is Conv
    monkeypatch.setenv(platform.SETTING, "off")
    assert not platform.tuning() and platform.conv_layer() is nn.Conv
    monkeypatch.setenv(platform.SETTING, "sometimes")
    with pytest.raises(ValueError, match="on or off"):
        platform.tuning()
