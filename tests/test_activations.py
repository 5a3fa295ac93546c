"""activations.tanh: jnp.tanh to float32 rounding, with its derivative, on CPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_par import networks
from jaxrl_par.platform import activations


def _points():
    return np.concatenate([
        np.linspace(-12, 12, 400_001),
        np.geomspace(1e-30, 12, 200_000), -np.geomspace(1e-30, 12, 200_000), [0.0, -0.0],
    ]).astype(np.float32)


def _ulps(y, x):
    ref = np.tanh(x.astype(np.float64))
    spacing = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    return np.abs(y.astype(np.float64) - ref) / spacing


@pytest.mark.xla_optimized  # the rounding of the program users run (FMAs fused)
def test_tanh_is_float32_tanh_within_jnp_tanh_error():
    x = _points()
    ours = np.asarray(jax.jit(activations.tanh)(x))
    theirs = np.asarray(jax.jit(jnp.tanh)(x))
    assert ours.dtype == np.float32 and ours.shape == x.shape
    # jnp.tanh on CPU is itself within ~4.4 ulp; ours may not be worse anywhere.
    assert _ulps(ours, x).max() <= max(_ulps(theirs, x).max(), 4.5)
    assert np.all(np.abs(ours) <= 1.0)
    np.testing.assert_array_equal(np.asarray(jax.jit(activations.tanh)(-x)), -ours)  # odd
    special = np.asarray(jax.jit(activations.tanh)(jnp.array([np.nan, np.inf, -np.inf, 0.0])))
    assert np.isnan(special[0])
    # Saturates within 4 ulp of 1 (1 - 2**-22 when XLA fuses it into FMAs), never above.
    np.testing.assert_allclose(special[1:], [1.0, -1.0, 0.0], rtol=0, atol=2.0**-22)


def test_tanh_runs_as_plain_arithmetic_on_cpu():
    # The point of the function: XLA's tanh kernel is not in the compiled CPU program.
    def compiled_text(f):
        return jax.jit(f).lower(jnp.zeros((8, 64))).compile().as_text()

    assert " tanh(" in compiled_text(jnp.tanh)  # how XLA's op reads in the text
    assert " tanh(" not in compiled_text(activations.tanh)


def test_tanh_gradient_is_one_minus_tanh_squared():
    x = jnp.asarray(np.linspace(-9, 9, 1001, dtype=np.float32))
    grad, y = jax.jit(lambda v: (jax.vmap(jax.grad(activations.tanh))(v),
                                 activations.tanh(v)))(x)
    np.testing.assert_allclose(grad, 1 - y * y, rtol=1e-6, atol=1e-7)
    # And it matches jnp.tanh's gradient to float32 rounding.
    np.testing.assert_allclose(grad, jax.vmap(jax.grad(jnp.tanh))(x), atol=1e-6)


def test_other_dtypes_use_jnp_tanh():
    x = jnp.linspace(-3, 3, 7, dtype=jnp.bfloat16)
    np.testing.assert_array_equal(np.asarray(activations.tanh(x), np.float32),
                                  np.asarray(jnp.tanh(x), np.float32))
    assert activations.tanh(x).dtype == jnp.bfloat16


def test_networks_use_it():
    assert networks.ACTIVATIONS["tanh"] is activations.tanh
