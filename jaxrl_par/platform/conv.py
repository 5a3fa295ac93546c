"""A 2-D convolution that XLA:CPU runs as one matrix product over image patches.

The runner trains every seed of a run under ``jax.vmap``, so each convolution sees a
batch of kernels, one per seed. XLA lowers that to a grouped convolution, for which
XLA:CPU has no fast kernel: its forward and backward passes fall to a generic loop.
:class:`Conv` computes the same cross-correlation on CPU as ``patches(x) @ kernel``: the
``kh x kw`` windows of the input gathered into rows, then one product, whose batched
form (a product per seed) and whose gradients XLA:CPU runs with its matrix library. On
other platforms it is XLA's convolution, as ``flax.linen.Conv`` computes it. The choice
is made when the program is lowered for a device (``jax.lax.platform_dependent``), so
one traced program serves both.

Parameters (``kernel [kh, kw, C, features]``, ``bias [features]``), initial values and
results are those of ``flax.linen.Conv`` with unit strides (up to float32 summation
order); everything is plain ``jnp``, so every autodiff mode works through it.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp


def patches(x: jax.Array, kh: int, kw: int) -> jax.Array:
    """``x [..., H, W, C] -> [..., H', W', kh * kw * C]``: the ``kh x kw`` window at every
    valid position, ``out[..., i, j, (a * kw + b) * C + c] = x[..., i + a, j + b, c]`` (the
    row order of ``kernel.reshape(kh * kw * C, features)``), with ``H' = H - kh + 1`` and
    ``W' = W - kw + 1``. Built as two concatenations: the ``kw`` column shifts, then the
    ``kh`` row shifts of those."""
    *_, height, width, _ = x.shape
    h, w = height - kh + 1, width - kw + 1
    columns = jnp.concatenate([x[..., :, b:b + w, :] for b in range(kw)], axis=-1)
    return jnp.concatenate([columns[..., a:a + h, :, :] for a in range(kh)], axis=-1)


def patch_conv(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """``x [B, H, W, C]`` cross-correlated with ``kernel [kh, kw, C, F]``, unit strides,
    no padding: ``[B, H', W', F]``, as one product over :func:`patches`."""
    kh, kw, channels, features = kernel.shape
    return patches(x, kh, kw) @ kernel.reshape(kh * kw * channels, features)


def xla_conv(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """The same as :func:`patch_conv` with XLA's convolution (``flax.linen.Conv``'s)."""
    return jax.lax.conv_general_dilated(x, kernel, window_strides=(1, 1), padding="VALID",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


class Conv(nn.Module):
    """``x [B, H, W, C] -> [B, H', W', features]``: ``flax.linen.Conv`` with unit strides,
    run as :func:`patch_conv` on CPU and as :func:`xla_conv` elsewhere.

    Attributes:
      features: output channels.
      kernel_size: ``(kh, kw)``.
      padding: ``"VALID"`` or ``"SAME"`` (zero padding, as ``flax.linen.Conv``'s).
      use_bias, kernel_init, bias_init: as in ``flax.linen.Conv``.
    """

    features: int
    kernel_size: tuple[int, int] = (3, 3)
    padding: str = "VALID"
    use_bias: bool = True
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros_init()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.padding not in ("VALID", "SAME"):
            raise ValueError(f"padding={self.padding!r}; platform.conv.Conv takes 'VALID' or "
                             "'SAME'")
        kh, kw = self.kernel_size
        kernel = self.param("kernel", self.kernel_init, (kh, kw, x.shape[-1], self.features))
        if self.padding == "SAME":
            pads = jax.lax.padtype_to_pads(x.shape[-3:-1], (kh, kw), (1, 1), "SAME")
            x = jnp.pad(x, [(0, 0)] * (x.ndim - 3) + list(pads) + [(0, 0)])
        x = x.astype(jnp.promote_types(x.dtype, kernel.dtype))
        y = jax.lax.platform_dependent(x, kernel, cpu=patch_conv, default=xla_conv)
        if self.use_bias:
            y = y + self.param("bias", self.bias_init, (self.features,))
        return y
