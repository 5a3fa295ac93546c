"""Dense and convolution layers whose products run on XLA:CPU's fast paths.

:class:`Dense` is a drop-in for ``flax.linen.Dense`` (same ``kernel [in, out]`` and
``bias [out]`` parameters, same names, so the same initial values and checkpoints) whose
weight gradient ``x^T dy`` is computed in the operand layout that XLA:CPU runs fastest,
whose products with 2-4 outputs (policy and Q heads) run as one matrix-vector product
per output, and whose products over 1-4 inputs (CartPole's observations into the first
layer; a 1-2 output head's input gradient) as that many broadcast products summed
(:func:`product`).

Why: in jaxlib 0.10 XLA:CPU sends a product whose operands both contract over their
leading axis (the weight gradient ``x^T dy``, ``[B, D] x [B, H] -> [D, H]``) to a slow
generic kernel, while the same product written with one operand transposed first goes to
the fast library path that the forward pass already uses. The gap is widest for narrow
outputs: the weight gradient of a 64 -> 2 policy head took 10 us at batch 128 and 208 us
at batch 2048, against 3 us and 25 us written the other way (``benchmarks/dense_grad.py``
times every form against the shapes below). Which form is fastest depends on the shape;
:func:`weight_gradient_form` picks one from a table measured with that script, and the
transposes are kept apart from the products by ``optimization_barrier`` so that XLA does
not fold them back into the slow form. Other platforms (GPU, TPU) use the plain product.

The gradient is the same product, so results agree with ``flax.linen.Dense`` to float32
rounding (the summation order can differ). Forward-mode differentiation (``jax.jvp``,
``jax.jacfwd``) of a network built from this layer is not supported (it is a
``jax.custom_vjp``); reverse mode, ``vmap``, ``jit`` and ``shard_map`` are.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

_barrier = jax.lax.optimization_barrier

#: The ways to write the weight gradient ``x [B, D]``, ``dy [B, H]`` -> ``[D, H]``.
WEIGHT_GRADIENT_FORMS: dict[str, Callable[[jax.Array, jax.Array], jax.Array]] = {
    # XLA's own form: both operands contract over their leading axis.
    "plain": lambda x, dy: x.T @ dy,
    # [H, D] product, then transposed apart: best for narrow outputs and wide inputs.
    "dy_x": lambda x, dy: _barrier(dy.T @ x).T,
    # dy transposed first, a row-major [H, B] x [B, D] product, transposed apart.
    "dyT_x": lambda x, dy: _barrier(_barrier(dy.T) @ x).T,
    # x transposed first, a row-major [D, B] x [B, H] product: best for narrow inputs.
    "xT_dy": lambda x, dy: _barrier(_barrier(x.T) @ dy),
}


def weight_gradient_form(batch: int, fan_in: int, fan_out: int) -> str:
    """The fastest :data:`WEIGHT_GRADIENT_FORMS` entry on XLA:CPU for these sizes.

    From ``benchmarks/dense_grad.py`` (jaxlib 0.10.2, one core; e.g. at batch 2048: a
    64 -> 2 head 208 us plain / 25 us ``dyT_x``; a 4 -> 64 input layer 19 / 11 us
    ``xT_dy``; 64 -> 64 297 / 199 us ``dyT_x``; 400 -> 64 1776 / 1351 us ``dy_x``).
    Large products (batch above 8192 for 64 -> 64, above 32768 for 4 -> 64) are fastest
    as XLA writes them. Outputs of up to 16 columns (the MinAtar CNN's 3x3, 16-channel
    conv, whose rows are images x positions: 65,536 for 1,024 images) take ``dyT_x`` at
    every batch: ``[65536, 36] -> 16`` 1.8 ms against 2.4 ms plain, and 3.4 ms plain under
    a size-1 ``vmap`` (the runner's seed axis), where XLA also copied the patches
    transposed; a PPO update on Breakout with 64 envs ran 1.5x faster for it.
    """
    if fan_out <= 16:
        return "dyT_x"
    if fan_in <= 8:
        return "xT_dy" if batch <= 32768 else "plain"
    if fan_in >= 256:
        return "dy_x"
    if batch <= 8192:
        return "dyT_x"
    return "plain"


def _cpu_weight_gradient(x: jax.Array, dy: jax.Array) -> jax.Array:
    form = weight_gradient_form(x.shape[0], x.shape[1], dy.shape[1])
    return WEIGHT_GRADIENT_FORMS[form](x, dy)


#: Products ``x [..., K] @ w [K, N]`` with ``N`` in this range are written as ``N``
#: matrix-vector products on CPU (see :func:`product`).
NARROW_OUTPUT = (2, 4)


#: Products ``x [..., K] @ w [K, N]`` with ``K`` up to this are written as ``K``
#: broadcast products summed, on CPU (see :func:`product`).
NARROW_CONTRACTION = 4


def _cpu_product(x: jax.Array, w: jax.Array,
                 narrow_contraction: int = NARROW_CONTRACTION) -> jax.Array:
    if 1 <= w.shape[0] <= narrow_contraction:
        y = x[..., 0:1] * w[0]
        for k in range(1, w.shape[0]):
            y = y + x[..., k : k + 1] * w[k]
        return y
    if NARROW_OUTPUT[0] <= w.shape[1] <= NARROW_OUTPUT[1]:
        return jnp.stack([x @ w[:, j] for j in range(w.shape[1])], axis=-1)
    return x @ w


def product(x: jax.Array, w: jax.Array) -> jax.Array:
    """``x [..., K] @ w [K, N] -> [..., N]``; on CPU, a narrow output (``N`` in
    :data:`NARROW_OUTPUT`, e.g. a policy head over 2-4 actions) as one matrix-vector
    product per column, stacked.

    jaxlib 0.10.2's XLA:CPU emits a matrix-vector product as its own vector kernel but
    sends ``N = 2`` to its general product, which runs it slowly. On one Zen 4 core, in a
    scan (BENCHMARKS.md, 2026-12-04), ``[4096, 64] @ [64, 2]`` took 103 us as one product
    and 37 us as two columns (2.8x); at 32768 rows 999 against 298 us, at 128 rows 2.9
    against 2.0 us; vmapped over 4 seeds 1.6-2.8x. Four columns gained 1.0-1.9x;
    from 6 on the columns lost somewhere, so wider outputs stay one product (as does
    ``N = 1``, already a matrix-vector product). The same sums, float32 rounding aside.

    A short contraction (``K`` up to :data:`NARROW_CONTRACTION`: the 4 observations of
    CartPole into the first layer, or the input gradient ``dy [B, 2] @ w.T`` of a
    2-action head) is written as ``K`` broadcast products summed, which XLA fuses with
    the bias, activation or mask around them into one loop instead of calling its
    product library with a 2-4 deep contraction. On one Zen 2 core (BENCHMARKS.md,
    2026-12-06), DQN's CartPole update at rejax's config (batch 128, 64-64 MLP) ran
    1.06x faster for the 2-action head's input gradient alone and 1.07-1.09x with the
    first layer too; PPO's 4-env CartPole update 1.03-1.04x, 64 to 4,096 envs and
    Breakout-MinAtar unchanged (within 1%) (``benchmarks/dense_grad.py --narrow-only``).
    One case loses: SAC's twin critics, an ``nn.vmap`` of kernels over one shared
    ``[256, 4]`` input, where the plain product is a single dot over both critics'
    kernels; its update ran 0.985x (0.982-0.990x in four runs; 1.00x without the
    4-term products). For ``K <= 2`` the sums are bitwise the product's here; for
    ``K = 3, 4`` they may differ in the last bit. Other platforms use the plain product."""
    return jax.lax.platform_dependent(x, w, cpu=_cpu_product, default=jnp.matmul)


@jax.custom_vjp
def dense_matmul(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """``x [..., D] @ kernel [D, H] -> [..., H]``, with the products of :func:`product`
    and the weight gradient of :func:`weight_gradient_form` on CPU."""
    return product(x, kernel)


def _matmul_fwd(x, kernel):
    return product(x, kernel), (x, kernel)


def _matmul_bwd(res, dy):
    x, kernel = res
    x2 = x.reshape(-1, x.shape[-1])
    dy2 = dy.reshape(-1, dy.shape[-1])
    d_kernel = jax.lax.platform_dependent(
        x2, dy2, cpu=_cpu_weight_gradient, default=WEIGHT_GRADIENT_FORMS["plain"])
    return product(dy, kernel.T), d_kernel.astype(kernel.dtype)


dense_matmul.defvjp(_matmul_fwd, _matmul_bwd)


class Dense(nn.Module):
    """``x [..., D] -> [..., features]``: ``x @ kernel + bias`` (see the module docstring).

    Attributes:
      features: output size ``H``.
      use_bias: add a learned ``bias [H]``.
      kernel_init, bias_init: initializers, as in ``flax.linen.Dense``.
    """

    features: int
    use_bias: bool = True
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros_init()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", self.kernel_init, (jnp.shape(x)[-1], self.features))
        # As flax's Dense, integer or bool inputs (e.g. raw image bytes) are promoted first.
        y = dense_matmul(x.astype(jnp.promote_types(x.dtype, kernel.dtype)), kernel)
        if self.use_bias:
            y = y + self.param("bias", self.bias_init, (self.features,))
        return y


class Conv(nn.Module):
    """``x [..., H, W, C] -> [..., H', W', features]``: a stride-1 2-D convolution written
    as :class:`Dense`'s product over the ``kh * kw`` shifted views of the input.

    A drop-in for ``flax.linen.Conv`` with unit strides and no dilation: the same
    ``kernel [kh, kw, C, features]`` and ``bias`` parameters and the same values (a
    cross-correlation, as XLA's). On XLA:CPU, ``nn.Conv``'s backward pass (and, under
    ``vmap`` over seeds, its grouped convolution) is several times slower than this
    product: a MinAtar DQN update with the 3x3, 16-channel torso took 60 ms with
    ``nn.Conv`` and 29 ms written this way, a PPO update on Breakout with 64 envs 26.4 s
    and 2.2 s (``benchmarks/dense_grad.py``, part 3).

    Attributes:
      features: output channels.
      kernel_size: ``(kh, kw)``.
      padding: ``"VALID"`` or ``"SAME"`` (zero padding, as ``nn.Conv``).
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
            raise ValueError(f"padding={self.padding!r}; layers.Conv takes 'VALID' or 'SAME'")
        kh, kw = self.kernel_size
        channels = jnp.shape(x)[-1]
        kernel = self.param("kernel", self.kernel_init, (kh, kw, channels, self.features))
        if self.padding == "SAME":
            pads = jax.lax.padtype_to_pads(x.shape[-3:-1], (kh, kw), (1, 1), "SAME")
            x = jnp.pad(x, [(0, 0)] * (x.ndim - 3) + list(pads) + [(0, 0)])
        height, width = x.shape[-3] - kh + 1, x.shape[-2] - kw + 1
        if height < 1 or width < 1:
            raise ValueError(f"input {x.shape[-3:-1]} is smaller than the kernel {(kh, kw)}")
        # The patches are taken in the input's dtype (uint8 images: a quarter of the bytes
        # to move) and promoted after, as flax promotes integer inputs.
        x = patches(x, kh, kw)
        x = x.astype(jnp.promote_types(x.dtype, kernel.dtype))
        y = dense_matmul(x, kernel.reshape(kh * kw * channels, self.features))
        if self.use_bias:
            y = y + self.param("bias", self.bias_init, (self.features,))
        return y


def patch_indices(height: int, width: int, channels: int, kh: int, kw: int) -> np.ndarray:
    """int32 ``[H' * W' * kh * kw * C]``: for each output position ``(i, j)`` and each
    ``(a, b, c)`` of the window, the flat index of ``x[i + a, j + b, c]`` in an
    ``[H, W, C]`` image, with ``H' = H - kh + 1`` and ``W' = W - kw + 1``."""
    i, j, a, b, c = np.meshgrid(np.arange(height - kh + 1), np.arange(width - kw + 1),
                                np.arange(kh), np.arange(kw), np.arange(channels),
                                indexing="ij")
    return (((i + a) * width + (j + b)) * channels + c).reshape(-1).astype(np.int32)


#: From this many images on, :func:`patches` gathers instead of concatenating.
GATHER_MIN_ROWS = 1024


def patches(x: jax.Array, kh: int, kw: int) -> jax.Array:
    """``x [..., H, W, C] -> [..., H', W', kh * kw * C]``: the ``kh x kw`` window at every
    valid position, ``out[..., i, j, (a * kw + b) * C + c] = x[..., i + a, j + b, c]`` (the
    row order of ``kernel.reshape(kh * kw * C, features)``).

    Two ways, the same values, picked by the number of images (a static shape):

    * from :data:`GATHER_MIN_ROWS` images on, one gather with a fixed index per image;
    * below, two concatenations: the ``kw`` column shifts (runs of ``C`` values), then
      the ``kh`` row shifts of that (runs of ``kw * C``).

    Both replace one concatenation of the ``kh * kw`` shifted views, which copies runs of
    only ``C`` values. Whole updates on Breakout-MinAtar, one core, 4 seeds under vmap,
    against that concatenation in float32: PPO (64 envs, 2,048-row minibatches) 1.34x
    with the gather and 1.21-1.25x with the two concatenations; DQN (64-row batches)
    0.92x and 1.03-1.04x; Ape-X 1.08x and 1.11-1.13x.
    """
    *lead, height, width, channels = x.shape
    h, w = height - kh + 1, width - kw + 1
    if math.prod(lead) >= GATHER_MIN_ROWS:
        idx = jnp.asarray(patch_indices(height, width, channels, kh, kw))
        flat = x.reshape(tuple(lead) + (height * width * channels,))
        out = jnp.take(flat, idx, axis=-1, mode="clip")  # in bounds by construction
        return out.reshape(tuple(lead) + (h, w, kh * kw * channels))
    columns = jnp.concatenate([x[..., :, b:b + w, :] for b in range(kw)], axis=-1)
    return jnp.concatenate([columns[..., a:a + h, :, :] for a in range(kh)], axis=-1)
