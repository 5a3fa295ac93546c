"""One prioritized replay sampled as a whole although each device holds a shard (Ape-X).

Ape-X (Horgan et al. 2018, arXiv:1803.00933) keeps one prioritized replay; with D
synchronous learners each device holds its own shard, and a learner batch must still be
drawn from the *global* distribution ``P(i) = p_i^alpha / sum_j p_j^alpha`` over every
shard, with importance weights from the global ``N`` and maximum weight.

Method (global stratified sampling): every shard draws the same ``B`` stratified
uniforms ``u`` (same key), scales them by the global total mass ``T = psum(T_d)``
and keeps the targets that fall into its own slice ``[O_d, O_d + T_d)`` of the mass
line (``O_d``: exclusive prefix sum of the shard totals, shard order = ``axis_index``).
The number of items a shard contributes is therefore drawn from the shard totals, and
the union of the shards' valid items is exactly the stratified sample a single buffer
holding every shard would draw. Probabilities divide by ``T`` and weights
``w_i = (N P(i))^-beta / max_j (N P(j))^-beta = (m_i / min_j m_j)^-beta`` use the
global minimum mass ``pmin(min_d)``.

Because a shard's count varies, its output has a static size ``max_per_shard`` (default
``B``: never drops) with a ``valid`` mask, valid items first. A loss over the global
batch is ``psum(sum(valid * w * loss)) / B``; :func:`weighted_batch` packages that for
a learner (Ape-X).
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from jaxrl_par import axes
from jaxrl_par.replay.prioritized import stratified_uniforms
from jaxrl_par.replay.types import Buffer, PyTree, Sample


class ShardSample(NamedTuple):
    """This shard's part of a global prioritized batch.

    Attributes:
      sample: ``Sample`` with ``[K]`` leaves (``K = max_per_shard``); ``probabilities``
        are global ``P(i)`` and ``weights`` global IS weights; invalid rows have
        probability and weight 0.
      valid: bool ``[K]``: rows that belong to the global batch (first ``count`` rows).
      count: int32 ``[]``: items this shard contributes (``psum(count) = B`` unless
        the buffers are empty).
      dropped: int32 ``[]``: valid items beyond ``K`` that did not fit (0 when ``K = B``).
    """

    sample: Sample
    valid: jax.Array
    count: jax.Array
    dropped: jax.Array


def _exclusive_prefix(total: jax.Array, axis_name: str | None) -> tuple[jax.Array, jax.Array]:
    """``(offset, global_total)`` of this shard's mass along ``axis_name``."""
    if axis_name is None:
        return jnp.zeros_like(total), total
    totals = jax.lax.all_gather(total, axis_name)  # [D]
    idx = axes.axis_index(axis_name)
    offset = jnp.sum(jnp.where(jnp.arange(totals.shape[0]) < idx, totals, 0.0))
    return offset, jnp.sum(totals)


def sample_global(
    buffer: Buffer,
    state,
    key: jax.Array,
    batch_size: int,
    beta: float | jax.Array = 0.4,
    axis_name: str | None = axes.DATA,
    max_per_shard: int | None = None,
) -> ShardSample:
    """Draws this shard's part of a ``batch_size`` global prioritized sample.

    Call it inside ``shard_map`` (or ``vmap(axis_name=...)``) with the same ``key`` on
    every shard.

    Args:
      buffer: a ``jaxrl_par.replay.prioritized`` buffer (any ``Buffer`` with
        ``total_priority``, ``min_priority`` and ``sample_at``).
      state: this shard's buffer state.
      key: PRNG key, identical on every shard.
      batch_size: global batch size ``B`` (static).
      beta: IS exponent.
      axis_name: the axis the shards live on (None: one shard, same as ``buffer.sample``).
      max_per_shard: static row count ``K`` of the output (default ``B``).

    Returns:
      A :class:`ShardSample`.
    """
    k = batch_size if max_per_shard is None else max_per_shard
    chex.assert_scalar_positive(batch_size)
    chex.assert_scalar_positive(k)
    local_total = buffer.total_priority(state)
    offset, global_total = _exclusive_prefix(local_total, axis_name)
    least = buffer.min_priority(state)
    if axis_name is not None:
        least = jax.lax.pmin(least, axis_name)
    targets = stratified_uniforms(key, batch_size) * global_total - offset  # [B]
    valid = (targets >= 0) & (targets < local_total)
    if axis_name is not None:  # the last shard owns the top edge (rounding of T)
        last = axes.axis_index(axis_name) == axes.axis_size(axis_name) - 1
        valid = valid | (last & (targets >= local_total) & (local_total > 0))
    count = jnp.sum(valid).astype(jnp.int32)
    order = jnp.argsort(~valid, stable=True)[:k]  # valid rows first, in batch order
    targets = jnp.clip(targets[order], 0.0, jnp.maximum(local_total, 0.0))
    keep = valid[order]
    sample = buffer.sample_at(state, targets, beta, total=global_total, min_priority=least)
    sample = sample._replace(
        probabilities=jnp.where(keep, sample.probabilities, 0.0),
        weights=jnp.where(keep, sample.weights, 0.0),
    )
    return ShardSample(sample=sample, valid=keep, count=count,
                       dropped=jnp.maximum(count - k, 0).astype(jnp.int32))


class WeightedBatch(NamedTuple):
    """A learner's rows of a prioritized batch and the weights of its loss.

    Attributes:
      indices: int32 ``[K]`` slots to pass to ``update_priorities``; ``-1`` for rows that
        are not part of the batch (``update_priorities`` skips them).
      transitions: the sampled pytree, leaves ``[K, ...]``.
      loss_weights: float32 ``[K]``: IS weights divided by their maximum over the whole
        (global) batch, 0 on rows outside it, and scaled so that ``mean(loss_weights *
        loss)`` on every shard, summed over the shards, is the IS-weighted mean loss of
        the global batch. Gradients of that per-shard mean are therefore ``psum``-ed.
      valid: bool ``[K]``: rows in the batch.
      dropped: int32 ``[]``: this shard's rows beyond ``K`` that did not fit.
    """

    indices: jax.Array
    transitions: PyTree
    loss_weights: jax.Array
    valid: jax.Array
    dropped: jax.Array


def batch_normalized_weights(weights: jax.Array, axis_name: str | None = None) -> jax.Array:
    """Importance weights divided by their batch maximum (``1 / max_i w_i``, Schaul et al.
    2016), over all shards of ``axis_name`` when given. Unlike normalising by the weight
    of the least priority in the whole buffer, one stale near-zero priority cannot shrink
    every step. Float32 ``[B] -> [B]``."""
    top = jnp.max(weights)
    if axis_name is not None:
        top = jax.lax.pmax(top, axis_name)
    return weights / jnp.maximum(top, 1e-12)


def weighted_batch(
    buffer: Buffer,
    state,
    key: jax.Array,
    batch_size: int,
    beta: float | jax.Array = 0.4,
    axis_name: str | None = None,
    max_per_shard: int | None = None,
) -> WeightedBatch:
    """A prioritized learner batch with loss weights, on one buffer or across shards.

    Without ``axis_name`` this is ``buffer.sample`` with the IS weights divided by their
    batch maximum (Schaul et al. 2016): ``K = batch_size`` rows, all valid. With
    ``axis_name`` (inside ``shard_map``/``vmap``, the same ``key`` on every shard) it is
    :func:`sample_global` of the *global* batch ``batch_size`` over all shards: each
    shard computes its ``K = max_per_shard`` (default ``batch_size``) rows, the
    weights use the global batch maximum and are scaled by ``K / batch_size``, so that
    ``psum(grad(mean(loss_weights * loss)))`` is the gradient of the global batch's
    weighted mean loss, the one a single buffer holding every shard would give.

    Args:
      buffer: a prioritized buffer.
      state: this shard's buffer state.
      key: PRNG key (identical on every shard).
      batch_size: the (global) batch size ``B``.
      beta: IS exponent.
      axis_name: the shard axis, or None for one buffer.
      max_per_shard: rows per shard ``K`` with ``axis_name`` (static).

    Returns:
      A :class:`WeightedBatch` with ``[K]`` rows.
    """
    if axis_name is None:
        sample = buffer.sample(state, key, batch_size, beta)
        valid = jnp.ones((batch_size,), bool)
        return WeightedBatch(sample.indices, sample.transitions,
                             batch_normalized_weights(sample.weights, None), valid, jnp.int32(0))
    k = batch_size if max_per_shard is None else max_per_shard
    shard = sample_global(buffer, state, key, batch_size, beta, axis_name, k)
    weights = batch_normalized_weights(shard.sample.weights, axis_name)  # rows outside the batch: 0
    return WeightedBatch(
        indices=jnp.where(shard.valid, shard.sample.indices, -1),
        transitions=shard.sample.transitions,
        loss_weights=weights * (k / batch_size),
        valid=shard.valid,
        dropped=shard.dropped,
    )
