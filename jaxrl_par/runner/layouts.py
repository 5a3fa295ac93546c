"""A training state's device layouts: one device's ``[S, ...]`` leaves and a mesh's
``[S, D, ...]`` (``D`` data shards), and the conversions between them that reading a run
and resuming it on another layout need. Pure numpy on host arrays."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _split_axis(local: tuple[int, ...], full: tuple[int, ...], d: int) -> int | None:
    """The axis along which a shard's ``local`` shape is ``d`` times smaller than one
    device's ``full`` shape, all other axes equal (None if there is no such axis)."""
    for axis, (n, m) in enumerate(zip(local, full, strict=True)):
        if n * d == m and local[:axis] + local[axis + 1:] == full[:axis] + full[axis + 1:]:
            return axis
    return None


def one_device_leaf(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """One leaf of a device mesh's ``[S, D, ...]`` state as one device's ``shape``.

    A leaf that is ``[S, D, *shape[1:]]`` was replicated over the data shards (parameters,
    optimiser state, counters) or is per shard at the same size (a shard's replay buffer):
    shard 0's copy. A leaf whose shard part is ``shape[1:]`` with one axis ``D`` times
    smaller was split over the shards along that axis (its envs): the shards concatenated
    along it in data order, as one device holds them. Anything else is returned unchanged
    (the caller compares shapes).
    """
    if x.shape == shape or x.ndim != len(shape) + 1:
        return x
    d, local, full = x.shape[1], x.shape[2:], shape[1:]
    if local == full:
        return x[:, 0]
    axis = _split_axis(local, full, d)
    return x if axis is None else np.concatenate([x[:, i] for i in range(d)], axis=axis + 1)


def mesh_leaf(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """One device's leaf ``[S, *full]`` in a mesh's layout ``shape = [S, D, *local]``, the
    inverse of :func:`one_device_leaf`: copied to every shard where ``local == full``,
    else split along the axis where ``local`` is ``D`` times smaller, shard ``d`` taking the
    ``d``-th block (data order). Anything else is returned unchanged."""
    if x.ndim != len(shape) - 1:
        return x
    d, local, full = shape[1], shape[2:], x.shape[1:]
    if local == full:
        return np.repeat(x[:, None], d, axis=1)
    axis = _split_axis(local, full, d)
    return x if axis is None else np.stack(np.split(x, d, axis=axis + 1), axis=1)


def relayout(one_device: list[tuple[int, ...]], saved_shards: int | None,
             warn: Callable[[str], None] | None = None) -> Callable:
    """A ``checkpoint.load`` reshape that reads a state saved on one layout (``saved_shards``
    data shards, ``None`` for one device) into the template's layout, through one device's
    shapes ``one_device``. ``warn`` hears once if a leaf held different values on the saved
    shards (per-shard replay buffers): every new shard then starts from shard 0's copy."""
    warned = []

    def reshape(i: int, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        full = one_device[i]
        if saved_shards is not None and x.ndim == len(full) + 1:
            if (warn is not None and not warned and x.shape[1] > 1
                    and (x.shape[0],) + x.shape[2:] == full
                    and not all(np.array_equal(x[:, 0], x[:, j]) for j in range(x.shape[1]))):
                warned.append(True)
                warn("per-shard state (e.g. replay buffers) cannot be split or merged exactly: "
                     "every shard of the new layout starts from shard 0's copy")
            x = one_device_leaf(x, full)
        return mesh_leaf(x, shape) if len(shape) == len(full) + 1 else x

    return reshape
