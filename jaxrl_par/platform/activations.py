"""Activation functions, computed on XLA:CPU in the form it runs fastest.

:func:`tanh` is ``jnp.tanh`` to float32 rounding. XLA:CPU evaluates its ``tanh`` op as a
rational approximation inside its own intrinsic; the same approximation written out in
plain multiplies, adds and one divide (which XLA fuses and vectorises like any arithmetic)
runs faster. On this project's 2-core CPU (one core, jax 0.10.2,
``benchmarks/activations.py``) the work above a plain ``x * c`` scan ran 1.37-1.46x faster
than ``jnp.tanh`` on ``[128 | 1024 | 4096, 64]`` float32, and PPO updates (two 64-64
tanh MLPs) ran 1.05x / 1.17x / 1.06x / 1.01x / 1.06x faster at 4 / 64 / 256 / 1024 / 4096
CartPole envs (1.00x on Breakout-MinAtar, where the 400-input products dominate).
Other platforms, and dtypes other than float32, use ``jnp.tanh``.

Accuracy (float32, against float64 ``numpy.tanh`` on 4M points in [-12, 12] and down to
1e-30): at most 4.4 ulp, as ``jnp.tanh`` on CPU (mean 1.2 ulp against its 0.4), odd, and
``|tanh(x)| <= 1``; it saturates within 4 ulp of ``±1`` (at ``±(1 - 2**-22)`` where XLA
contracts the arithmetic into FMAs; ``jnp.tanh`` at ``±1``), and NaN stays NaN. The
derivative is ``1 - tanh(x)**2``, as for ``jnp.tanh``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# The odd 13/6 rational approximation of tanh on [-CLAMP, CLAMP] that XLA and Eigen use
# for float32: tanh(x) ~ x * P(x^2) / Q(x^2), coefficients highest power first.
_NUMERATOR = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
              5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
              4.89352455891786e-03)
_DENOMINATOR = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                4.89352518554385e-03)
_CLAMP = 7.90531110763549805  # beyond it the approximation is 1 - 2**-22 in float32


def _horner(coefficients, x2):
    acc = jnp.asarray(coefficients[0], x2.dtype)
    for c in coefficients[1:]:
        acc = x2 * acc + c
    return acc


def rational_tanh(x: jax.Array) -> jax.Array:
    """float32 ``tanh`` as a rational function in plain arithmetic (any platform)."""
    x = jnp.clip(x, -_CLAMP, _CLAMP)
    x2 = x * x
    return x * _horner(_NUMERATOR, x2) / _horner(_DENOMINATOR, x2)


@jax.custom_jvp
def tanh(x: jax.Array) -> jax.Array:
    """Elementwise ``tanh`` (see the module docstring): :func:`rational_tanh` for float32
    on CPU, ``jnp.tanh`` otherwise. Any shape; same shape and dtype out."""
    x = jnp.asarray(x)
    if x.dtype != jnp.float32:
        return jnp.tanh(x)
    return jax.lax.platform_dependent(x, cpu=rational_tanh, default=jnp.tanh)


@tanh.defjvp
def _tanh_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    y = tanh(x)
    return y, dx * (1 - y * y)
